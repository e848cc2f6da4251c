"""What a running pipeline costs with no input: CPU by role while it waits, per execution.

A pipeline that waits still polls: stage tasks poll Kafka and min time, sources heartbeat
their fronts, the acker reports min time, the barrier checks what it may release. On two
cores that tax is taken from the work. This runs the demo's pipeline (`word_pairs`: a
source stage and a window-2 grouping, two source partitions, two hash units), sends it a
few lines until their output is out (everything started), then measures ``--seconds``
with no input::

    .venv/bin/python benchmarks/bench_idle.py [--execution continuous] [--seconds 20]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_peer_table import produce
from cpu import cpu_seconds, print_cpu

from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec
from framework.kafka.clients import read_to_end
from framework.local.provision import provision
from framework.spark import SparkRunner, spark_session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--execution", choices=("micro-batch", "continuous"), default="micro-batch")
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    with provision() as stack:
        continuous = args.execution == "continuous"
        settings = stack.with_(
            parallelism=2,
            spark_master="local[4]" if continuous else "local[2]",
            execution=args.execution,
        )
        tag = f"idle{uuid.uuid4().hex[:6]}"
        source, sink = f"{tag}-in", f"{tag}-out"
        bootstrap = settings.kafka_bootstrap
        ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
        spark = spark_session(settings, f"bench-{tag}", {"spark.master": settings.spark_master})
        run = SparkRunner(settings, spark).start(word_pairs(tag, source, sink).graph())
        try:
            lines = [f"{i} {t}" for i, t in enumerate(generate_lines(20, seed=3))]
            produce(bootstrap, source, lines, 1000)
            words = sum(len(line.split()) - 1 for line in lines)
            deadline = time.monotonic() + 180
            while len(read_to_end(bootstrap, sink)) < words:
                run.check()
                if time.monotonic() > deadline:
                    raise SystemExit("the first lines' output did not come")
                time.sleep(0.5)
            time.sleep(2)  # the last commits and releases of the warm-up
            before, started = cpu_seconds(), time.monotonic()
            while time.monotonic() - started < args.seconds:
                run.check()
                time.sleep(0.5)
            after = cpu_seconds()
            span = time.monotonic() - started
            print(f"{args.execution}, idle for {span:.1f} s:")
            print_cpu(before, after, span)
        finally:
            run.stop()
            spark.stop()


if __name__ == "__main__":
    main()
