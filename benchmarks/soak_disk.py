"""Disk use of a long run: internal topics stay bounded, only the user's topics grow.

Runs the demo's word pairs (a grouping: shuffle, changelog and pre-barrier topics, acks)
on the embedded stack with lines produced at a steady rate for a while, and every
``--sample`` seconds prints the bytes the broker keeps in log segments per kind of topic, from its
log directories. The topic janitor trims acks, shuffle and pre-barrier topics below what
their readers may read again; changelogs, min times and acker checkpoints are compacted;
segments roll every 10 minutes (`framework.kafka.topics`), so internal bytes level off
while the input, output and bundle topics grow with the input. At the end the output is
checked against the oracle of the stored input (exactly once, through everything trimmed).

Run: ``.venv/bin/python benchmarks/soak_disk.py [--minutes 60] [--rate 250] [--sample 60]``.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.kafka.clients import new_producer, read_to_end
from framework.local.provision import provision
from framework.spark import SparkRunner

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def _kind(topic: str, app: str) -> str:
    if topic.startswith("__"):
        return "kafka's own"
    if topic in (f"{app}-lines",):
        return "input"
    if topic.startswith(f"{app}-pairs"):
        return "output+bundles"
    if topic.endswith(".acks"):
        return "acks"
    if topic.endswith(".pre"):
        return "pre-barrier"
    if topic.endswith(".state"):
        return "changelogs"
    if topic.endswith((".mintime", ".acker")):
        return "min times+checkpoints"
    if topic.endswith(".dlq"):
        return "dead letters"
    return "shuffles"


def _disk(state_dir: Path, app: str) -> Counter[str]:
    sizes: Counter[str] = Counter()
    for directory in state_dir.rglob("*"):
        found = _PARTITION_DIR.match(directory.name)
        if directory.is_dir() and found and any(directory.glob("*.log")):
            # Log segments only: index files are preallocated (10 MB each) whatever they hold.
            total = sum(f.stat().st_size for f in directory.glob("*.log"))
            sizes[_kind(found["topic"], app)] += total
    return sizes


_KINDS = ["acks", "shuffles", "pre-barrier", "changelogs", "min times+checkpoints", "input",
          "output+bundles"]  # fmt: skip


def _verify(bootstrap: str, source: str, sink: str, delta_ms: int) -> None:
    """The output against the oracle of the stored input."""
    output = Counter(
        pair_key(json.loads(m.value() or b"null"))
        for m in read_to_end(bootstrap, sink, timeout_s=600)
    )
    exact = output == word_pairs_oracle(bootstrap, source, delta_ms)
    print(f"output {sum(output.values()):,} items: {'exactly once' if exact else 'WRONG'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=250, help="lines per second")
    parser.add_argument("--sample", type=float, default=60, help="seconds between samples")
    args = parser.parse_args()
    with provision() as settings:
        app = f"soak{uuid.uuid4().hex[:6]}"
        source, sink = f"{app}-lines", f"{app}-pairs"
        run = SparkRunner(settings).start(word_pairs(app, source, sink).graph())
        stop = threading.Event()
        produced = [0]

        def produce() -> None:
            producer = new_producer(settings.kafka_bootstrap, {"linger.ms": 5})
            seed, start = 0, time.monotonic()
            while not stop.is_set():
                for line in generate_lines(args.rate, seed=seed):
                    producer.produce(source, value=f"{produced[0]} {line}".encode())
                    produced[0] += 1
                producer.poll(0)
                seed += 1
                stop.wait(max(0.0, start + seed - time.monotonic()))
            producer.flush(60)

        feeder = threading.Thread(target=produce, daemon=True)
        feeder.start()
        print("minute  " + "  ".join(f"{k[:14]:>14}" for k in _KINDS) + "   (MB of log segments)")
        started = time.monotonic()
        samples: list[Counter[str]] = []
        try:
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(args.sample)
                run.check()
                sizes = _disk(settings.state_dir, app)
                samples.append(sizes)
                minute = (time.monotonic() - started) / 60
                cells = "  ".join(f"{sizes[k] / 1e6:14.1f}" for k in _KINDS)
                trimmed = run.janitor.trimmed if run.janitor is not None else 0
                print(f"{minute:6.1f}  {cells}   trimmed {trimmed:,} records", flush=True)
        finally:
            stop.set()
            feeder.join(60)
        until = time.time_ns() // 1_000_000
        run.wait_released(until, timeout_s=600)
        run.stop()
        internal = ["acks", "shuffles", "pre-barrier", "changelogs", "min times+checkpoints"]
        half = len(samples) // 2
        first = max(sum(s[k] for k in internal) for s in samples[: max(1, half)])
        last = max(sum(s[k] for k in internal) for s in samples[half:] or samples)
        print(
            f"{produced[0]:,} lines; internal topics: max {first / 1e6:.1f} MB in the first "
            f"half, {last / 1e6:.1f} MB in the second"
        )
        _verify(settings.kafka_bootstrap, source, sink, DEFAULT_DELTA_MS)


if __name__ == "__main__":
    main()
