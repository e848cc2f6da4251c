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
import multiprocessing
import queue
import signal
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from connectors.bundles import BundleConsumer
from framework.config import Settings
from framework.deadline import Deadline
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.text import generate_lines, word_counts
from framework.demos.wordcount import word_pairs
from framework.errors import PipelineError
from framework.kafka.clients import new_producer
from framework.kafka.security import install, installed
from framework.runners.observe.console import LiveConsole
from framework.runners.spark.runner import SparkRunner
from framework.wire.serde import Json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from framework.runners.spark.runner import PipelineRun

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


class _Reader:
    """Reads verified bundles in a process of its own, as any consumer of the output would:
    the driver's threads (acker, barrier, live table) do not delay it, nor it them. It
    counts each pair and records each item's latency; `finish` hands them over.

    Measured (the demo at 2 000 lines/s, which saturates 2 cores; two runs each): read by a
    thread of the driver, whose verification took the driver's CPU from the barrier and
    the acker, the latency p50 was 9.5 and 9.9 s; read here, 5.2 and 6.1 s. Unsaturated
    (200 lines/s) it is the same either way (325 and 320 ms)."""

    def __init__(self, settings: Settings, topic: str, delta_ms: int) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.released = spawn.Value("q", 0)  # items read so far (progress lines)
        self._stop = spawn.Event()
        self._out = spawn.Queue()
        output = _Output(settings.kafka_bootstrap, installed(), topic, delta_ms)
        self._process = spawn.Process(
            target=_read_bundles,
            args=(output, self.released, self._stop, self._out),
            name="demo-reader",
            daemon=True,
        )

    def start(self) -> None:
        self._process.start()

    def total(self) -> int:
        """Items read so far."""
        return int(self.released.value)

    def alive(self) -> bool:
        """Whether the reader still runs (it ends only when stopped, or on an error)."""
        return self._process.is_alive()

    def finish(self, timeout_s: float = 30.0) -> tuple[Counter[str], list[float]]:
        """Stop reading; the items read per pair key and their latencies (ms). The result
        is taken before the process is joined: it exits only once its queue has flushed."""
        self._stop.set()
        deadline = Deadline(timeout_s)
        while True:
            try:
                error, items, latencies = self._out.get(timeout=0.2)
                break
            except queue.Empty:
                if deadline.expired or not self._process.is_alive():
                    code = self._process.exitcode
                    self.abandon()
                    raise PipelineError(
                        f"the demo's reader gave no result (exit code {code})"
                    ) from None
        self._process.join(timeout_s)
        if error:
            raise PipelineError(f"the demo's reader failed: {error}")
        return Counter(items), latencies

    def abandon(self) -> None:
        """Stop the reader without its results (the demo is unwinding)."""
        self._stop.set()
        self._process.join(2.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5.0)


@dataclass(frozen=True)
class _Output:
    """Where the reader process reads: the topic, and how to reach it."""

    bootstrap: str
    security: dict[str, str]
    topic: str
    delta_ms: int


def _read_bundles(output: _Output, released: Any, stop: Any, out: Any) -> None:
    """The reader process: verified bundles until ``stop``, then ``(error, items,
    latencies)`` on ``out``."""
    # The demo stops it (`stop`): Ctrl-C or a closed terminal unwinds the demo, which then
    # abandons it, so the signals that reach the whole process group are not its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    delta_ms = output.delta_ms
    items: Counter[str] = Counter()
    latencies: list[float] = []
    error = ""
    group = f"demo-reader-{uuid.uuid4().hex}"
    try:
        install(output.security)
        # It reads once, from the first bundle, and never resumes: it keeps its positions
        # itself (``starts``) instead of committing each bundle's, a synchronous commit
        # (7.6 ms p50 at 200 lines/s) that every later bundle waited behind.
        with BundleConsumer(output.bootstrap, output.topic, group, Json(), starts={}) as consumer:
            # A demo killed without a word (SIGKILL) leaves no one to stop it: it stops.
            while not stop.is_set() and (parent is None or parent.is_alive()):
                bundle = consumer.poll(0.2)
                if bundle is None:
                    continue
                now = time.time_ns() / 1e6
                for item in bundle.items:
                    items[pair_key(item.value)] += 1
                    # The slot start is the append time rounded down to delta.
                    appended = item.meta.gt.slot * delta_ms + delta_ms / 2
                    latencies.append(max(0.0, now - appended))
                released.value += len(bundle.items)
    except Exception as exc:  # handed to the demo, which raises it
        error = f"{type(exc).__name__}: {exc}"
    out.put((error, dict(items), latencies))


def run_demo(
    settings: Settings, lines: int = 4_000, rate: int = 200, spark: SparkSession | None = None
) -> DemoResult:
    """Steps 1-4 of the module docstring; returns what was seen."""
    app = f"wordcount-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app}-lines", f"{app}-counts"
    text = [f"{i} {line}" for i, line in enumerate(generate_lines(lines))]
    result = DemoResult(lines, sum(len(line.split()) - 1 for line in text))
    # Step 1
    _say(f"starting pipeline {app} (Spark stages, acker, barrier)")
    graph = word_pairs(app, source, sink).graph()
    run = SparkRunner(settings, spark).start(graph)
    reader = _Reader(settings, sink, graph.delta_ms)
    reader.start()
    live = LiveConsole(run.figures)
    live.start()
    items: Counter[str] | None = None
    try:
        # Step 2
        quiet = live.interactive  # the live table shows progress; else a line every 3 s
        until = _produce(settings, run, source, text, rate=rate, reader=reader, quiet=quiet)
        # Step 3
        _say("all lines produced; waiting for the barrier to release the last bundles")
        _wait_released(run, until, reader, quiet=quiet)
        deadline = Deadline(60)
        while reader.total() < result.words and reader.alive() and not deadline.expired:
            run.check()
            time.sleep(0.1)
        result.figures = live.stop()
        items, result.latencies_ms = reader.finish()
    finally:
        if items is None:  # unwinding: the error (or Ctrl-C) is what the user needs to see
            result.figures = live.stop()
            reader.abandon()
        run.stop()
    # Step 4
    oracle = word_pairs_oracle(settings.kafka_bootstrap, source, graph.delta_ms)
    for key, times in items.items():
        result.released[json.loads(key)[0]] += times
    result.exact = items == oracle and result.released == word_counts(
        [line.split(" ", 1)[1] for line in text]
    )
    return result


def _produce(
    settings: Settings,
    run: PipelineRun,
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
            released = reader.total()
            if not quiet:
                _say(f"produced {i + 1}/{len(text)} lines, released {released} occurrences")
    producer.flush(60)
    return time.time_ns() // 1_000_000


def _wait_released(
    run: PipelineRun, until: int, reader: _Reader, *, quiet: bool, timeout_s: float = 600
) -> None:
    deadline = Deadline(timeout_s, "waiting for the barrier to release the input")
    last_report = time.monotonic()
    while not run.released(until):
        deadline.check()
        if not quiet and time.monotonic() - last_report >= 3:
            last_report = time.monotonic()
            _say(f"released {reader.total()} word occurrences so far")
        time.sleep(0.05)


def _say(text: str) -> None:
    _log.info("demo: %s", text)
