"""Word count through the Spark path: input words per second and micro-batch latency.

A backlog of generated lines is produced first; the pipeline then starts and the clock runs
until the grouping stage has taken every word. Reported: words/s over that span, and the
micro-batch duration (``triggerExecution``) of each stage, p50/p90, from Spark's progress.

Run: ``.venv/bin/python benchmarks/bench_spark_wordcount.py [lines] [words-per-line]``
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid

from confluent_kafka import Producer

from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.local.provision import provision
from framework.spark import SparkRunner, spark_session


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    lines_n = int(args[0]) if args else 20_000
    per_line = int(args[1]) if len(args) > 1 else 10
    with provision() as stack:
        settings = stack.with_(parallelism=2)
        spark = spark_session(settings, "bench-wordcount", {"spark.master": "local[2]"})
        app = f"bench{uuid.uuid4().hex[:6]}"
        source = f"{app}-lines"
        pipeline = word_pairs(app, source, f"{app}-out", partitions=2)
        lines = [f"{i} {text}" for i, text in enumerate(generate_lines(lines_n, per_line))]
        words = lines_n * per_line
        runner = SparkRunner(settings, spark)
        run = runner.start(pipeline.graph())
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 20})
        for i, line in enumerate(lines):
            producer.produce(source, value=line.encode(), partition=i % 2)
            if i % 10_000 == 0:
                producer.poll(0)
        producer.flush(60)
        started = time.monotonic()
        print(f"produced {lines_n} lines at {time.strftime('%H:%M:%S')}")
        group = next(s for s in run.stats if s.endswith("group"))
        while run.stats[group].items_in < words:
            run.check()
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        print(f"{words} words in {elapsed:.1f} s: {words / elapsed:,.0f} words/s (2 cores)")
        if "--batches" in sys.argv:
            for stage, query in run.queries.items():
                for p in query.query.recentProgress:
                    print(f"  {stage} {p['timestamp']} rows={p['numInputRows']} {p['durationMs']}")
        for stage, query in run.queries.items():
            durations = [p["durationMs"]["triggerExecution"] for p in query.query.recentProgress]
            durations = [d for d in durations[1:] if d]  # the first batch pays start-up
            if durations:
                p90 = sorted(durations)[int(0.9 * (len(durations) - 1))]
                print(
                    f"  stage {stage:<10} batches={len(durations):<4} "
                    f"p50={statistics.median(durations):6.0f} ms  p90={p90:6.0f} ms"
                )
        run.stop()
        spark.stop()


if __name__ == "__main__":
    main()
