"""The acker and the barrier as processes of their own (``flamepipe acker|barrier``).

The sink has four partitions and two barrier instances, each a process
(``flamepipe barrier --instance k``). Instance 1 is killed with SIGKILL between producing
a bundle and committing it (a failpoint), the acker with kill -9 from outside; both
restart while instance 0 runs on. Then: the aborted bundle was really written and is
invisible to read_committed; its items appear exactly once; the verifying consumer (every
partition one bundle sequence) and a plain read_committed consumer see the same records,
equal to the oracle computed from the stored input.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.failpoints import ENV as FAILPOINTS
from framework.kafka.clients import read_to_end
from framework.runners.spark.runner import SparkRunner
from integration_tests.harness.runs import produce_lines, verified_items
from integration_tests.harness.services import ServiceProcess, service_env, services
from integration_tests.harness.watch import scrape, total
from integration_tests.pipelines import build

SPEC = "integration_tests.pipelines:word_pairs_job"
TWO_BARRIERS = "integration_tests.pipelines:word_pairs_two_barriers_job"


def _items(messages: list[Any]) -> Counter[str]:
    """Output items as canonical JSON, counted (the output holds nothing else)."""
    return Counter(json.dumps(json.loads(m.value()), sort_keys=True) for m in messages)


def _plain_read_committed(bootstrap: str, topic: str) -> Counter[str]:
    """A second, independent reader: plain confluent-kafka, its own group, no flamepipe code."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"independent-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    messages: list[Any] = []
    try:
        partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        waiting = set(range(partitions))
        while waiting:
            batch = consumer.consume(500, timeout=5)
            assert batch, f"no end of partitions {sorted(waiting)} of {topic}"
            for msg in batch:
                if msg.error() is None:
                    messages.append(msg)
                else:
                    waiting.discard(msg.partition())
    finally:
        consumer.close()
    return _items(messages)


def _census(bootstrap: str, app: str) -> str:
    """Records per topic of ``app`` (committed / written), per partition: where items went."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"census-{uuid.uuid4().hex}"})
    try:
        topics = sorted(t for t in consumer.list_topics(timeout=10).topics if t.startswith(app))
    finally:
        consumer.close()
    lines = []
    for topic in topics:
        counts = [
            Counter(m.partition() for m in read_to_end(bootstrap, topic, committed=committed))
            for committed in (True, False)
        ]
        lines.append(f"{topic}: committed {dict(counts[0])}, written {dict(counts[1])}")
    return "\n".join(lines)


def _aborted(bootstrap: str, topic: str, owner: set[int]) -> Counter[str]:
    """The items the killed barrier instance wrote to its partitions ``owner`` of ``topic``
    and did not commit (the other instance, alive, may hold items in an open transaction
    on its own partitions: those do not count)."""
    seen = {(m.partition(), m.offset()) for m in read_to_end(bootstrap, topic)}
    stray = [
        m
        for m in read_to_end(bootstrap, topic, committed=False)
        if m.partition() in owner and (m.partition(), m.offset()) not in seen
    ]
    assert stray, "the killed bundle's items should be in the log, uncommitted"
    return _items(stray)


def _wait(condition: Any, what: str, timeout_s: float = 240, detail: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{detail()}")
        time.sleep(0.2)


def test_killed_barrier_instance_and_acker_processes_lose_and_duplicate_nothing(
    stack: Settings, spark: Any, tmp_path: Path
) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = f"ext{uuid.uuid4().hex[:6]}"
    names = {"FP_TEST_APP": app, "FP_TEST_SOURCE": f"{app}-lines", "FP_TEST_SINK": f"{app}-out"}
    source, sink = names["FP_TEST_SOURCE"], names["FP_TEST_SINK"]
    env = service_env(settings, names)
    texts = generate_lines(600, words_per_line=5, vocabulary=40, seed=5)
    lines = [f"{i} {text}" for i, text in enumerate(texts)]
    words = sum(len(t.split()) for t in texts)
    with services() as procs:
        acker = ServiceProcess("acker", TWO_BARRIERS, env, tmp_path / "acker.log")
        first = ServiceProcess(
            "barrier", TWO_BARRIERS, env, tmp_path / "barrier0.log", "--instance", "0"
        )
        killed = {**env, FAILPOINTS: "barrier.bundle=2"}
        barrier = ServiceProcess(
            "barrier", TWO_BARRIERS, killed, tmp_path / "barrier1.log", "--instance", "1"
        )
        procs += [acker, first, barrier]
        for proc in (acker, first, barrier):
            proc.wait_ready()
        graph = build("word_pairs_two_barriers", app, source, sink).graph()
        run = SparkRunner(settings, spark, services="external").start(graph)
        try:
            # The first bundle commits; the second kills the barrier after producing it,
            # before committing it.
            produce_lines(bootstrap, source, lines[:150], partitions=2)
            _wait(lambda: read_to_end(bootstrap, sink), "the first bundle")
            produce_lines(bootstrap, source, lines[150:300], partitions=2)
            assert barrier.wait_exit(240) == -9, barrier.tail()
            aborted = _aborted(bootstrap, sink, owner={1, 3})
            acker.kill()
            acker = ServiceProcess("acker", TWO_BARRIERS, env, tmp_path / "acker2.log")
            barrier = ServiceProcess(
                "barrier", TWO_BARRIERS, env, tmp_path / "barrier1b.log", "--instance", "1"
            )
            procs += [acker, barrier]
            acker.wait_ready()
            barrier.wait_ready()
            # Each service process serves its own metrics: they move with the last lines.
            before = [scrape(p.page_url) for p in (acker, barrier, first)]
            produce_lines(bootstrap, source, lines[300:], partitions=2)
            _wait(
                lambda: sum(_items(read_to_end(bootstrap, sink)).values()) >= words,
                f"{words} output items",
                detail=lambda: f"{run.progress()}\n{_census(bootstrap, app)}",
            )
            run.check()
            after = [scrape(p.page_url) for p in (acker, barrier, first)]
            released = "flamepipe_barrier_items_released_total"
            moved = "flamepipe_acker_batches_total", released, released
            for old, new, name in zip(before, after, moved, strict=True):
                assert total(new, name) > total(old, name), name
        finally:
            run.stop()
    output = _items(read_to_end(bootstrap, sink))
    oracle = word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)
    assert Counter(pair_key(json.loads(item)) for item in output.elements()) == oracle
    # Equal to the oracle as a multiset: nothing lost, nothing twice, the aborted bundle's
    # items included exactly as often as a failure-free run makes them.
    assert aborted <= output
    assert _plain_read_committed(bootstrap, sink) == output
    assert verified_items(bootstrap, sink) == output
    partitions = Counter(m.partition() for m in read_to_end(bootstrap, sink))
    assert sorted(partitions) == [0, 1, 2, 3]


def _leader(pair: list[ServiceProcess], timeout_s: float = 120) -> ServiceProcess:
    """The one process of ``pair`` that leads (prints ready); the other must stand by."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = [p for p in pair if "ready (epoch" in p.log.read_text(errors="replace")]
        if ready:
            assert len(ready) == 1, "two leaders at once"
            return ready[0]
        time.sleep(0.1)
    raise AssertionError("no leader:\n" + "\n".join(p.tail() for p in pair))


def test_standby_acker_and_barrier_take_over_from_killed_leaders(
    stack: Settings, spark: Any, tmp_path: Path
) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = f"sby{uuid.uuid4().hex[:6]}"
    names = {"FP_TEST_APP": app, "FP_TEST_SOURCE": f"{app}-lines", "FP_TEST_SINK": f"{app}-out"}
    source, sink = names["FP_TEST_SOURCE"], names["FP_TEST_SINK"]
    env = service_env(settings, names)
    texts = generate_lines(400, words_per_line=5, vocabulary=40, seed=6)
    lines = [f"{i} {text}" for i, text in enumerate(texts)]
    words = sum(len(t.split()) for t in texts)
    with services() as procs:
        ackers = [ServiceProcess("acker", SPEC, env, tmp_path / f"acker{i}.log") for i in (1, 2)]
        barriers = [
            ServiceProcess("barrier", SPEC, env, tmp_path / f"barrier{i}.log") for i in (1, 2)
        ]
        procs += [*ackers, *barriers]
        acker, barrier = _leader(ackers), _leader(barriers)
        graph = word_pairs(app, source, sink, 2).graph()
        run = SparkRunner(settings, spark, services="external").start(graph)
        try:
            produce_lines(bootstrap, source, lines[:200], partitions=2)
            _wait(lambda: read_to_end(bootstrap, sink), "the first bundle")
            acker.kill()
            barrier.kill()
            killed = time.monotonic()
            produce_lines(bootstrap, source, lines[200:], partitions=2)
            standby_acker = next(p for p in ackers if p is not acker)
            standby_barrier = next(p for p in barriers if p is not barrier)
            assert _leader([standby_acker]) and _leader([standby_barrier])
            takeover_s = time.monotonic() - killed
            _wait(
                lambda: sum(_items(read_to_end(bootstrap, sink)).values()) >= words,
                f"{words} output items",
                detail=lambda: f"{run.progress()}\n{_census(bootstrap, app)}",
            )
            run.check()
        finally:
            run.stop()
    print(f"standbys led {takeover_s:.1f} s after the leaders were killed")
    output = _items(read_to_end(bootstrap, sink))
    oracle = word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)
    assert Counter(pair_key(json.loads(item)) for item in output.elements()) == oracle
    assert _plain_read_committed(bootstrap, sink) == output
    assert verified_items(bootstrap, sink) == output
    assert takeover_s < 60
