"""Throughput of each NEXMark query from a backlog, output checked against its answer.

``--events`` events (NEXMark proportions, `framework.demos.nexmark.events`) are written to
a one-partition LogAppendTime topic (offset order is then global-time order, so the plain
Python answers of `framework.demos.nexmark_oracle` apply exactly); then, one query at a
time on a fresh Spark session (after a warm-up run of Q0), the clock starts, the query
runs until its output has as many rows as its answer, and the rows are compared.

Run: ``.venv/bin/python benchmarks/bench_nexmark.py [--events 200000] [--queries q0,q1,...]``
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

from confluent_kafka import Producer

from connectors import Json, KafkaSink, KafkaSource
from framework.config import Settings
from framework.demos.nexmark import QUERIES, events
from framework.demos.nexmark_oracle import answer
from framework.kafka.admin import ensure_topics, input_topic_spec
from framework.kafka.clients import read_to_end
from framework.local.provision import provision
from framework.runners.spark import SparkRunner, spark_session


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, event in enumerate(events(count, seed=2)):
        while True:
            try:
                producer.produce(topic, json.dumps(event).encode(), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)


def rows(bootstrap: str, topic: str) -> list[Any]:
    return [json.loads(m.value() or b"") for m in read_to_end(bootstrap, topic)]


def run_query(
    settings: Settings, query: str, source: str, expected: list[Any], timeout: float
) -> dict[str, Any]:
    tag = f"bn{uuid.uuid4().hex[:6]}"
    sink = f"{tag}-{query}"
    launched = time.monotonic()
    spark = spark_session(settings, f"bench-{tag}", {"spark.master": "local[2]"})
    pipeline = QUERIES[query](f"{tag}{query}", KafkaSource(source, value=Json()), KafkaSink(sink))
    run = SparkRunner(settings, spark).start(pipeline.graph())
    try:
        deadline = time.monotonic() + timeout
        got: list[Any] = []
        while time.monotonic() < deadline:
            run.check()
            got = rows(settings.kafka_bootstrap, sink)
            if len(got) >= len(expected):
                break
            time.sleep(0.5)
        took = time.monotonic() - launched
    finally:
        run.stop()
        spark.stop()
    ok = sorted(json.dumps(r, sort_keys=True) for r in got) == sorted(
        json.dumps(r, sort_keys=True) for r in expected
    )
    return {"ok": ok, "seconds": took, "rows": len(got)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    with provision() as stack:
        settings = stack.with_(parallelism=2, spark_master="local[2]")
        source = f"nexmark{uuid.uuid4().hex[:6]}"
        ensure_topics(settings.kafka_bootstrap, [input_topic_spec(source, 1)])
        produce(settings.kafka_bootstrap, source, args.events)
        stored = [
            (m.timestamp()[1], json.loads(m.value() or b""))
            for m in read_to_end(settings.kafka_bootstrap, source)
        ]
        print(f"{len(stored):,} events; warm-up (Q0, not measured)", flush=True)
        run_query(settings, "q0", source, answer("q0", stored), args.timeout)
        results = {}
        for query in args.queries.split(","):
            expected = answer(query, stored)
            result = run_query(settings, query, source, expected, args.timeout)
            result["events_per_s"] = len(stored) / result["seconds"]
            results[query] = result
            print(
                f"  {query}: {'ok' if result['ok'] else 'WRONG'} {result['events_per_s']:,.0f} "
                f"events/s from launch ({result['seconds']:.1f} s, {result['rows']:,} rows)",
                flush=True,
            )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
