"""What a shuffle inside one Spark query saves over a Kafka topic between two queries.

Spark alone, no flamepipe code in the tasks (`docs/decisions/fused-stages.md`): records at
``--rate`` records/s for ``--seconds`` into a 2-partition LogAppendTime topic, through

* **fused**: one query, ``mapInArrow -> repartition(2) -> mapInArrow -> Kafka``;
* **split**: two queries joined by a 2-partition topic, each ``mapInArrow -> Kafka``;

in one Spark session (``local[2]``, the same trigger), one after the other, ``--runs``
times each, alternating. A read_committed reader stamps every output record on receipt;
latency is receipt minus the input record's LogAppendTime; the first 5 s are warm-up.

Run: ``.venv/bin/python benchmarks/bench_fused_hop.py [--rate 1000] [--seconds 30]
[--runs 2] [--trigger-ms 0]``
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from bench_peer_table import Reader, pct
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Producer

from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec
from framework.local.provision import provision
from framework.spark import spark_session

SCHEMA = "value binary"


def identity(batches: Iterator[Any]) -> Iterator[Any]:
    """A Python task that passes Arrow batches on (the Python worker round trip)."""
    yield from batches


def produce(bootstrap: str, topic: str, count: int, rate: float) -> dict[bytes, int]:
    """``count`` records at ``rate``/s over 2 partitions; value -> LogAppendTime."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    stamps: dict[bytes, int] = {}

    def delivered(error: Any, msg: Any) -> None:
        kind, stamp = msg.timestamp()
        if error is None and kind == TIMESTAMP_LOG_APPEND_TIME:
            stamps[msg.value()] = stamp

    started = time.monotonic()
    for i in range(count):
        ahead = started + i / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        producer.produce(topic, f"{i}".encode(), partition=i % 2, on_delivery=delivered)
        producer.poll(0)
    producer.flush(60)
    return stamps


def _read(spark: Any, bootstrap: str, topic: str) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "latest")
        .load()
        .select("value")
    )


def _write(df: Any, bootstrap: str, topic: str, name: str, trigger_ms: int) -> Any:
    return (
        df.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", f"/tmp/bench-fused/{name}")
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )


def one_run(spark: Any, bootstrap: str, mode: str, args: Any) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    source, middle, sink = f"fh{tag}-in", f"fh{tag}-mid", f"fh{tag}-out"
    ensure_topics(
        bootstrap, [input_topic_spec(source, 2), TopicSpec(middle, 2), TopicSpec(sink, 1)]
    )
    queries = []
    if mode == "fused":
        df = _read(spark, bootstrap, source).mapInArrow(identity, SCHEMA)
        df = df.repartition(2, "value").mapInArrow(identity, SCHEMA)
        queries.append(_write(df, bootstrap, sink, f"{tag}-f", args.trigger_ms))
    else:
        first = _read(spark, bootstrap, source).mapInArrow(identity, SCHEMA)
        queries.append(_write(first, bootstrap, middle, f"{tag}-s1", args.trigger_ms))
        second = _read(spark, bootstrap, middle).mapInArrow(identity, SCHEMA)
        queries.append(_write(second, bootstrap, sink, f"{tag}-s2", args.trigger_ms))
    reader = Reader(bootstrap, sink)
    try:
        time.sleep(10)  # queries started, Python workers up
        stamps = produce(bootstrap, source, int(args.rate * args.seconds), args.rate)
        deadline = time.monotonic() + 30
        while len(reader.got) < len(stamps) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        reader.close()
        for query in queries:
            query.stop()
    first_ms = min(stamps.values())
    late = [
        at * 1000 - stamps[value]
        for at, value in reader.got
        if value in stamps and stamps[value] >= first_ms + 5000
    ]
    return {
        "mode": mode,
        "received": len(reader.got),
        "sent": len(stamps),
        "p50_ms": pct(late, 0.5),
        "p99_ms": pct(late, 0.99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--trigger-ms", type=int, default=0)
    args = ap.parse_args()
    results = []
    with provision() as stack:
        spark = spark_session(stack, "bench-fused-hop", {"spark.master": "local[2]"})
        try:
            for _ in range(args.runs):
                for mode in ("fused", "split"):
                    result = one_run(spark, stack.kafka_bootstrap, mode, args)
                    results.append(result)
                    print(
                        f"  {mode}: p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms"
                        f" ({result['received']} of {result['sent']} records)",
                        flush=True,
                    )
        finally:
            spark.stop()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
