"""Throughput of each NEXMark query from a backlog, output checked against its answer.

``--events`` events (NEXMark proportions, `framework.demos.nexmark.events`) are written to
a one-partition LogAppendTime topic (offset order is then global-time order, so the plain
Python answers of `framework.demos.nexmark_oracle` apply exactly); then, one query at a
time on a fresh Spark session (after a warm-up run of Q0), the clock starts, the query
runs until its output has as many rows as its answer, and the rows are compared.

**Latency** (``--phase latency``): one query at a time on a fresh session, events at
``--rate`` events/s for ``--seconds`` s, read by a read_committed reader that stamps each
row on receipt. A row's latency is its receipt minus the moment its answer was
determined: the LogAppendTime of its bid (Q0-Q2) or auction (Q3), the end of its window
(Q4, Q7: 10 s tumbling; Q5: the 10 s sliding window), the end of the window its person
registered in (Q8). Rows determined in the first 5 s are warm-up, not counted. The rows
are checked against the answer too.

Run: ``.venv/bin/python benchmarks/bench_nexmark.py [--phase throughput|latency]
[--events 200000] [--rate 1000] [--seconds 30] [--queries q0,q1,...]``
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

from bench_peer_table import Reader, pct
from confluent_kafka import Producer

from connectors import Json, KafkaSink, KafkaSource
from framework.config import Settings
from framework.demos.nexmark import HOT_SIZE_MS, QUERIES, WINDOW_MS, events
from framework.demos.nexmark_oracle import answer
from framework.kafka.admin import ensure_topics, input_topic_spec
from framework.kafka.clients import read_to_end
from framework.local.provision import provision
from framework.spark import SparkRunner, spark_session


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


def run_query(
    settings: Settings, query: str, source: str, expected: list[Any], timeout: float
) -> dict[str, Any]:
    """Launch ``query`` on a fresh session and read its output as it commits; its seconds
    run from the launch to the receipt of its last row (the reader stamps each row as it
    arrives, so polling the topic adds nothing to them)."""
    tag = f"bn{uuid.uuid4().hex[:6]}"
    sink = f"{tag}-{query}"
    launched = time.time()
    spark = spark_session(settings, f"bench-{tag}", {"spark.master": "local[2]"})
    pipeline = QUERIES[query](f"{tag}{query}", KafkaSource(source, value=Json()), KafkaSink(sink))
    run = SparkRunner(settings, spark).start(pipeline.graph())
    reader = Reader(settings.kafka_bootstrap, sink)
    try:
        deadline = time.monotonic() + timeout
        while len(reader.got) < len(expected) and time.monotonic() < deadline:
            run.check()
            time.sleep(0.1)
    finally:
        reader.close()
        run.stop()
        spark.stop()
    got = [json.loads(value) for _, value in reader.got]
    took = (reader.got[-1][0] if reader.got else time.time()) - launched
    ok = sorted(_canonical(r) for r in got) == sorted(_canonical(r) for r in expected)
    return {"ok": ok, "seconds": took, "rows": len(got)}


def _canonical(row: Any) -> str:
    return json.dumps(row, sort_keys=True)


def determined(query: str, stamped: list[tuple[int, dict[str, Any]]]) -> Any:
    """A function from an output row to the ms its answer was determined (see the module
    docstring); rows of the per-event queries take their bids' stamps in order."""
    if query in ("q0", "q1", "q2"):
        stamps: dict[str, list[int]] = {}
        for t, e in stamped:
            for row in answer(query, [(t, e)]):
                stamps.setdefault(_canonical(row), []).append(t)
        for times in stamps.values():
            times.reverse()
        return lambda row: stamps[_canonical(row)].pop()
    if query == "q3":
        opened = {e["id"]: t for t, e in stamped if e["kind"] == "auction"}
        return lambda row: opened[row[3]]
    if query == "q8":
        joined = {e["id"]: t // WINDOW_MS * WINDOW_MS + WINDOW_MS for t, e in stamped
                  if e["kind"] == "person"}  # fmt: skip
        return lambda row: joined[row[0]]
    size = HOT_SIZE_MS if query == "q5" else WINDOW_MS
    return lambda row: row[0] + size


def produce_at(bootstrap: str, topic: str, count: int, rate: float) -> None:
    """``count`` events at ``rate`` events/s (20 ms pacing steps)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    started, step = time.monotonic(), max(1, int(rate / 50))
    for i, event in enumerate(events(count, seed=3)):
        if i % step == 0:
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
        producer.produce(topic, json.dumps(event).encode(), partition=0)
    producer.flush(60)


def latency(settings: Settings, query: str, args: Any) -> dict[str, Any]:
    tag = f"bl{uuid.uuid4().hex[:6]}"
    source, sink = f"{tag}-events", f"{tag}-{query}"
    ensure_topics(settings.kafka_bootstrap, [input_topic_spec(source, 1)])
    spark = spark_session(settings, f"bench-{tag}", {"spark.master": "local[2]"})
    pipeline = QUERIES[query](f"{tag}{query}", KafkaSource(source, value=Json()), KafkaSink(sink))
    run = SparkRunner(settings, spark).start(pipeline.graph())
    reader = Reader(settings.kafka_bootstrap, sink)
    try:
        time.sleep(args.warm)  # queries started, Python workers up
        began = time.time_ns() // 1_000_000
        produce_at(settings.kafka_bootstrap, source, int(args.rate * args.seconds), args.rate)
        stamped = [
            (m.timestamp()[1], json.loads(m.value() or b""))
            for m in read_to_end(settings.kafka_bootstrap, source)
        ]
        expected = answer(query, stamped)
        deadline = time.monotonic() + HOT_SIZE_MS / 1000 + 30
        while len(reader.got) < len(expected) and time.monotonic() < deadline:
            run.check()
            time.sleep(0.2)
    finally:
        reader.close()
        run.stop()
        spark.stop()
    rows = [(at, json.loads(value)) for at, value in reader.got]
    ok = sorted(_canonical(r) for _, r in rows) == sorted(_canonical(r) for r in expected)
    when = determined(query, stamped)
    late = [
        at * 1000 - t for at, row in rows if (t := when(row)) >= began + 5000
    ]  # fmt: skip
    return {
        "ok": ok,
        "rows": len(rows),
        "measured": len(late),
        "p50_ms": pct(late, 0.5),
        "p99_ms": pct(late, 0.99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=("throughput", "latency"), default="throughput")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rate", type=float, default=1000, help="latency: events/s")
    ap.add_argument("--seconds", type=float, default=30, help="latency: seconds of events")
    ap.add_argument("--warm", type=float, default=15, help="latency: s from start to input")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    if args.phase == "latency":
        with provision() as stack:
            settings = stack.with_(parallelism=2, spark_master="local[2]")
            results = {}
            for query in args.queries.split(","):
                result = results[query] = latency(settings, query, args)
                print(
                    f"  {query}: {'ok' if result['ok'] else 'WRONG'} latency p50 "
                    f"{result['p50_ms']:,.0f} ms, p99 {result['p99_ms']:,.0f} ms "
                    f"({result['measured']:,} of {result['rows']:,} rows measured)",
                    flush=True,
                )
        print(json.dumps(results, indent=1))
        return
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
