"""Barrier positions: P_rel / P_ack bookkeeping and its restart, against a crash-free run.

A pre-barrier record is a frame of items; the simulation reads logs of frames (a frame of
one is the record per item of before).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.barrier import Barrier
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation
from framework.wire.positions import (
    BarrierMark,
    BundleMark,
    PartitionLedger,
    TaskCounts,
    format_gt,
    parse_gt,
)


def gt(slot: int, offset: int = 0) -> GlobalTime:
    return GlobalTime(slot, 1, offset)


def test_global_times_round_trip_through_text() -> None:
    for value in (None, gt(3, 4), GlobalTime.slot_end(7), GlobalTime.slot_start(0)):
        assert parse_gt(format_gt(value)) == value


def test_mark_round_trips_and_rejects_foreign_metadata() -> None:
    mark = BarrierMark(12, 1_700_000_000_000_000, GlobalTime.slot_end(4))
    assert BarrierMark.decode(mark.encode(), "here") == mark
    assert BarrierMark.decode(BarrierMark(0, 0, None).encode(), "here").gt_last is None
    for text in (
        "",
        "fp1 ack=1",
        "fp2 ack=1 nt=2 gt=-",
        "fp1 ack=x nt=2 gt=-",
        "fp1 ack=1 nt=2 gt=1,2",
    ):
        with pytest.raises(ProtocolViolation, match="here: offset metadata"):
            BarrierMark.decode(text, "here")


def test_consumer_mark_round_trips_and_rejects_foreign_metadata() -> None:
    mark = BundleMark(41, GlobalTime(9, 8, 7))
    assert BundleMark.decode(mark.encode(), "there") == mark
    for text in ("", "fp1 seq=1 gt=-", "fp1 seq=x gt=1,2,3", BarrierMark(1, 2, None).encode()):
        with pytest.raises(ProtocolViolation, match="there: offset metadata"):
            BundleMark.decode(text, "there")


def test_release_position_is_the_first_record_still_needed() -> None:
    ledger = PartitionLedger(start=10, acked=10)
    for offset, slot in ((10, 5), (11, 3), (12, 6), (13, 3)):
        ledger.read(offset, gt(slot, offset))
    assert ledger.release_position(None) == 10
    assert ledger.release_position(GlobalTime.slot_end(4)) == 10  # 10 (slot 5) holds 11..13
    assert ledger.release_position(GlobalTime.slot_end(5)) == 12
    assert ledger.release_position(GlobalTime.slot_end(6)) == 14  # nothing held: the position
    with pytest.raises(ProtocolViolation, match="read again"):
        ledger.read(13, gt(9))


def test_a_frame_is_held_until_its_latest_item_is_released() -> None:
    ledger = PartitionLedger(start=0, acked=0)
    frames = [[gt(5, 0), gt(3, 1)], [gt(4, 2)], [gt(3, 3), gt(6, 4), gt(2, 5)]]
    for offset, times in enumerate(frames):
        ledger.read(offset, max(times))
    assert ledger.release_position(GlobalTime.slot_end(4)) == 0  # frame 0 still holds slot 5
    assert ledger.release_position(GlobalTime.slot_end(5)) == 2
    assert ledger.release_position(GlobalTime.slot_end(6)) == 3


def test_acks_and_replay_after_a_restart() -> None:
    ledger = PartitionLedger(start=4, acked=7)
    assert ledger.replaying
    assert [ledger.needs_ack(o) for o in (4, 6, 7, 8)] == [False, False, True, True]
    for offset in range(4, 6):
        ledger.read(offset, gt(1, offset))
    assert ledger.replaying  # offset 6 was acked before the restart and is not read yet
    ledger.read(6, gt(1, 6))
    assert not ledger.replaying
    ledger.read(7, gt(2, 7))
    assert ledger.mark(5, None) == BarrierMark(8, 5, None)
    ledger.acked_all()
    assert not ledger.needs_ack(7)


# -- a barrier that crashes and restarts, against one that does not ----------------------


@dataclass
class Committed:
    """What Kafka holds: positions with their metadata, bundles, acked items."""

    p_rel: int = 0
    mark: BarrierMark = field(default_factory=lambda: BarrierMark(0, 0, None))
    bundles: list[tuple[int, GlobalTime, list[Record]]] = field(default_factory=list)
    acked: list[tuple[int, int]] = field(default_factory=list)  # (offset, index in frame)


class SimBarrier:
    """The barrier service's bookkeeping around the core Barrier, without Kafka."""

    def __init__(self, log: list[list[Record]], kafka: Committed) -> None:
        self.log = log
        self.kafka = kafka
        header_gt = kafka.bundles[-1][1] if kafka.bundles else None
        gts = [g for g in (kafka.mark.gt_last, header_gt) if g is not None]
        next_seq = kafka.bundles[-1][0] + 1 if kafka.bundles else 0
        self.barrier = Barrier(max(gts) if gts else None, next_seq)
        self.ledger = PartitionLedger(kafka.p_rel, kafka.mark.acked)
        self.acks: list[tuple[int, int]] = []
        self.pending: list[tuple[int, GlobalTime, list[Record]]] = []

    def read(self, count: int) -> None:
        for offset in range(self.ledger.position, min(self.ledger.position + count, len(self.log))):
            frame = self.log[offset]
            if self.ledger.needs_ack(offset):
                self.acks.extend((offset, index) for index in range(len(frame)))
            self.ledger.read(offset, max(record.meta.gt for record in frame))
            for record in frame:
                self.barrier.push(record)

    def min_time(self, acked: set[tuple[int, int]]) -> int:
        """The acker's view: the lowest slot of an item whose receipt is not acked."""
        slots = [
            r.meta.gt.slot
            for o, frame in enumerate(self.log)
            for i, r in enumerate(frame)
            if (o, i) not in acked
        ]
        return min(slots, default=1 << 20)

    def step(self, count: int) -> None:
        self.read(count)
        if not self.ledger.replaying:  # min time counts on records acked before a restart
            bundle = self.barrier.on_min_time(self.min_time(set(self.kafka.acked)))
            if bundle is not None:
                self.pending.append((bundle.seq, bundle.gt_last, list(bundle.records)))

    def commit(self) -> None:
        gt_last = self.barrier.gt_last
        self.kafka.p_rel = self.ledger.release_position(gt_last)
        self.kafka.mark = self.ledger.mark(0, gt_last)
        self.kafka.bundles += self.pending
        self.kafka.acked += self.acks
        self.ledger.acked_all()
        self.pending, self.acks = [], []


def make_log(seed: int, groups: int, largest_frame: int = 1) -> list[list[Record]]:
    """Items and tombstones (never more tombstones than items per meta), shuffled, in
    frames of 1 to ``largest_frame`` items."""
    rng = random.Random(seed)
    records: list[Record] = []
    for i in range(groups):
        meta = Meta(GlobalTime(rng.randint(0, 5), 1, i), (), rng.randint(0, 3))
        items = rng.randint(1, 2)
        records += [Record(meta, f"v{i}")] * items
        records += [Record(meta.as_tombstone(), f"v{i}")] * rng.randint(0, items)
    rng.shuffle(records)
    frames: list[list[Record]] = []
    while records:
        size = rng.randint(1, largest_frame)
        frames.append(records[:size])
        records = records[size:]
    return frames


def run(log: list[list[Record]], steps: list[int], crashes: set[int]) -> Committed:
    kafka = Committed()
    barrier = SimBarrier(log, kafka)
    for index, count in enumerate(steps):
        barrier.step(count)
        if index in crashes:  # everything since the last commit is lost
            barrier = SimBarrier(log, kafka)
        else:
            barrier.commit()
    while barrier.ledger.position < len(log) or barrier.barrier.pending:
        barrier.step(len(log))
        barrier.commit()
    return kafka


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    groups=st.integers(1, 12),
    largest_frame=st.sampled_from([1, 3]),
    steps=st.lists(st.integers(0, 4), min_size=1, max_size=30),
    crashes=st.sets(st.integers(0, 29), max_size=6),
)
def test_restarts_deliver_what_a_crash_free_run_delivers(
    seed: int, groups: int, largest_frame: int, steps: list[int], crashes: set[int]
) -> None:
    log = make_log(seed, groups, largest_frame)
    clean = run(log, steps, set())
    crashed = run(log, steps, crashes)
    every_item = [(o, i) for o, frame in enumerate(log) for i in range(len(frame))]
    assert sorted(crashed.acked) == every_item  # each receipt acked exactly once
    assert [seq for seq, _, _ in crashed.bundles] == list(range(len(crashed.bundles)))
    delivered = [record for _, _, records in crashed.bundles for record in records]
    expected = [record for _, _, records in clean.bundles for record in records]
    assert delivered == expected


def test_gt_last_of_a_release_without_output_survives_a_restart() -> None:
    """Slot 3's pair cancels (no bundle, so no header moves) while slot 5 holds ``P_rel``
    between the item and its tombstone: the restart must know ``GT_last`` from the
    positions' metadata, or it would buffer the tombstone without its item."""
    item = Record(Meta(GlobalTime(3, 1, 0)), "x")
    log = [
        item,
        Record(Meta(GlobalTime(5, 1, 1)), "y"),
        item.tombstone(),
        Record(Meta(GlobalTime(4, 1, 2)), "z"),
    ]
    kafka = run([[record] for record in log], [3, 0, 1], crashes={2})
    assert [[r.value for r in records] for _, _, records in kafka.bundles] == [["z", "y"]]


def test_a_frame_straddling_a_release_is_read_again_and_its_released_items_dropped() -> None:
    """Frame 0 holds slots 1 and 4: the release through slot 2 keeps ``P_rel`` at 0, so
    after a crash the restart reads frame 0 again, acks nothing twice, and drops its
    slot-1 item as a replay while keeping the slot-4 one."""
    a, d = Record(Meta(GlobalTime(1, 1, 0)), "a"), Record(Meta(GlobalTime(4, 1, 1)), "d")
    b, c = Record(Meta(GlobalTime(2, 1, 2)), "b"), Record(Meta(GlobalTime(3, 1, 3)), "c")
    log = [[a, d], [b], [c]]
    kafka = Committed()
    first = SimBarrier(log, kafka)
    first.step(2)  # read frames 0 and 1; no min time yet
    first.commit()
    first.step(0)  # min time 3 (c is unread): a and b are released
    first.commit()
    assert (kafka.p_rel, kafka.mark.acked) == (0, 2)
    assert [[r.value for r in records] for _, _, records in kafka.bundles] == [["a", "b"]]
    first.step(1)  # reads c; then crashes before committing
    again = SimBarrier(log, kafka)
    while again.ledger.position < len(log) or again.barrier.pending:
        again.step(len(log))
        again.commit()
    assert sorted(kafka.acked) == [(0, 0), (0, 1), (1, 0), (2, 0)]
    assert [[r.value for r in records] for _, _, records in kafka.bundles] == [
        ["a", "b"],
        ["c", "d"],
    ]


@given(st.lists(st.tuples(*[st.integers(0, 10**6)] * 8), max_size=5))
def test_task_counts_survive_their_metadata(commits: list[tuple[int, ...]]) -> None:
    counts = TaskCounts.decode("", "here")
    for commit in commits:
        one = TaskCounts(*commit[:5], lifted=commit[5], last_ms=commit[6], clock_ahead_ms=commit[7])
        counts = TaskCounts.decode(counts.add(one).encode(), "here")
    sums = [sum(c[i] for c in commits) for i in range(6)]
    last = max((c[6] for c in commits), default=-1)
    ahead = commits[-1][7] if commits else 0  # a gauge: the latest commit's
    assert counts == TaskCounts(*sums[:5], len(commits), sums[5], last, ahead)


def test_task_counts_of_an_older_task_have_no_clock_figure() -> None:
    """Metadata a task wrote before it measured its clock (no ``k=``) still decodes."""
    assert TaskCounts.decode("fp1 r=1 i=2 o=3 d=0 t=0 c=1 l=0 m=5", "here").clock_ahead_ms == 0


@pytest.mark.parametrize(
    "text",
    ["fp1 ack=3 nt=1 gt=-", "fp2 r=1 i=1 o=1 d=0 t=0 c=1", "fp1 r=x", "fp1 r=1 i=1 o=1 d=0 t=0"],
)
def test_foreign_metadata_is_no_task_counts(text: str) -> None:
    with pytest.raises(ProtocolViolation, match="not written by a flamepipe stage task"):
        TaskCounts.decode(text, "group g on t[0]")
