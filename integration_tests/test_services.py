"""Acker, min-time view, barrier and bundle consumer on the real broker.

Stage tasks are played by hand: items go to the pre-barrier topic with their item header,
acks and heartbeats go to the acks topic as `AckBatch` records, as a Spark stage writes them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer

from framework.core.messages import Ack, Heartbeat
from framework.kafka.wire import encode_ack_batch
from framework.runtime.stages import Topics
from framework.services import AckerService, MinTimeView

SEGMENT = "s"
SEGMENTS = {SEGMENT: ()}
FRONT = 7_000_001
FRONT_NODE, WORKER, WORKER2 = 101, 202, 303
SHARDS = 2
TIMEOUT = 30.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@dataclass
class Node:
    """A hand-played sender: acks and heartbeats per shard, closed by its node time."""

    app: str
    producer: Producer
    node: int
    time: int = 0
    sent: list[int] = field(default_factory=list)

    def batch(self, acks: dict[int, list[Ack]], beats: list[Heartbeat] = ()) -> None:  # type: ignore[assignment]
        self.time += 1
        for shard in range(SHARDS):
            value = encode_ack_batch(self.node, self.time, acks.get(shard, []), beats)
            self.producer.produce(Topics(self.app).acks, value, partition=shard)
        self.producer.flush(TIMEOUT)
        self.sent.append(SHARDS)

    def one(self, shard: int, acks: list[Ack]) -> None:
        """A batch delivered to one shard only (the other one's part comes later)."""
        value = encode_ack_batch(self.node, self.time, acks, [])
        self.producer.produce(Topics(self.app).acks, value, partition=shard)
        self.producer.flush(TIMEOUT)


@pytest.fixture
def app(bootstrap: str) -> str:
    return f"svc{uuid.uuid4().hex[:8]}"


@pytest.fixture
def producer(bootstrap: str) -> Iterator[Producer]:
    made = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    yield made
    made.flush(TIMEOUT)


def settle(acker: AckerService, view: MinTimeView, batches: int, earlier: int = 0) -> None:
    """Wait until the acker applied ``batches`` records and the view read all it wrote
    (after ``earlier`` reports of earlier ackers)."""
    wait_until(lambda: acker.batches >= batches, f"{batches} ack batches")
    wait_until(lambda: view.reports >= earlier + acker.published, "the view to read the reports")


# -- the acker ---------------------------------------------------------------------------


def test_acker_publishes_the_seeds_t_and_t_plus_1_case(
    bootstrap: str, app: str, producer: Producer
) -> None:
    """Seed 001: t+1 is done before t; processing t re-opens t+1 on the other shard."""
    t = 10  # shard 0 owns even slots, shard 1 odd ones
    front = Node(app, producer, FRONT_NODE)
    worker = Node(app, producer, WORKER)
    published: list[int] = []
    acker = AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS)
    with acker, MinTimeView(bootstrap, app, SHARDS, SEGMENTS) as view:
        view.subscribe(lambda note: published.append(note.slot) if note.segment is None else None)
        front.batch(
            {0: [Ack(SEGMENT, t, 0xA)], 1: [Ack(SEGMENT, t + 1, 0xB)]}, [Heartbeat(FRONT, t + 5)]
        )
        settle(acker, view, 2)
        assert view.min_time() == t
        worker.batch({1: [Ack(SEGMENT, t + 1, 0xB)]})  # t+1 fully processed first
        settle(acker, view, 4)
        assert view.min_time() == t
        worker.time += 1  # processing t: its receive-ack reaches shard 0 first ...
        worker.one(0, [Ack(SEGMENT, t, 0xA)])
        settle(acker, view, 5)
        assert view.min_time() == t  # ... and is not accepted alone
        worker.one(1, [Ack(SEGMENT, t + 1, 0xC)])  # the repaired output re-opens t+1
        settle(acker, view, 6)
        assert view.min_time() == t + 1
        worker.batch({1: [Ack(SEGMENT, t + 1, 0xC)]})
        settle(acker, view, 8)
        assert view.min_time() == t + 5
        assert view.min_time(SEGMENT) == t + 5
    assert published == [t, t + 1, t + 5]


def test_restarted_acker_continues_without_repeating_a_report(
    bootstrap: str, app: str, producer: Producer
) -> None:
    front = Node(app, producer, FRONT_NODE)
    published: list[int] = []
    with MinTimeView(bootstrap, app, SHARDS, SEGMENTS) as view:
        view.subscribe(lambda note: published.append(note.slot) if note.segment is None else None)
        with AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS) as first:
            front.batch({0: [Ack(SEGMENT, 4, 1)]}, [Heartbeat(FRONT, 9)])
            front.batch({0: [Ack(SEGMENT, 4, 1)]}, [Heartbeat(FRONT, 12)])
            settle(first, view, 4)
            assert view.min_time() == 12
        before = view.reports
        with AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS) as second:
            wait_until(lambda: second.batches >= 4 and not second.replaying, "the replay")
            assert second.published == 0  # the replay re-made only reports already out
            front.batch({}, [Heartbeat(FRONT, 20)])
            settle(second, view, 6, before)
            assert view.min_time() == 20
            assert second.published == 4  # one global + one segment note per shard
        assert view.reports == before + 4
        assert view.error is None  # no vector went back
    assert published == [4, 12, 20]
    with MinTimeView(bootstrap, app, SHARDS, SEGMENTS) as fresh:  # replays the topic
        assert fresh.wait_for(None, 20, TIMEOUT)
        assert fresh.wait_caught_up(TIMEOUT)
        assert fresh.min_time() == 20


def test_acker_instances_split_the_shards(bootstrap: str, app: str, producer: Producer) -> None:
    front = Node(app, producer, FRONT_NODE)
    with (
        AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS, partitions=[0]) as even,
        AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS, partitions=[1]) as odd,
        MinTimeView(bootstrap, app, SHARDS, SEGMENTS) as view,
    ):
        front.batch({0: [Ack(SEGMENT, 2, 5)], 1: [Ack(SEGMENT, 3, 6)]}, [Heartbeat(FRONT, 8)])
        wait_until(lambda: even.batches == 1 and odd.batches == 1, "both shards")
        assert view.wait_for(None, 2, TIMEOUT)
        front.batch({0: [Ack(SEGMENT, 2, 5)], 1: [Ack(SEGMENT, 3, 6)]})
        assert view.wait_for(None, 8, TIMEOUT)
