"""Helpers for tests that run whole pipelines on the real stack."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, Producer

from framework.config import Settings
from framework.pipeline import Pipeline
from framework.spark import PipelineRun, SparkRunner


def produce_lines(
    bootstrap: str, topic: str, lines: list[str], partitions: int, first: int = 0
) -> int:
    """Produce ``lines`` round-robin over partitions ``first..first+partitions-1``.

    Returns the wall-clock ms after the last ack: everything produced is stamped before it.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, line in enumerate(lines):
        producer.produce(topic, value=line.encode(), partition=first + i % partitions)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(60)
    return time.time_ns() // 1_000_000


def read_output(bootstrap: str, topic: str, idle_s: float = 3.0) -> list[Any]:
    """Every item of an output topic (read_committed, bundle headers skipped), JSON-decoded."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    items: list[Any] = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error():
                    continue
                last = time.monotonic()
                headers = dict(msg.headers() or [])
                if "fp.bundle" not in headers:
                    items.append(json.loads(msg.value() or b"null"))
    finally:
        consumer.close()
    return items


@contextmanager
def running(settings: Settings, spark: Any, pipeline: Pipeline) -> Iterator[PipelineRun]:
    """A started pipeline, stopped on exit."""
    run = SparkRunner(settings, spark).start(pipeline.graph())
    try:
        yield run
    finally:
        run.stop()
