"""The smoke job: Kafka topic -> Spark Structured Streaming (headers kept) -> Kafka topic.

It proves the three parts work together on this machine: the broker, Spark's Kafka
connector on pyspark's Spark, and a read_committed reader of the result.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from dataclasses import dataclass

from framework.config import Settings
from framework.deadline import Deadline
from framework.kafka.admin import TopicSpec, ensure_topics
from framework.kafka.clients import QUICK_END, close_quietly, new_consumer, new_producer
from framework.runners.spark.session import spark_session

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SmokeResult:
    """What went in, what came out, and how long the Spark part took."""

    sent: int
    received: list[tuple[str, str, list[tuple[str, bytes]]]]
    seconds: float


def create_topics(bootstrap: str, names: list[str], partitions: int = 2) -> None:
    """Create topics (one replica) if missing, waiting until each has a leader."""
    ensure_topics(bootstrap, [TopicSpec(name, partitions) for name in names])


def read_all(
    bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0
) -> list[tuple[str, str, list[tuple[str, bytes]]]]:
    """Read ``expected`` records of ``topic`` with read_committed (fewer on timeout)."""
    consumer = new_consumer(bootstrap, config={**QUICK_END, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list[tuple[str, str, list[tuple[str, bytes]]]] = []
    deadline = Deadline(timeout_s)
    try:
        while len(out) < expected and not deadline.expired:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            key = (msg.key() or b"").decode()
            raw = msg.headers() or []
            pairs = raw.items() if isinstance(raw, dict) else raw
            headers = [(k, v if isinstance(v, bytes) else str(v or "").encode()) for k, v in pairs]
            out.append((key, (msg.value() or b"").decode(), headers))
    finally:
        close_quietly(consumer)
    return out


def run_smoke(settings: Settings, lines: int = 1000, progress: bool = True) -> SmokeResult:
    """Produce ``lines`` records, upper-case them through Spark, read the result back."""
    run = uuid.uuid4().hex[:8]
    source, sink = f"smoke-in-{run}", f"smoke-out-{run}"
    bootstrap = settings.kafka_bootstrap
    create_topics(bootstrap, [source, sink])
    producer = new_producer(bootstrap)
    for i in range(lines):
        producer.produce(source, key=str(i), value=f"line {i}", headers=[("n", str(i).encode())])
    producer.flush(30)
    _say(progress, f"produced {lines} records to {source}")
    spark = spark_session(settings, "flamepipe-smoke")
    started = time.monotonic()
    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .selectExpr("key", "upper(cast(value as string)) AS value", "headers")
    )
    with tempfile.TemporaryDirectory(prefix="flamepipe-smoke-") as checkpoint:
        query = (
            frame.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    seconds = time.monotonic() - started
    _say(progress, f"Spark query finished in {seconds:.1f} s, reading {sink}")
    return SmokeResult(lines, read_all(bootstrap, sink, lines), seconds)


def _say(enabled: bool, text: str) -> None:
    if enabled:
        _log.info("%s", text)
