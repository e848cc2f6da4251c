"""Barrier positions: P_rel bookkeeping, the read-to-the-committed-end fence and restarts,
against a crash-free run.

A pre-barrier record is a frame of items; the simulation has a writer append frames to a
log while a barrier reads it, crashes and restarts. Min time is the acker's: the lowest
slot of an item not yet written (a frame counts as received when it is committed).
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
    mark = BarrierMark(GlobalTime.slot_end(4))
    assert BarrierMark.decode(mark.encode(), "here") == mark
    assert BarrierMark.decode(BarrierMark(None).encode(), "here").gt_last is None
    for text in ("", "fp2", "fp1 ack=1 nt=2 gt=-", "fp2 gt=x", "fp2 gt=1,2"):
        with pytest.raises(ProtocolViolation, match="here: offset metadata"):
            BarrierMark.decode(text, "here")


def test_consumer_mark_round_trips_and_rejects_foreign_metadata() -> None:
    mark = BundleMark(41, GlobalTime(9, 8, 7))
    assert BundleMark.decode(mark.encode(), "there") == mark
    for text in ("", "fp1 seq=1 gt=-", "fp1 seq=x gt=1,2,3", BarrierMark(None).encode()):
        with pytest.raises(ProtocolViolation, match="there: offset metadata"):
            BundleMark.decode(text, "there")


def test_release_position_is_the_first_record_still_needed() -> None:
    ledger = PartitionLedger(start=10)
    for offset, slot in ((10, 5), (11, 3), (12, 6), (13, 3)):
        ledger.read(offset, gt(slot, offset))
    assert ledger.release_position(None) == 10
    assert ledger.release_position(GlobalTime.slot_end(4)) == 10  # 10 (slot 5) holds 11..13
    assert ledger.release_position(GlobalTime.slot_end(5)) == 12
    assert ledger.release_position(GlobalTime.slot_end(6)) == 14  # nothing held: the position
    with pytest.raises(ProtocolViolation, match="read again"):
        ledger.read(13, gt(9))


def test_a_frame_is_held_until_its_latest_item_is_released() -> None:
    ledger = PartitionLedger(start=0)
    frames = [[gt(5, 0), gt(3, 1)], [gt(4, 2)], [gt(3, 3), gt(6, 4), gt(2, 5)]]
    for offset, times in enumerate(frames):
        ledger.read(offset, max(times))
    assert ledger.release_position(GlobalTime.slot_end(4)) == 0  # frame 0 still holds slot 5
    assert ledger.release_position(GlobalTime.slot_end(5)) == 2
    assert ledger.release_position(GlobalTime.slot_end(6)) == 3


def test_a_refused_record_moves_the_position_and_holds_nothing() -> None:
    ledger = PartitionLedger(start=3)
    ledger.skip(3)
    ledger.read(4, gt(2, 4))
    assert ledger.position == 5
    assert ledger.release_position(None) == 4
    assert ledger.release_position(GlobalTime.slot_end(2)) == 5
    with pytest.raises(ProtocolViolation, match="read again"):
        ledger.skip(4)


# -- a barrier that crashes and restarts, against one that does not ----------------------


@dataclass
class Committed:
    """What Kafka holds: the frames written so far, positions with their metadata,
    bundles."""

    log: list[list[Record]]
    written: int = 0  # frames committed by the writer (the last stable offset)
    p_rel: int = 0
    mark: BarrierMark = field(default_factory=lambda: BarrierMark(None))
    bundles: list[tuple[int, GlobalTime, list[Record]]] = field(default_factory=list)

    def write(self, count: int) -> None:
        self.written = min(self.written + count, len(self.log))

    def min_time(self) -> int:
        """The acker's: the lowest slot of an item not written yet."""
        slots = [r.meta.gt.slot for frame in self.log[self.written :] for r in frame]
        return min(slots, default=1 << 20)


class SimBarrier:
    """The barrier service's bookkeeping around the core Barrier, without Kafka: it reads
    at most ``count`` frames a step and applies a min time only once it has read every
    frame committed when it saw that min time (the fence of `BarrierService`)."""

    def __init__(self, kafka: Committed) -> None:
        self.kafka = kafka
        header_gt = kafka.bundles[-1][1] if kafka.bundles else None
        gts = [g for g in (kafka.mark.gt_last, header_gt) if g is not None]
        next_seq = kafka.bundles[-1][0] + 1 if kafka.bundles else 0
        self.barrier = Barrier(max(gts) if gts else None, next_seq)
        self.ledger = PartitionLedger(kafka.p_rel)
        self.fence: tuple[int, int] | None = None
        self.pending: list[tuple[int, GlobalTime, list[Record]]] = []

    def read(self, count: int) -> None:
        end = min(self.ledger.position + count, self.kafka.written)
        for offset in range(self.ledger.position, end):
            frame = self.kafka.log[offset]
            self.ledger.read(offset, max(record.meta.gt for record in frame))
            for record in frame:
                self.barrier.push(record)

    def step(self, count: int) -> None:
        if self.fence is None:
            self.fence = (self.kafka.min_time(), self.kafka.written)
        self.read(count)
        min_time, end = self.fence
        if self.ledger.position >= end:
            self.fence = None
            bundle = self.barrier.on_min_time(min_time)
            if bundle is not None:
                self.pending.append((bundle.seq, bundle.gt_last, list(bundle.records)))

    def commit(self) -> None:
        gt_last = self.barrier.gt_last
        self.kafka.p_rel = self.ledger.release_position(gt_last)
        self.kafka.mark = BarrierMark(gt_last)
        self.kafka.bundles += self.pending
        self.pending = []


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


def run(log: list[list[Record]], steps: list[tuple[int, int]], crashes: set[int]) -> Committed:
    """Per step the writer commits some frames and the barrier reads some."""
    kafka = Committed(log)
    barrier = SimBarrier(kafka)
    for index, (written, read) in enumerate(steps):
        kafka.write(written)
        barrier.step(read)
        if index in crashes:  # everything since the last commit is lost
            barrier = SimBarrier(kafka)
        else:
            barrier.commit()
    kafka.write(len(log))
    while barrier.ledger.position < len(log) or barrier.barrier.pending or barrier.fence:
        barrier.step(len(log))
        barrier.commit()
    return kafka


def released(kafka: Committed) -> list[list[object]]:
    return [[r.value for r in records] for _, _, records in kafka.bundles]


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    groups=st.integers(1, 12),
    largest_frame=st.sampled_from([1, 3]),
    steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=30),
    crashes=st.sets(st.integers(0, 29), max_size=6),
)
def test_restarts_deliver_what_a_crash_free_run_delivers(
    seed: int,
    groups: int,
    largest_frame: int,
    steps: list[tuple[int, int]],
    crashes: set[int],
) -> None:
    log = make_log(seed, groups, largest_frame)
    clean = run(log, steps, set())
    crashed = run(log, steps, crashes)
    assert [seq for seq, _, _ in crashed.bundles] == list(range(len(crashed.bundles)))
    delivered = [record for _, _, records in crashed.bundles for record in records]
    expected = [record for _, _, records in clean.bundles for record in records]
    assert delivered == expected
    # Nothing lost: every item without its tombstone is out, in slot order per bundle.
    balance: dict[Meta, int] = {}
    for frame in log:
        for record in frame:
            meta = record.meta
            key = meta.as_tombstone() if not meta.tombstone else meta
            balance[key] = balance.get(key, 0) + (-1 if meta.tombstone else 1)
    assert len(delivered) == sum(balance.values())


def test_a_min_time_waits_for_the_frames_committed_before_it() -> None:
    """The writer commits frames 0-1 (slots 1 and 2) and then min time is 3; a barrier
    that read only frame 0 must not release slot 1 alone into a bundle whose GT_last
    passes slot 2: frame 1 would then be dropped as a replay."""
    a, b = Record(Meta(GlobalTime(1, 1, 0)), "a"), Record(Meta(GlobalTime(2, 1, 1)), "b")
    c = Record(Meta(GlobalTime(3, 1, 2)), "c")
    kafka = Committed([[a], [b], [c]])
    barrier = SimBarrier(kafka)
    kafka.write(2)
    barrier.step(1)  # saw min time 3 with two frames committed; read one
    barrier.commit()
    assert kafka.bundles == [] and barrier.fence == (3, 2)
    barrier.step(1)
    barrier.commit()
    assert released(kafka) == [["a", "b"]]
    kafka.write(1)
    barrier.step(1)
    barrier.step(1)
    barrier.commit()
    assert released(kafka) == [["a", "b"], ["c"]]


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
    kafka = run([[record] for record in log], [(3, 3), (0, 0), (1, 1)], crashes={2})
    assert released(kafka) == [["z", "y"]]


def test_a_frame_straddling_a_release_is_read_again_and_its_released_items_dropped() -> None:
    """Frame 0 holds slots 1 and 4: the release through slot 2 keeps ``P_rel`` at 0, so
    after a crash the restart reads frame 0 again and drops its slot-1 item as a replay
    while keeping the slot-4 one."""
    a, d = Record(Meta(GlobalTime(1, 1, 0)), "a"), Record(Meta(GlobalTime(4, 1, 1)), "d")
    b, c = Record(Meta(GlobalTime(2, 1, 2)), "b"), Record(Meta(GlobalTime(3, 1, 3)), "c")
    kafka = Committed([[a, d], [b], [c]])
    first = SimBarrier(kafka)
    kafka.write(2)  # frames 0 and 1 committed; min time 3 (c is not written)
    first.step(2)
    first.commit()
    assert kafka.p_rel == 0
    assert released(kafka) == [["a", "b"]]
    kafka.write(1)
    first.step(1)  # reads c; then crashes before committing
    again = SimBarrier(kafka)
    while again.ledger.position < len(kafka.log) or again.barrier.pending or again.fence:
        again.step(len(kafka.log))
        again.commit()
    assert released(kafka) == [["a", "b"], ["c", "d"]]


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
