"""Helpers for tests that run whole pipelines on the real stack."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Producer

from connectors.bundles import BundleConsumer
from framework.config import Settings
from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.core.acker.sharded import shard_of
from framework.core.graph import Graph
from framework.core.messages import Ack
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key
from framework.demos.text import generate_lines, word_counts
from framework.kafka.admin import partitions_if_exists
from framework.kafka.clients import produce_record, read_to_end
from framework.pipeline import Pipeline
from framework.runners.spark.runner import PipelineRun, SparkRunner
from framework.wire.avro import encode_ack_batch
from framework.wire.records import OutRecord
from framework.wire.topics import Topics
from framework.wire.znodes import SnapshotRecord

# Both execution modes on the shared Spark session; continuous stages on one partition and
# one hash unit, whose tasks fit the session's task slots.
BOTH_EXECUTIONS = pytest.mark.parametrize(
    ("execution", "partitions"), [("micro-batch", 2), ("continuous", 1)]
)


def new_app(prefix: str, out: str = "out") -> tuple[str, str, str]:
    """A fresh app name and its topics: ``<app>-lines`` in, ``<app>-<out>`` out."""
    app = f"{prefix}{uuid.uuid4().hex[:6]}"
    return app, f"{app}-lines", f"{app}-{out}"


def numbered_lines(
    count: int, *, seed: int, words_per_line: int = 5, vocabulary: int = 30
) -> list[str]:
    """``count`` generated lines, each led by its number, so that no two are equal."""
    texts = generate_lines(count, words_per_line=words_per_line, vocabulary=vocabulary, seed=seed)
    return [f"{i} {text}" for i, text in enumerate(texts)]


def verified_items(bootstrap: str, topic: str) -> Counter[str]:
    """Every item of ``topic`` (as `pair_key` writes it: canonical JSON), read to the end
    by a new verifying consumer: a gap, a duplicate or a foreign bundle raises."""
    seen: Counter[str] = Counter()
    with BundleConsumer(bootstrap, topic, f"verify-{uuid.uuid4().hex}") as consumer:
        for bundle in consumer.bundles(to_end=True):
            seen.update(pair_key(item.value) for item in bundle.items)
    return seen


def open_transaction(
    bootstrap: str, transactional_id: str, topic: str, lines: list[str], partition: int = 0
) -> Producer:
    """A transactional producer that wrote ``lines`` to ``topic[partition]`` in a
    transaction left open (flushed): the caller commits or aborts it."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for line in lines:
        producer.produce(topic, value=line.encode(), partition=partition)
    producer.flush(30)
    return producer


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


def read_output(bootstrap: str, topic: str) -> list[Any]:
    """Every item of an output topic as read_committed shows it now, JSON-decoded. The
    output holds the user's records only (bundle headers are on its bundle topic)."""
    values = [msg.value() for msg in read_to_end(bootstrap, topic)]
    assert all(v is not None for v in values), "a valueless record on the output topic"
    return [json.loads(v) for v in values if v is not None]


def assert_running_counts(items: list[Any], lines: list[str]) -> None:
    """Exactly once for the running word count: every word shows each count 1..n once
    (n its occurrences in ``lines``), nothing else."""
    seen: dict[str, list[int]] = {}
    for word, n in items:
        seen.setdefault(word, []).append(n)
    assert {w: sorted(ns) for w, ns in seen.items()} == {
        w: list(range(1, n + 1)) for w, n in word_counts(lines).items()
    }


@contextmanager
def driving(settings: Settings, spark: Any, graph: Graph) -> Iterator[list[BaseException]]:
    """``graph`` run by `SparkRunner.run` on a thread (it follows new epochs, as a driver
    process does), stopped on exit; yields the list its failure lands in."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def drive() -> None:
        try:
            SparkRunner(settings, spark).run(graph, stop)
        except BaseException as exc:  # the test thread reports it
            failures.append(exc)

    driver = threading.Thread(target=drive, name="driver")
    driver.start()
    try:
        yield failures
    finally:
        stop.set()
        driver.join(120)


def wait_items(
    bootstrap: str, sink: str, count: int, timeout_s: float, failures: list[BaseException]
) -> None:
    """Until ``sink`` holds ``count`` items (read_committed); fails on a driver failure."""
    deadline = time.monotonic() + timeout_s
    # The driver thread creates the sink topic as it starts: until then, nothing is out.
    while not partitions_if_exists(bootstrap, sink) or len(read_output(bootstrap, sink)) < count:
        assert not failures, failures
        assert time.monotonic() < deadline, f"fewer than {count} output items"
        time.sleep(0.5)


@contextmanager
def running(settings: Settings, spark: Any, pipeline: Pipeline) -> Iterator[PipelineRun]:
    """A started pipeline, stopped on exit."""
    run = SparkRunner(settings, spark).start(pipeline.graph())
    try:
        yield run
    finally:
        run.stop()


def snapshot_past(
    settings: Settings, app: str, until_ms: int, timeout_s: float = 90
) -> SnapshotRecord:
    """Wait until ``app`` committed a snapshot whose slot starts after ``until_ms``; it."""
    registry = SnapshotRegistry(settings.zookeeper, app)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            latest = registry.latest()
            if latest is not None and latest.slot * DEFAULT_DELTA_MS > until_ms:
                return latest
            assert time.monotonic() < deadline, f"no snapshot of {app} past {until_ms}"
            time.sleep(0.2)
    finally:
        registry.close()


def lose_an_ack(bootstrap: str, app: str, segment: str, slot: int, shards: int) -> None:
    """An ack of a send whose receipt never comes: the slot's XOR stays non-zero."""
    producer = Producer({"bootstrap.servers": bootstrap})
    node = random.getrandbits(62)
    for shard in range(shards):
        acks = (
            [Ack(segment, slot, random.getrandbits(64) | 1)]
            if shard == shard_of(slot, shards)
            else []
        )
        value = encode_ack_batch(node, 1, acks, [])
        produce_record(producer, OutRecord(Topics(app).acks, shard, None, value))
    producer.flush(30)
