"""Where should the grouping keep its state? Spark's state store vs flamepipe's own.

Side by side in one run, on the embedded stack, same input and same grouping work:

* ``spark-state``: ``groupBy(key).applyInPandasWithState`` on the RocksDB state store,
  output collected in ``foreachBatch``;
* ``flamepipe-state``: ``foreachBatch`` + ``mapInArrow`` over the Kafka partitions (the
  topic is already partitioned by key), buckets kept per partition in a worker-local cache
  and written through to a RocksDB (rocksdict) backend each batch.

Both keep a window-2 bucket per key. A producer thread appends keyed records at a fixed
rate while each query runs; the number reported is the micro-batch duration Spark measures
(``triggerExecution``), median and p90 over the batches after warm-up.

Run: ``.venv/bin/python benchmarks/bench_grouping_state.py [seconds-per-query] [rate]``
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Producer

from framework.local.provision import provision
from framework.runners.spark.smoke import create_topics
from framework.spark import spark_session

PARTITIONS = 4
WINDOW = 2


def _produce(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    i = 0
    start = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - start) * rate)
        while i < due:
            key = f"k{i % 500}"
            producer.produce(topic, key=key, value=str(i), partition=hash(key) % PARTITIONS)
            i += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(10)


def _source(spark: Any, bootstrap: str, topic: str) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition")
    )


def _spark_state_query(spark: Any, frame: Any, checkpoint: str) -> Any:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def group(key: tuple[str], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        bucket: list[str] = json.loads(state.get[0]) if state.exists else []
        out = []
        for pdf in pdfs:
            for value in pdf["value"]:
                bucket.append(value)
                out.append(",".join(bucket[-WINDOW:]))
        state.update((json.dumps(bucket[-WINDOW:]),))
        yield pd.DataFrame({"key": [key[0]] * len(out), "window": out})

    grouped = frame.groupBy("key").applyInPandasWithState(
        group,
        "key STRING, window STRING",
        "bucket STRING",
        "append",
        GroupStateTimeout.NoTimeout,
    )
    return (
        grouped.writeStream.foreachBatch(lambda df, _id: df.count())
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )


_CACHE: dict[int, dict[str, list[str]]] = {}


def _flamepipe_state_query(frame: Any, checkpoint: str, store: str) -> Any:
    import pyarrow as pa

    def group(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from rocksdict import Rdict

        count = 0
        for batch in batches:
            rows = batch.to_pydict()
            if not rows["key"]:
                continue
            part = rows["partition"][0]
            buckets = _CACHE.setdefault(part, {})
            changed: dict[str, list[str]] = {}
            for key, value in zip(rows["key"], rows["value"], strict=True):
                bucket = buckets.setdefault(key, [])
                bucket.append(value)
                del bucket[:-WINDOW]
                changed[key] = bucket
                count += 1
            db = Rdict(f"{store}/p{part}")
            for key, bucket in changed.items():
                db[key] = json.dumps(bucket)
            db.close()
        yield pa.RecordBatch.from_pydict({"n": [count]})

    def run_batch(df: Any, _batch_id: int) -> None:
        df.mapInArrow(group, "n LONG").collect()

    return (
        frame.writeStream.foreachBatch(run_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )


def _measure(query: Any, bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(bootstrap, topic, rate, stop))
    producer.start()
    time.sleep(seconds)
    stop.set()
    producer.join()
    progress = list(query.recentProgress)
    query.stop()
    rows = [p for p in progress if p["numInputRows"] > 0][3:]  # skip warm-up batches
    return [float(p["durationMs"]["triggerExecution"]) for p in rows]


def _summary(name: str, durations: list[float]) -> dict[str, float]:
    if not durations:
        print(f"{name:<16} no batches with input")
        return {"p50": float("nan"), "p90": float("nan")}
    p50 = statistics.median(durations)
    p90 = sorted(durations)[int(0.9 * (len(durations) - 1))]
    print(f"{name:<16} batches={len(durations):<4} p50={p50:7.1f} ms  p90={p90:7.1f} ms")
    return {"p50": p50, "p90": p90}


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    rate = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    with provision() as settings, tempfile.TemporaryDirectory() as tmp:
        bootstrap = settings.kafka_bootstrap
        spark = spark_session(settings, "bench-grouping-state", {"spark.master": "local[2]"})
        results = {}
        for name in ("spark-state", "flamepipe-state"):
            topic = f"bench-{name}-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, [topic], PARTITIONS)
            frame = _source(spark, bootstrap, topic)
            checkpoint = f"{tmp}/{name}"
            if name == "spark-state":
                query = _spark_state_query(spark, frame, checkpoint)
            else:
                query = _flamepipe_state_query(frame, checkpoint, f"{tmp}/store")
            time.sleep(5)  # let the query start before producing
            results[name] = _summary(name, _measure(query, bootstrap, topic, rate, seconds))
        spark.stop()
        ratio = results["spark-state"]["p50"] / results["flamepipe-state"]["p50"]
        print(f"p50 ratio spark-state / flamepipe-state = {ratio:.2f}x  ({rate} records/s)")


if __name__ == "__main__":
    main()
