"""The main demo: word count on the embedded stack, verified, with latency.

The pipeline is `word_pairs`: for every occurrence of a word, the line it occurred on and
the line of its previous occurrence (a window-2 grouping per word, so out-of-order
arrivals are repaired with tombstones). Counting the released occurrences per word gives
the word count.

1. Start the pipeline (Spark stages, acker, barrier) on fresh topics.
2. Produce generated lines at a steady rate while a verifying `BundleConsumer` reads the
   output; print progress every few seconds.
3. After the last line, wait until the barrier has released everything produced.
4. Check the output against the oracle computed from the input as Kafka stored it (every
   pair exactly once, nothing else), print the top words and the latency from producer
   append to committed output.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from connectors.bundles import BundleConsumer
from framework.config import Settings
from framework.deadline import Deadline
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.text import generate_lines, word_counts
from framework.demos.wordcount import word_pairs
from framework.kafka.clients import new_producer
from framework.runners.observe.console import LiveConsole
from framework.runners.spark import SparkRunner
from framework.wire.serde import Json

__all__ = ["DemoResult", "run_demo"]

_log = logging.getLogger(__name__)


@dataclass
class DemoResult:
    """What the demo saw: released counts, latencies (ms), and whether they were right."""

    lines: int
    words: int
    released: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    exact: bool = False
    figures: str = ""  # the pipeline's final figures (the live console's last table)

    def summary(self, top: int = 10) -> str:
        """Human-readable result."""
        out = [self.figures.rstrip()] if self.figures else []
        common = self.released.most_common(top)
        out.append("top words: " + ", ".join(f"{word} {count}" for word, count in common))
        if self.latencies_ms:
            lat = sorted(self.latencies_ms)
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
            out.append(
                f"latency append -> committed output: p50 {statistics.median(lat):.0f} ms, "
                f"p99 {p99:.0f} ms over {len(lat)} outputs"
            )
        out.append(
            f"word count over {self.lines} lines ({self.words} words): "
            + ("VERIFIED exactly once" if self.exact else "MISMATCH against the input")
        )
        return "\n".join(out)


class _Reader(threading.Thread):
    """Reads verified bundles and records each item's latency."""

    def __init__(self, settings: Settings, topic: str, result: DemoResult) -> None:
        super().__init__(name="demo-reader", daemon=True)
        self.settings = settings
        self.topic = topic
        self.result = result
        self.items: Counter[str] = Counter()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        delta = self.settings.delta_ms
        group = f"demo-reader-{uuid.uuid4().hex}"
        try:
            with BundleConsumer(self.settings.kafka_bootstrap, self.topic, group, Json()) as c:
                while not self.stop.is_set():
                    bundle = c.poll(0.2)
                    if bundle is None:
                        continue
                    now = time.time_ns() / 1e6
                    for item in bundle.items:
                        self.items[pair_key(item.value)] += 1
                        # The slot start is the append time rounded down to delta.
                        appended = item.meta.gt.slot * delta + delta / 2
                        self.result.latencies_ms.append(max(0.0, now - appended))
                    c.commit()
        except BaseException as exc:
            self.error = exc


def run_demo(
    settings: Settings, lines: int = 20_000, rate: int = 2_000, spark: Any = None
) -> DemoResult:
    """Steps 1-4 of the module docstring; returns what was seen."""
    app = f"wordcount-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app}-lines", f"{app}-counts"
    text = [f"{i} {line}" for i, line in enumerate(generate_lines(lines))]
    result = DemoResult(lines, sum(len(line.split()) - 1 for line in text))
    # Step 1
    _say(f"starting pipeline {app} (Spark stages, acker, barrier)")
    run = SparkRunner(settings, spark).start(word_pairs(app, source, sink).graph())
    reader = _Reader(settings, sink, result)
    reader.start()
    live = LiveConsole(run.figures)
    live.start()
    try:
        # Step 2
        quiet = live.interactive  # the live table shows progress; else a line every 3 s
        until = _produce(settings, run, source, text, rate=rate, reader=reader, quiet=quiet)
        # Step 3
        _say("all lines produced; waiting for the barrier to release the last bundles")
        _wait_released(run, until, reader, quiet=quiet)
        deadline = Deadline(60)
        while reader.items.total() < result.words:
            run.check()
            if reader.error is not None or deadline.expired:
                break
            time.sleep(0.1)
    finally:
        result.figures = live.stop()
        reader.stop.set()
        reader.join(30)
        run.stop()
    if reader.error is not None:
        raise reader.error
    # Step 4
    oracle = word_pairs_oracle(settings.kafka_bootstrap, source, settings.delta_ms)
    for key, times in reader.items.items():
        result.released[json.loads(key)[0]] += times
    result.exact = reader.items == oracle and result.released == word_counts(
        [line.split(" ", 1)[1] for line in text]
    )
    return result


def _produce(
    settings: Settings,
    run: Any,
    topic: str,
    text: list[str],
    *,
    rate: int,
    reader: _Reader,
    quiet: bool,
) -> int:
    producer = new_producer(settings.kafka_bootstrap, {"linger.ms": 2})
    start = last_report = time.monotonic()
    for i, line in enumerate(text):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        producer.produce(topic, value=line.encode())
        producer.poll(0)
        if time.monotonic() - last_report >= 3:
            last_report = time.monotonic()
            run.check()
            released = reader.items.total()
            if not quiet:
                _say(f"produced {i + 1}/{len(text)} lines, released {released} occurrences")
    producer.flush(60)
    return time.time_ns() // 1_000_000


def _wait_released(
    run: Any, until: int, reader: _Reader, *, quiet: bool, timeout_s: float = 600
) -> None:
    deadline = Deadline(timeout_s, "waiting for the barrier to release the input")
    last_report = time.monotonic()
    while not run.released(until):
        deadline.check()
        if not quiet and time.monotonic() - last_report >= 3:
            last_report = time.monotonic()
            _say(f"released {reader.items.total()} word occurrences so far")
        time.sleep(0.05)


def _say(text: str) -> None:
    _log.info("demo: %s", text)
