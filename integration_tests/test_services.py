"""Acker, min-time view, barrier and bundle consumer on the real broker.

Stage tasks are played by hand: items go to the pre-barrier topic in frames, acks and
heartbeats go to the acks topic as `AckBatch` records, as a Spark stage writes them.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from connectors.bundles import BundleConsumer, VerifiedBundle
from framework.acker.service import AckerService
from framework.barrier.service import BarrierService
from framework.barrier.speculation import Speculation
from framework.cli.consume import consume_main
from framework.core.messages import Ack, BundleHeader, Heartbeat
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import ConfigError, PipelineError, ProtocolViolation
from framework.kafka.admin import TopicSpec, ensure_topics
from framework.kafka.clients import is_eof, new_consumer, produce_record, verified_metadata
from framework.kafka.endpoints import KafkaSink
from framework.kafka.mintime import MinTimeView
from framework.kafka.tail import last_bundle_header
from framework.kafka.transactions import TransactionalProducer
from framework.wire.avro import encode_ack_batch, encode_bundle_header, encode_meta
from framework.wire.bundles import (
    META_HEADER,
    barrier_instance,
    bundles_topic,
    owned_partitions,
    read_bundle_header,
    signed_item,
)
from framework.wire.frames import FRAME_HEADERS, FrameBuilder
from framework.wire.positions import BarrierMark
from framework.wire.records import OutRecord
from framework.wire.serde import Utf8
from framework.wire.topics import Topics

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
            produce_record(self.producer, OutRecord(Topics(self.app).acks, shard, None, value))
        self.producer.flush(TIMEOUT)
        self.sent.append(SHARDS)

    def one(self, shard: int, acks: list[Ack]) -> None:
        """A batch delivered to one shard only (the other one's part comes later)."""
        value = encode_ack_batch(self.node, self.time, acks, [])
        produce_record(self.producer, OutRecord(Topics(self.app).acks, shard, None, value))
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


class CrashingAcker(AckerService):
    """An acker that never saves a checkpoint: a restart after it replays from the start,
    as after a kill -9 before its first checkpoint."""

    def _checkpoint(self) -> None:
        pass


def test_acker_publishes_the_seeds_t_and_t_plus_1_case(
    bootstrap: str, app: str, producer: Producer
) -> None:
    """The tracker paper: t+1 is done before t; processing t re-opens t+1 on the other shard."""
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
        with CrashingAcker(bootstrap, app, SEGMENTS, [FRONT], SHARDS) as first:
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


def test_restarted_acker_resumes_from_its_checkpoint(
    bootstrap: str, app: str, producer: Producer
) -> None:
    front = Node(app, producer, FRONT_NODE)
    with MinTimeView(bootstrap, app, SHARDS, SEGMENTS) as view:
        with AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS, checkpoint_s=0) as first:
            front.batch({0: [Ack(SEGMENT, 4, 1)]}, [Heartbeat(FRONT, 9)])
            settle(first, view, 2)
            wait_until(lambda: first.checkpoints >= 2, "a checkpoint of both shards")
            # From here on nothing is saved, not even by the clean stop: as if killed.
            first.checkpoint_s = 1e9
            first._checkpoint = lambda: None  # type: ignore[method-assign]
            front.batch({0: [Ack(SEGMENT, 4, 1)]}, [Heartbeat(FRONT, 12)])
            settle(first, view, 4)
            assert view.min_time() == 12
        before = view.reports
        with AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS) as second:
            wait_until(lambda: second.batches >= 2 and not second.replaying, "the replay")
            assert second.resumed == {0: 1, 1: 1}  # after the first batch of each partition
            assert second.batches == 2  # only what came after the checkpoint was replayed
            assert second.published == 0  # and it re-made only reports already out
            front.batch({}, [Heartbeat(FRONT, 20)])
            settle(second, view, 4, before)
            assert view.min_time() == 20
        # The clean stop saved both shards: the next start replays nothing.
        with AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS) as third:
            third.wait_ready()
            wait_until(lambda: not third.replaying, "the start")
            assert third.resumed == {0: 3, 1: 3}
            assert third.batches == 0
            front.batch({}, [Heartbeat(FRONT, 25)])
            assert view.wait_for(None, 25, TIMEOUT)
        assert view.error is None  # no vector went back


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


def test_a_heartbeat_round_cut_short_by_a_kill_does_not_stop_min_time(
    bootstrap: str, app: str, producer: Producer
) -> None:
    """A driver's heartbeat sender killed -9 between its shard records: its last round
    is on shard 0 only, and it never sends again. The heartbeats of the next driver's
    sender move min time on, also for an acker restarted from the acks topic (the
    listener leaves heartbeat-only nodes out of its cut: docs/decisions/sharded-listener.md)."""
    from framework.core.ids import heartbeat_node_id

    worker = Node(app, producer, WORKER)
    dead = Node(app, producer, heartbeat_node_id(f"{app}/fronts/dead"))
    new = Node(app, producer, heartbeat_node_id(f"{app}/fronts/new"))
    with MinTimeView(bootstrap, app, SHARDS, SEGMENTS) as view:
        with CrashingAcker(bootstrap, app, SEGMENTS, [FRONT], SHARDS) as acker:
            worker.batch({0: [Ack(SEGMENT, 10, 0xA)]})
            dead.batch({}, [Heartbeat(FRONT, 12)])
            worker.batch({0: [Ack(SEGMENT, 10, 0xA)]})
            dead.time += 1  # its next round reaches shard 0 only
            value = encode_ack_batch(dead.node, dead.time, [], [Heartbeat(FRONT, 20)])
            produce_record(producer, OutRecord(Topics(app).acks, 0, None, value))
            producer.flush(TIMEOUT)
            settle(acker, view, 7)
            assert view.min_time() == 12
            new.batch({}, [Heartbeat(FRONT, 30)])
            assert view.wait_for(None, 30, TIMEOUT), f"min time stayed at {view.min_time()}"
        before = view.reports
        with AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS) as second:
            wait_until(lambda: second.batches >= 9 and not second.replaying, "the replay")
            new.batch({}, [Heartbeat(FRONT, 40)])
            settle(second, view, 11, before)
            assert view.min_time() == 40
        assert view.error is None


# -- the barrier -------------------------------------------------------------------------

SINK_NODE = "9-sink"


@dataclass
class Stage:
    """The last stage, played by hand: items to the pre-barrier topic in frames of up to
    three (so frames mix slots). Items for a sink are not acked: their write is their
    receipt. ``node`` acks the stage's own input in the tests that need it."""

    app: str
    producer: Producer
    node: Node

    def send(
        self, items: list[tuple[Meta, str]], per_frame: int = 3, sink: KafkaSink | None = None
    ) -> None:
        """Payloads leave as the sink's output records, signed as a last stage signs them
        (default: unkeyed UTF-8 for the rig's sink)."""
        encode = sink.encode if sink is not None else lambda text: (None, text.encode())
        topic = sink.topic if sink is not None else f"{self.app}.out"
        barriers = sink.barriers if sink is not None else 1
        pre = Topics(self.app).pre(SINK_NODE)
        for first in range(0, len(items), per_frame):
            frames: dict[int, FrameBuilder] = {}  # per barrier instance, as a stage routes
            for meta, payload in items[first : first + per_frame]:
                ack = random.getrandbits(64) | 1
                key, value = encode(payload)
                assert sink is not None or barriers == 1
                to = barrier_instance(key, meta, sink.partitions, barriers) if sink else 0
                signed = signed_item(meta, key, value, topic)
                frames.setdefault(to, FrameBuilder(keyed=False)).add(meta, ack, signed)
            for partition, frame in frames.items():
                for value in frame.frames():
                    record = OutRecord(pre, partition, None, value, FRAME_HEADERS)
                    produce_record(self.producer, record)
        self.producer.flush(TIMEOUT)


@dataclass
class Rig:
    """An app with an acker, a min-time view, a hand-played stage and front, and a sink."""

    bootstrap: str
    app: str
    view: MinTimeView
    stage: Stage
    front: Node
    sink: KafkaSink

    def barrier(self, sink: KafkaSink | None = None, **options: Any) -> BarrierService:
        options.setdefault("view", self.view)
        return BarrierService(
            self.bootstrap,
            self.app,
            SINK_NODE,
            SEGMENT,
            sink or self.sink,
            shards=SHARDS,
            **options,
        )

    def heartbeat(self, slot: int) -> None:
        self.front.batch({}, [Heartbeat(FRONT, slot)])


@pytest.fixture
def rig(
    request: pytest.FixtureRequest, bootstrap: str, app: str, producer: Producer
) -> Iterator[Rig]:
    """The rig; ``indirect`` parametrization gives the pre-barrier partitions (barriers)."""
    barriers = getattr(request, "param", 1)
    ensure_topics(bootstrap, [TopicSpec(Topics(app).pre(SINK_NODE), barriers)])
    sink = KafkaSink(f"{app}.out", value=Utf8())
    sink.prepare(bootstrap)
    with (
        AckerService(bootstrap, app, SEGMENTS, [FRONT], SHARDS),
        MinTimeView(bootstrap, app, SHARDS, SEGMENTS) as view,
    ):
        stage = Stage(app, producer, Node(app, producer, WORKER))
        yield Rig(bootstrap, app, view, stage, Node(app, producer, FRONT_NODE), sink)


def meta(slot: int, offset: int, trace: int = 0) -> Meta:
    return Meta(GlobalTime(slot, FRONT, offset), (), trace)


FIRST = [
    (meta(11, 5), "d"),
    (meta(10, 3), "b"),
    (meta(10, 1), "a"),
    (meta(10, 2), "x"),
    (meta(10, 2).as_tombstone(), "x"),
]


def _read(bootstrap: str, topic: str, isolation: str) -> list[Any]:
    consumer = new_consumer(bootstrap, config={"isolation.level": isolation})
    out: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.05):
                if is_eof(msg):
                    return out
                out.append(msg)
        raise AssertionError("no end-of-partition event")
    finally:
        consumer.close()


def read_output(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[str]:
    """The values on the output topic now, in offset order (read_uncommitted: also what open
    transactions hold). The output holds the user's records and nothing else."""
    values = []
    for msg in _read(bootstrap, topic, isolation):
        raw = msg.value()
        assert raw is not None, "a valueless record on the output topic"
        values.append(raw.decode())
    return values


def read_headers(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """``(seq, item_count)`` of the committed bundle headers of output ``topic``."""
    headers = [
        read_bundle_header(m.value())
        for m in _read(bootstrap, bundles_topic(topic), "read_committed")
    ]
    return [(h.seq, h.item_count) for h in headers]


def bundles(consumer: BundleConsumer, count: int) -> list[VerifiedBundle]:
    out: list[VerifiedBundle] = []
    while len(out) < count:
        bundle = consumer.poll(TIMEOUT)
        assert bundle is not None, f"bundle {len(out)} did not come"
        out.append(bundle)
    return out


def values(bundle: VerifiedBundle) -> list[Any]:
    return [item.value for item in bundle.items]


def _crash_the_release(rig: Rig, crashing: BarrierService, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next release (heartbeat 11) dies before its commit with its transaction open:
    the barrier stops with the simulated crash, and nothing of it is visible."""

    def crash(self: TransactionalProducer) -> None:
        raise PipelineError("simulated crash before the commit")

    monkeypatch.setattr(TransactionalProducer, "commit", crash)
    rig.heartbeat(11)
    wait_until(lambda: not crashing.running, "the crash")
    with pytest.raises(PipelineError, match="simulated crash"):
        crashing.stop()
    assert read_output(rig.bootstrap, rig.sink.topic) == []
    monkeypatch.undo()


def test_barrier_releases_bundles_past_min_time_in_meta_order(rig: Rig) -> None:
    rig.stage.send(FIRST)
    rig.heartbeat(11)
    group = f"{rig.app}.reader"
    with (
        rig.barrier() as barrier,
        BundleConsumer(rig.bootstrap, rig.sink.topic, group, Utf8()) as out,
    ):
        (first,) = bundles(out, 1)
        assert (first.header.seq, values(first)) == (0, ["a", "b"])  # x and its tombstone cancel
        assert first.header.gt_last == GlobalTime.slot_end(10)
        assert out.poll(0.5) is None  # slot 11 waits for the min time
        rig.heartbeat(12)
        (second,) = bundles(out, 1)
        assert (second.header.seq, values(second)) == (1, ["d"])
        wait_until(lambda: barrier.released_through() >= 12, "release through 12")
        assert barrier.stats.bundles == 2
    assert read_output(rig.bootstrap, rig.sink.topic) == ["a", "b", "d"]
    assert read_headers(rig.bootstrap, rig.sink.topic) == [(0, 2), (1, 1)]


@pytest.mark.parametrize("retracts", [True, False], ids=["per-item", "per-slot"])
def test_a_min_time_waits_until_the_frames_committed_before_it_are_read(
    rig: Rig, retracts: bool
) -> None:
    """Nothing is acked on receipt, so min time 11 comes while most of slot 10's frames
    are unread (the barrier takes one frame a step): it must wait for them (the fence),
    not release slot 10 without them and then meet them after GT_last."""
    items = [(meta(10, i), f"v{i}") for i in range(120)]
    with rig.barrier(max_batch=1, retracts=retracts) as barrier:
        barrier.wait_ready()
        take = barrier._take

        def slow_take(msg: Any) -> None:
            # The first frame waits until the barrier's view has min time 11, the others
            # come one a step: the min time comes before the frames are read, however
            # slowly the acker's report arrives (a loaded machine took over 0.6 s).
            view = barrier._view
            assert view is not None
            wait_until(lambda: view.min_time(barrier.segment) >= 11, "min time 11 in the view")
            time.sleep(0.005)
            take(msg)

        barrier._take = slow_take  # type: ignore[method-assign]
        rig.stage.send(items, per_frame=1)
        rig.heartbeat(11)
        wait_until(lambda: barrier.released_through() >= 11, "release through 11")
        assert barrier.stats.fence_waits >= 1  # the min time came before the frames were read
        assert barrier.stats.records_in == 120
    assert sorted(read_output(rig.bootstrap, rig.sink.topic)) == sorted(v for _, v in items)


def test_a_crashed_bundle_is_invisible_and_comes_exactly_once_after_restart(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.stage.send(FIRST)
    crashing = rig.barrier().start()
    wait_until(
        lambda: (
            (crashing.stats.items_in == 5 and crashing.stats.commits >= 1) or not crashing.running
        ),
        "the frames and a positions commit",
    )
    crashing.check()

    _crash_the_release(rig, crashing, monkeypatch)  # of a and b
    group = f"{rig.app}.reader"
    with (
        rig.barrier() as barrier,
        BundleConsumer(rig.bootstrap, rig.sink.topic, group, Utf8()) as out,
    ):
        (first,) = bundles(out, 1)
        assert (first.header.seq, values(first)) == (0, ["a", "b"])
        rig.heartbeat(12)
        (second,) = bundles(out, 1)
        assert (second.header.seq, values(second)) == (1, ["d"])
        assert rig.view.min_time(SEGMENT) == 12
        assert barrier.stats.items_in == 5  # read again from P_rel = 0
        assert barrier.stats.records_in == 2  # as two frames
    assert read_output(rig.bootstrap, rig.sink.topic) == ["a", "b", "d"]


def test_restart_recovers_gt_last_and_seq_and_drops_replays(rig: Rig) -> None:
    rig.stage.send(FIRST)
    rig.heartbeat(12)
    group = f"{rig.app}.reader"
    with rig.barrier() as barrier:
        wait_until(lambda: barrier.released_through() >= 12, "release through 12")
    with BundleConsumer(rig.bootstrap, rig.sink.topic, group, Utf8()) as out:
        (first,) = bundles(out, 1)  # one bundle: a and b and d were released together
        assert values(first) == ["a", "b", "d"]
    with rig.barrier() as barrier:
        barrier.wait_ready()
        assert barrier.next_seq == 1
        assert barrier.gt_last == GlobalTime.slot_end(11)
        # A replay (input re-read after a restore) re-sends old items, then new ones.
        rig.stage.send([*FIRST, (meta(12, 8), "e"), (meta(13, 9), "f")])
        rig.heartbeat(14)
        wait_until(lambda: barrier.released_through() >= 14, "release through 14")
    with BundleConsumer(rig.bootstrap, rig.sink.topic, group, Utf8()) as out:
        (second,) = bundles(out, 1)  # resumes after bundle 0, expecting bundle 1
        assert (second.header.seq, values(second)) == (1, ["e", "f"])


@pytest.mark.parametrize("retracts", [True, False], ids=["per-item", "per-slot"])
def test_items_are_written_ahead_invisibly_and_committed_by_the_release(
    rig: Rig, retracts: bool
) -> None:
    rig.stage.send([(meta(10, 1), "a"), (meta(11, 2), "b"), (meta(12, 3), "c")])
    spec = Speculation(max_hold_s=60.0, min_pending=0)
    with rig.barrier(speculation=spec, retracts=retracts) as barrier:
        # a and b go ahead; c, in the latest slot so far (the frontier), waits for a later one
        wait_until(lambda: barrier.stats.ahead == 2, "two items written ahead")
        uncommitted = read_output(rig.bootstrap, rig.sink.topic, "read_uncommitted")
        assert sorted(uncommitted) == ["a", "b"]
        assert read_output(rig.bootstrap, rig.sink.topic) == []  # invisible until the commit
        rig.heartbeat(11)  # would release a, but the transaction holds b too: it waits
        wait_until(lambda: barrier.stats.holds == 1, "the release held")
        time.sleep(0.3)
        assert (barrier.stats.bundles, barrier.released_through()) == (0, 0)
        rig.heartbeat(13)
        wait_until(lambda: barrier.released_through() >= 13, "release through 13")
        assert (barrier.stats.bundles, barrier.stats.ahead, barrier.stats.aborts) == (1, 2, 0)
    assert sorted(read_output(rig.bootstrap, rig.sink.topic)) == ["a", "b", "c"]
    assert read_headers(rig.bootstrap, rig.sink.topic) == [(0, 3)]
    with BundleConsumer(rig.bootstrap, rig.sink.topic, f"{rig.app}.reader", Utf8()) as out:
        (bundle,) = bundles(out, 1)
        assert values(bundle) == ["a", "b", "c"]  # handed out in meta order
        assert bundle.header.gt_last == GlobalTime.slot_end(12)


def test_a_long_hold_or_a_tombstone_aborts_and_the_release_goes_ahead(rig: Rig) -> None:
    rig.stage.send([(meta(10, 1), "a"), (meta(11, 2), "b"), (meta(12, 3), "c")])
    spec = Speculation(max_hold_s=0.2, cooldown=1, min_pending=0)
    group = f"{rig.app}.reader"
    with (
        rig.barrier(speculation=spec) as barrier,
        BundleConsumer(rig.bootstrap, rig.sink.topic, group, Utf8()) as out,
    ):
        wait_until(lambda: barrier.stats.ahead == 2, "two items written ahead")
        rig.heartbeat(11)
        (first,) = bundles(out, 1)  # after the hold, the transaction aborted: a alone
        assert (values(first), barrier.stats.holds, barrier.stats.aborts) == (["a"], 1, 1)
        # That release ended the pause: b, before the frontier, went ahead again.
        assert barrier.stats.ahead == 3
        rig.heartbeat(13)
        (second,) = bundles(out, 1)
        assert values(second) == ["b", "c"]
        # A tombstone for an item written ahead poisons the transaction.
        rig.stage.send([(meta(14, 1), "d"), (meta(14, 2), "e"), (meta(15, 3), "f")])
        wait_until(lambda: barrier.stats.ahead == 5, "d and e written ahead")
        rig.stage.send([(meta(14, 2).as_tombstone(), "e")])
        wait_until(lambda: barrier.stats.items_in == 7, "the tombstone")
        rig.heartbeat(15)
        (third,) = bundles(out, 1)
        assert (values(third), barrier.stats.aborts) == (["d"], 2)
        rig.heartbeat(16)
        (fourth,) = bundles(out, 1)
        assert values(fourth) == ["f"]
    assert read_output(rig.bootstrap, rig.sink.topic) == ["a", "b", "c", "d", "f"]


FINAL = [(meta(11, 5), "d"), (meta(10, 3), "b"), (meta(10, 1), "a"), (meta(12, 7), "e")]
"""Output no grouping precedes: no tombstones, so its barrier buffers it per slot."""


def committed_mark(rig: Rig) -> tuple[int, BarrierMark] | None:
    """The barrier's committed position on pre-barrier partition 0 and its mark."""
    group = f"{rig.app}.{SINK_NODE}.barrier"
    consumer = new_consumer(rig.bootstrap, group)
    try:
        asked = [TopicPartition(Topics(rig.app).pre(SINK_NODE), 0)]
        (tp,) = consumer.committed(asked, timeout=TIMEOUT)
    finally:
        consumer.close()
    if tp.offset < 0:
        return None
    return tp.offset, BarrierMark.decode(verified_metadata(group, tp), group)


def test_a_sink_no_grouping_precedes_is_released_per_slot_exactly_once_through_a_crash(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-slot barrier (`framework.barrier.blocks`): a release that dies before its
    commit shows nothing and comes once after the restart; a restart resumes GT_last and
    seq and drops replays; a tombstone stops it."""
    rig.stage.send(FINAL)
    spec = Speculation(min_pending=0)
    crashing = rig.barrier(retracts=False, speculation=spec).start()
    wait_until(lambda: crashing.stats.items_in == 4 or not crashing.running, "the frames")
    wait_until(lambda: crashing.stats.ahead == 3 or not crashing.running, "written ahead")
    crashing.check()

    _crash_the_release(rig, crashing, monkeypatch)  # of a and b
    group = f"{rig.app}.reader"
    with (
        rig.barrier(retracts=False, speculation=spec) as barrier,
        BundleConsumer(rig.bootstrap, rig.sink.topic, group, Utf8()) as out,
    ):
        (first,) = bundles(out, 1)
        assert (first.header.seq, values(first)) == (0, ["a", "b"])
        assert first.header.gt_last == GlobalTime.slot_end(10)
        rig.heartbeat(13)
        (second,) = bundles(out, 1)
        assert (second.header.seq, values(second)) == (1, ["d", "e"])
        assert barrier.stats.items_in == 4 and barrier.stats.items_released == 4
        # The positions follow within checkpoint_s: past both frames, GT_last with them
        # (what snapshots accept and a restart resumes from).
        wait_until(
            lambda: (
                (found := committed_mark(rig)) is not None
                and found[1].gt_last == GlobalTime.slot_end(12)
            ),
            "the positions past the release",
        )
        offset, _ = committed_mark(rig) or (None, None)
        assert offset == 2  # P_rel past both frames
    barrier = rig.barrier(retracts=False).start()
    try:
        barrier.wait_ready()
        assert (barrier.next_seq, barrier.gt_last) == (2, GlobalTime.slot_end(12))
        rig.stage.send([*FINAL, (meta(13, 8), "f")])  # a replay, then a new item
        rig.heartbeat(14)
        wait_until(lambda: barrier.released_through() >= 14, "release through 14")
        assert barrier.replays_dropped == 4  # the resent four; P_rel was past the first
        rig.stage.send([(meta(14, 1), "g"), (meta(14, 1).as_tombstone(), "g")])
        wait_until(lambda: not barrier.running, "the refusal")
    finally:
        with pytest.raises(ProtocolViolation, match="a tombstone at slot 14"):
            barrier.stop()
    # Within a bundle, the items of a slot in their order of arrival (no contract).
    assert read_output(rig.bootstrap, rig.sink.topic) == ["b", "a", "d", "e", "f"]
    assert read_headers(rig.bootstrap, rig.sink.topic) == [(0, 2), (1, 2), (2, 1)]


def test_a_barrier_can_run_its_own_min_time_view(rig: Rig) -> None:
    rig.stage.send(FIRST)
    rig.heartbeat(12)
    with rig.barrier(view=None, segments=[SEGMENT]) as barrier:
        wait_until(lambda: barrier.released_through() >= 12, "release through 12")
        assert barrier.stats.bundles == 1


def test_at_least_once_mode_writes_verifiable_bundles(rig: Rig) -> None:
    rig.stage.send(FIRST)
    rig.heartbeat(11)
    group = f"{rig.app}.reader"
    with (
        rig.barrier(exactly_once=False),
        BundleConsumer(rig.bootstrap, rig.sink.topic, group, Utf8()) as out,
    ):
        (first,) = bundles(out, 1)
        assert values(first) == ["a", "b"]
        rig.heartbeat(12)
        (second,) = bundles(out, 1)
        assert (second.header.seq, values(second)) == (1, ["d"])
    with rig.barrier(exactly_once=False) as again:
        again.wait_ready()
        assert (again.next_seq, again.gt_last) == (2, GlobalTime.slot_end(11))


def test_an_at_least_once_barrier_killed_before_its_positions_reads_its_frames_again(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At least once, a barrier that dies before committing its positions reads the same
    frames again after the restart and releases them once min time passes them."""

    def crash(self: TransactionalProducer) -> None:
        raise PipelineError("simulated crash before the positions")

    # The positions are never committed.
    monkeypatch.setattr(TransactionalProducer, "commit", crash)
    rig.stage.send(FIRST)
    crashing = rig.barrier(exactly_once=False).start()
    wait_until(lambda: not crashing.running, "the crash")
    with pytest.raises(PipelineError, match="simulated crash"):
        crashing.stop()
    monkeypatch.undo()
    with rig.barrier(exactly_once=False) as barrier:
        wait_until(lambda: barrier.stats.items_in == 5, "the frames read again")
        rig.heartbeat(12)
        assert rig.view.wait_for(SEGMENT, 12, TIMEOUT), f"min time {rig.view.min_time(SEGMENT)}"
        wait_until(lambda: barrier.stats.bundles == 1, "the release")
    assert sorted(read_output(rig.bootstrap, rig.sink.topic)) == ["a", "b", "d"]


@pytest.mark.parametrize("retracts", [True, False], ids=["per-item", "per-slot"])
def test_every_output_partition_gets_every_bundle(rig: Rig, retracts: bool) -> None:
    sink = KafkaSink(f"{rig.app}.keyed", value=Utf8(), key=lambda text: text, partitions=2)
    sink.prepare(rig.bootstrap)
    rig.stage.send([(meta(10, i), f"k{i}") for i in range(8)], sink=sink)
    rig.heartbeat(11)
    group = f"{rig.app}.reader"
    with (
        rig.barrier(sink, retracts=retracts),
        BundleConsumer(rig.bootstrap, sink.topic, group, Utf8()) as out,
    ):
        got = {bundle.partition: bundle for bundle in bundles(out, 2)}
        rig.heartbeat(12)  # an empty release writes no bundle
        assert out.poll(0.3) is None
    assert sorted(got) == [0, 1]
    assert {b.header.seq for b in got.values()} == {0}
    items = [item for bundle in got.values() for item in bundle.items]
    assert sorted(item.value for item in items) == [f"k{i}" for i in range(8)]
    assert all(item.key == item.value.encode() for item in items)
    assert all(b.header.item_count == len(b.items) for b in got.values())


@pytest.mark.parametrize("rig", [2], indirect=True)
@pytest.mark.parametrize("retracts", [True, False], ids=["per-item", "per-slot"])
def test_two_barrier_instances_each_write_their_partitions_as_one_bundle_sequence(
    rig: Rig, retracts: bool
) -> None:
    sink = KafkaSink(
        f"{rig.app}.two", value=Utf8(), key=lambda text: text, partitions=4, barriers=2
    )
    sink.prepare(rig.bootstrap)
    first = [(meta(10, i), f"k{i}") for i in range(40)]
    if retracts:
        first += [(meta(10, 90), "kx"), (meta(10, 90).as_tombstone(), "kx")]  # they cancel
    rig.stage.send(first, sink=sink)
    rig.heartbeat(11)
    group = f"{rig.app}.reader"
    with BundleConsumer(rig.bootstrap, sink.topic, group, Utf8()) as out:
        with (
            rig.barrier(sink, instance=0, retracts=retracts),
            rig.barrier(sink, instance=1, retracts=retracts) as other,
        ):
            got = {bundle.partition: bundle for bundle in bundles(out, 4)}
            assert {b.header.seq for b in got.values()} == {0}
            # Each instance writes only the partitions it owns, under ids of its own.
            assert other.stats.items_out == sum(len(got[p].items) for p in (1, 3))
            assert other.transactional_id.endswith(".barrier.1")
        # Restarted, each instance resumes its own partitions' sequence.
        rig.stage.send([(meta(11, i), f"k{i}") for i in range(40, 60)], sink=sink)
        rig.heartbeat(12)
        with (
            rig.barrier(sink, instance=1, retracts=retracts) as other,
            rig.barrier(sink, instance=0, retracts=retracts) as one,
        ):
            again = {bundle.partition: bundle for bundle in bundles(out, 4)}
            assert (one.next_seq, other.next_seq) == (2, 2)
        assert {b.header.seq for b in again.values()} == {1}
        items = [i for done in (got, again) for b in done.values() for i in b.items]
    assert sorted(item.value for item in items) == sorted(f"k{i}" for i in range(60))
    for bundle in (*got.values(), *again.values()):
        assert bundle.header.item_count == len(bundle.items)
    # Another instance count on the same pre-barrier topic is refused before anything runs.
    one_barrier = KafkaSink(sink.topic, value=Utf8(), key=lambda text: text, partitions=4)
    refused = rig.barrier(one_barrier)
    with pytest.raises(ConfigError, match=r"has 2 partition\(s\) and .* 1 barrier"):
        refused.start().wait_ready()
    refused.stop_quietly()


def test_a_restart_refuses_bundle_headers_that_other_instances_wrote(
    bootstrap: str, new_topics: Callable[..., list[str]]
) -> None:
    (topic,) = new_topics("split")
    ensure_topics(bootstrap, [TopicSpec(bundles_topic(topic), 2)])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, seq in ((0, 4), (1, 2)):  # as two instances left them
        header = BundleHeader(seq, GlobalTime.slot_end(10 + seq), 0)
        control = OutRecord(bundles_topic(topic), partition, None, encode_bundle_header(header))
        produce_record(producer, control)
    producer.flush(TIMEOUT)
    assert [last_bundle_header(bootstrap, topic, owned_partitions(2, 2, k)) for k in (0, 1)] == [
        BundleHeader(4, GlobalTime.slot_end(14), 0),
        BundleHeader(2, GlobalTime.slot_end(12), 0),
    ]
    # One barrier for both would resume at seq 5 and drop partition 1's items up to slot 14.
    with pytest.raises(ConfigError, match=r"differ \(\[0\] seq 4, \[1\] seq 2\)"):
        last_bundle_header(bootstrap, topic, strict=True)


# -- the bundle consumer on hand-made bundles --------------------------------------------


def write_bundles(bootstrap: str, topic: str, bundles: list[tuple[int, int, list[int]]]) -> None:
    """Bundles ``(seq, gt_last slot, item slots)`` written as a barrier would."""
    ensure_topics(bootstrap, [TopicSpec(bundles_topic(topic), 1)])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for seq, last, slots in bundles:
        for i, slot in enumerate(slots):
            headers = ((META_HEADER, encode_meta(meta(slot, i))),)
            produce_record(producer, OutRecord(topic, 0, None, f"{seq}.{i}".encode(), headers))
        header = BundleHeader(seq, GlobalTime.slot_end(last), len(slots))
        closing = OutRecord(bundles_topic(topic), 0, None, encode_bundle_header(header))
        produce_record(producer, closing)
    producer.flush(TIMEOUT)


def test_a_consumer_reads_to_the_end_of_what_is_committed_and_stops(
    bootstrap: str, new_topics: Callable[..., list[str]]
) -> None:
    """``bundles(to_end=True)`` hands out every committed bundle and stops at the end at
    once, without waiting out an idle time; a header whose items never come is not the
    end (it waits the idle time out instead)."""
    (topic,) = new_topics("ends")
    write_bundles(bootstrap, topic, [(0, 3, [1, 2]), (1, 5, [4]), (2, 6, [])])
    with BundleConsumer(bootstrap, topic, f"g-{topic}", Utf8()) as out:
        began = time.monotonic()
        assert [b.header.seq for b in out.bundles(to_end=True, idle_s=30)] == [0, 1, 2]
        assert time.monotonic() - began < 10 and out.at_end()
        assert list(out.bundles(to_end=True, idle_s=30)) == []  # nothing new: at once
    header = BundleHeader(3, GlobalTime.slot_end(8), 1)  # its item never written
    control = OutRecord(bundles_topic(topic), 0, None, encode_bundle_header(header))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    produce_record(producer, control)
    producer.flush(TIMEOUT)
    with BundleConsumer(bootstrap, topic, f"g-{topic}", Utf8()) as out:
        began = time.monotonic()
        assert list(out.bundles(to_end=True, idle_s=2)) == []
        assert time.monotonic() - began >= 2 and not out.at_end()


def test_consumer_resumes_verification_after_its_committed_bundle(
    bootstrap: str, new_topics: Callable[..., list[str]]
) -> None:
    (topic,) = new_topics("bundles")
    write_bundles(bootstrap, topic, [(0, 3, [1, 2]), (1, 5, [4])])
    group = f"g-{topic}"
    with BundleConsumer(bootstrap, topic, group, Utf8()) as out:
        assert [b.header.seq for b in bundles(out, 2)] == [0, 1]
    write_bundles(bootstrap, topic, [(2, 7, [6]), (4, 9, [8])])  # bundle 3 is missing
    assert last_bundle_header(bootstrap, topic) == BundleHeader(4, GlobalTime.slot_end(9), 1)
    with BundleConsumer(bootstrap, topic, group, Utf8()) as out:
        (third,) = bundles(out, 1)
        assert values(third) == ["2.0"]
        with pytest.raises(ProtocolViolation, match="expected bundle 3 \\(gap\\)"):
            out.poll(TIMEOUT)
    code = consume_main(
        [topic, "--verify", "--bootstrap", bootstrap, "--serde", "utf8", "--idle", "1"]
    )
    assert code == 1
    assert consume_main([topic, "--bootstrap", bootstrap, "--serde", "utf8", "--idle", "1"]) == 0
