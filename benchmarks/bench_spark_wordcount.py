"""Word count through the Spark path: input words per second and micro-batch latency.

The pipeline starts, a backlog of generated lines is produced, and the clock runs from the
start of producing (the stage reads meanwhile; the producer's time counts against it)
until the grouping stage has taken every word. Reported: words/s over that
span, and the micro-batch duration (``triggerExecution``) of each stage, p50/p90, from
Spark's progress. ``--warm`` first runs 200 lines through, so the backlog does not pay the
Python workers' start-up; ``--batches`` prints every batch's progress; ``--cpu`` the CPU
time each process of the stack used meanwhile (from /proc).

The pipeline is `word_pairs` (a count-2 grouping: one output per word), or with
``--windowed`` `windowed_counts` (a combinable count per word and 1 s tumbling window:
the source stage pre-reduces, one item per word and task batch crosses the shuffle); then
the clock stops when the aggregate stage has taken every partial the source stage sent,
and the time until every window was released is printed as well.

``--workers N`` runs the stages on a Spark standalone master with N workers started on
127.0.0.1 (one core and an executor JVM each) instead of ``local[2]``.

Run: ``.venv/bin/python benchmarks/bench_spark_wordcount.py [lines] [words-per-line] [--warm]
[--windowed] [--cpu] [--workers N]``
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from cpu import cpu_seconds, print_cpu

from framework.demos.text import generate_lines
from framework.demos.wordcount import windowed_counts, word_pairs
from framework.local.provision import free_port, provision
from framework.local.stack import LocalStack
from framework.spark import SparkRunner, spark_session


def _produce(producer: Producer, topic: str, lines: list[str]) -> None:
    for i, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, value=line.encode(), partition=i % 2)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)


def _wait_items(run: Any, stage: str, lines: int) -> None:
    """Until the source stage read ``lines`` lines and ``stage`` took all it sent."""
    source = next(s for s in run.stats if s.endswith("source"))
    while True:
        sent, taken = run.stats[source], run.stats[stage]
        if sent.records_in >= lines and taken.items_in >= sent.items_out:
            return
        run.check()
        time.sleep(0.02)


def _report(stage: str, progress: list[dict[str, Any]]) -> None:
    # Every batch after the first (empty ones too), as measured before frames; then the
    # batches that read data.
    for label, batches in (("after first", progress[1:]), ("with data", progress)):
        durations = [
            p["durationMs"].get("triggerExecution", 0)
            for p in batches
            if label != "with data" or p["numInputRows"]
        ]
        durations = [d for d in durations if d]
        if durations:
            p90 = sorted(durations)[math.ceil(0.9 * len(durations)) - 1]  # nearest rank
            print(
                f"  stage {stage:<10} {label:<11} batches={len(durations):<4} "
                f"p50={statistics.median(durations):6.0f} ms  p90={p90:6.0f} ms"
            )


def _pipeline(
    app: str, source: str, windowed: bool, lines_n: int, per_line: int
) -> tuple[Any, list[str]]:
    if windowed:
        pipeline = windowed_counts(app, source, f"{app}-out", window_ms=1000, partitions=2)
        return pipeline, generate_lines(lines_n, per_line)
    pipeline = word_pairs(app, source, f"{app}-out", partitions=2)
    return pipeline, [f"{i} {text}" for i, text in enumerate(generate_lines(lines_n, per_line))]


def _arguments(argv: list[str]) -> tuple[int, list[str]]:
    """``(workers, positional arguments)``."""
    argv = list(argv)
    workers = 0
    if "--workers" in argv:
        at = argv.index("--workers")
        workers = int(argv[at + 1])
        del argv[at : at + 2]
    return workers, [a for a in argv if not a.startswith("--")]


def _on_cluster(settings: Any, workers: int) -> Any:
    """``settings`` on a standalone master with ``workers`` started beside the stack."""
    if not workers:
        return settings
    cluster = settings.with_(spark_master_port=free_port(), spark_workers=workers)
    stack = LocalStack(cluster, quiet=True)
    stack.up()
    return settings.with_(spark_master=stack.master_url)


def main() -> None:
    workers, args = _arguments(sys.argv[1:])
    lines_n = int(args[0]) if args else 20_000
    per_line = int(args[1]) if len(args) > 1 else 10
    with provision() as stack:
        settings = stack.with_(parallelism=2, spark_master="local[2]")
        settings = _on_cluster(settings, workers)
        spark = spark_session(settings, "bench-wordcount")
        app = f"bench{uuid.uuid4().hex[:6]}"
        source = f"{app}-lines"
        windowed = "--windowed" in sys.argv
        pipeline, lines = _pipeline(app, source, windowed, lines_n, per_line)
        words = lines_n * per_line
        runner = SparkRunner(settings, spark)
        run = runner.start(pipeline.graph())
        group = next(s for s in run.stats if s.endswith(("group", "aggregate")))
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 20})
        before = 0
        if "--warm" in sys.argv:
            # Python workers and the JVM warmed by a small batch first: throughput
            # without the first batch's start-up.
            warm = [f"w{i} {t}" for i, t in enumerate(generate_lines(200, per_line, seed=3))]
            _produce(producer, source, warm)
            before = len(warm)
            _wait_items(run, group, before)
        skip = {stage: len(q.query.recentProgress) for stage, q in run.queries.items()}
        # The clock starts before producing: the stage reads while the backlog is written,
        # so starting it after would credit the pipeline with work done before (and more so
        # the larger the backlog). The producer's own time counts against the pipeline.
        started = time.monotonic()
        cpu_before = cpu_seconds()
        _produce(producer, source, lines)
        produced_ms = time.time_ns() // 1_000_000
        produce_s = time.monotonic() - started
        _wait_items(run, group, before + lines_n)
        elapsed = time.monotonic() - started
        cpu = cpu_seconds()
        warmed = " warm" if before else ""
        kind = "windowed count, combining" if windowed else "word pairs"
        print(
            f"{words} words in {elapsed:.1f} s: {words / elapsed:,.0f} words/s "
            f"(2 cores{warmed}, {kind}, {settings.spark_master}); producing took "
            f"{produce_s:.1f} s; "
            f"{run.stats[group].items_in} items crossed the shuffle"
        )
        _placement(group, run.stats[group])
        if windowed:
            run.wait_released(produced_ms + 1000, timeout_s=600)
            print(f"  every window released {time.monotonic() - started:.1f} s after the start")
        if "--cpu" in sys.argv:
            print(f"  CPU in those {elapsed:.1f} s, by process:")
            print_cpu(cpu_before, cpu, elapsed)
        for stage, query in run.queries.items():
            progress = query.query.recentProgress[skip[stage] :]
            if "--batches" in sys.argv:
                for p in progress:
                    print(f"  {stage} {p['timestamp']} rows={p['numInputRows']} {p['durationMs']}")
            _report(stage, progress)
        run.stop()
        spark.stop()


def _placement(stage: str, stats: Any) -> None:
    """How often the stateful stage's partitions moved between Python workers, and what
    catching their state up from the changelog cost (all catch-ups, and on moves)."""

    def cost(size: int, ms: float) -> str:
        per_mb = f", {ms / (size / 1e6):,.0f} ms/MB" if size >= 100_000 else ""
        return f"{size / 1e6:.2f} MB in {ms:,.0f} ms{per_mb}"

    print(
        f"  placement of {stage}: {stats.moves} moves to another Python worker; catch-up "
        f"{cost(stats.catchup_bytes, stats.catchup_ms)} (on moves: "
        f"{cost(stats.move_catchup_bytes, stats.move_catchup_ms)})"
    )


if __name__ == "__main__":
    main()
