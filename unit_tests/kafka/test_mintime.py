"""The min-time view reading a compacted ``<app>.mintime`` never publishes a false time.

The shard reports of a random sharded run (`ShardSim` of the core tests, every interleaving)
are appended to a log, as the acker writes them. Meanwhile the log is compacted the way
Kafka does (a record before the cleaning point goes when a later one has its key) and a
view reads it: from the start, or lagging, across compactions. Whatever it has read up to
some record, it must publish no more than the true min time when that record was written.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.acker.service import report_key
from framework.core.acker.sharded import AckerShard, MinTimeListener
from framework.core.messages import Ack, AckerInput, Heartbeat, MinTimeNotification, NodeTime
from framework.kafka.mintime import MinTimeView
from framework.wire.auth import signed
from framework.wire.avro import encode_min_time
from unit_tests.core.acker.test_sharded import ShardSim, shard_actions, shard_sims


@dataclass(frozen=True)
class FakeMessage:
    """The part of a consumed Kafka record the view reads."""

    at: int
    payload: bytes

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return self.payload

    def topic(self) -> str:
        return "app.mintime"

    def key(self) -> None:
        return None

    def headers(self) -> tuple[tuple[str, bytes], ...]:
        return signed(self.topic(), None, self.payload)


class Log:
    """The mintime topic: reports with the true bounds when written; compaction."""

    def __init__(self, sim: ShardSim) -> None:
        self.sim = sim
        self.records: list[tuple[str, MinTimeNotification, dict[str | None, int]]] = []
        self.kept: list[int] = []

    def capture(self) -> None:
        """Append what the live listener has just been sent."""
        keys = [*self.sim.segments, None]
        while len(self.records) < len(self.sent):
            note = self.sent[len(self.records)]
            bounds = {key: self.sim.true_bound(key) for key in keys}
            self.kept.append(len(self.records))
            self.records.append((report_key(note), note, bounds))

    @property
    def sent(self) -> list[MinTimeNotification]:
        return self.sim.sent  # type: ignore[attr-defined, no-any-return]

    def compact(self, clean_to: int) -> None:
        """Drop each record before ``clean_to`` that a later one before it supersedes."""
        last: dict[str, int] = {}
        for offset in self.kept:
            if offset < clean_to:
                last[self.records[offset][0]] = offset
        self.kept = [o for o in self.kept if o >= clean_to or last[self.records[o][0]] == o]


class Reader:
    """A `MinTimeView` fed by hand, one record at a time."""

    def __init__(self, sim: ShardSim) -> None:
        self.view = MinTimeView("unused:9092", "app", sim.shards, list(sim.segments))
        self.position = 0

    def read(self, log: Log, count: int) -> None:
        for offset in [o for o in log.kept if o >= self.position][:count]:
            _, note, bounds = log.records[offset]
            self.view._take(FakeMessage(offset, encode_min_time(note)))  # type: ignore[arg-type]
            self.position = offset + 1
            for key, bound in bounds.items():
                assert self.view.min_time(key) <= bound, (key, offset)


def watch(sim: ShardSim) -> None:
    """Record every report in the order the live listener gets it."""
    sent: list[MinTimeNotification] = []
    receive = sim.listener.receive

    def tap(note: MinTimeNotification) -> list[MinTimeNotification]:
        sent.append(note)
        return receive(note)

    sim.listener.receive = tap  # type: ignore[method-assign]
    sim.sent = sent  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None)
@given(sim=shard_sims(), steps=shard_actions, data=st.data())
def test_compacted_reports_never_give_a_false_min_time(
    sim: ShardSim, steps: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    watch(sim)
    log = Log(sim)
    readers = [Reader(sim)]
    for action in steps:
        sim.step(action)
        log.capture()
        choice = data.draw(st.integers(0, 5), label="then")
        if choice == 0 and log.records:
            log.compact(data.draw(st.integers(0, len(log.records)), label="clean to"))
        elif choice == 1:
            readers.append(Reader(sim))  # a view started now reads from the start
        elif choice >= 2:
            reader = readers[data.draw(st.integers(0, len(readers) - 1), label="reader")]
            reader.read(log, data.draw(st.integers(1, 8), label="records"))
    sim.drain()
    log.capture()
    for reader in readers:
        reader.read(log, len(log.records))


def test_an_uncompacted_log_gives_what_the_listener_published() -> None:
    sim = ShardSim({"s0": [], "s1": ["s0"]}, fronts=1, nodes=2, shards=2, seed=7)
    watch(sim)
    log = Log(sim)
    for action in [(0, 0, 3), (1, 0, 2), (3, 0, 0), (2, 0, 1), (3, 1, 0), (3, 2, 0)] * 6:
        sim.step(action)
        sim.step((4, 0, 7))
        sim.step((5, 0, 7))
    sim.drain()
    log.capture()
    reader = Reader(sim)
    reader.read(log, len(log.records))
    assert reader.view.resets == 0
    for key in [*sim.segments, None]:
        assert reader.view.min_time(key) == sim.listener.min_time(key)


def seed_case_log() -> list[MinTimeNotification]:
    """Global reports of the seed's case, one more hop, as two shards send them.

    Slot 11 (shard 1) is done before 10 (shard 0); processing 10 re-opens 11; processing
    that output sends an item at 12 (shard 0), which shard 0 has not applied yet.
    """
    shards = [AckerShard(i, 2, {"s": []}, fronts=[0]) for i in range(2)]
    log: list[MinTimeNotification] = []

    def batch(
        node: int, time: int, per_shard: dict[int, list[AckerInput]], to: tuple[int, ...]
    ) -> None:
        for shard in to:
            for message in [*per_shard.get(shard, []), NodeTime(node, time)]:
                log.extend(n for n in shards[shard].receive(node, message) if n.segment is None)

    beat: list[AckerInput] = [Heartbeat(0, 20)]
    batch(0, 1, {0: [Ack("s", 10, 1), *beat], 1: [Ack("s", 11, 2), *beat]}, (0, 1))
    batch(1, 1, {1: [Ack("s", 11, 2)]}, (1, 0))  # 11 done first
    batch(2, 1, {1: [Ack("s", 11, 3)], 0: [Ack("s", 10, 1)]}, (1, 0))  # 10 done, 11 re-opened
    batch(3, 1, {1: [Ack("s", 11, 3)], 0: [Ack("s", 12, 4)]}, (1,))  # shard 0 lags: 12 unseen
    return log


def test_a_view_reading_across_a_compaction_starts_afresh() -> None:
    """A view that read the first reports, then finds the next ones compacted away.

    Log: 0 s0 10 | 1 s1 11 | 2 s1 20 | 3 s0 10 | 4 s1 11 (11 re-opened) | 5 s0 20 | 6 s1 20.
    When 6 is written, the item at 12 is in flight. A listener that read 0-3 and then, with
    4 compacted away (6 has its key), reads 5 and 6, would publish 20.
    """
    log = seed_case_log()
    assert [(n.shard, n.slot) for n in log] == [
        (0, 10),
        (1, 11),
        (1, 20),
        (0, 10),
        (1, 11),
        (0, 20),
        (1, 20),
    ]
    kept = [0, 1, 2, 3, 5, 6]  # compaction removed 4 (and would 1 and 2: read already)
    naive = MinTimeListener(2, ["s"])
    view = MinTimeView("unused:9092", "app", 2, ["s"])
    for offset in kept:
        naive.receive(log[offset])
        view._take(FakeMessage(offset, encode_min_time(log[offset])))  # type: ignore[arg-type]
    assert naive.min_time() == 20  # false: 12 is in flight
    assert view.min_time() <= 12
    assert view.resets == 1
