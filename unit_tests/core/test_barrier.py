"""Barrier: cancellation, meta order, GT_last idempotence, bundle sequence."""

from __future__ import annotations

import itertools
import random
from dataclasses import FrozenInstanceError

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.barrier import Barrier, Bundle
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation

metas = st.builds(
    Meta,
    st.builds(GlobalTime, st.integers(0, 6), st.integers(0, 2), st.integers(0, 3)),
    st.lists(st.integers(0, 2), max_size=2).map(tuple),
    st.integers(0, 3),
    st.just(False),
)
payloads = st.one_of(
    st.integers(0, 3),
    st.lists(st.integers(0, 2), max_size=2),
    st.dictionaries(st.sampled_from("ab"), st.integers(0, 1), max_size=2),
)
# (meta, payload, items, tombstones): tombstones never outnumber items
groups = st.lists(
    st.tuples(metas, payloads, st.integers(0, 3), st.integers(0, 3)).map(
        lambda g: (g[0], g[1], max(g[2], g[3]), min(g[2], g[3]))
    ),
    max_size=25,
)
Group = tuple[Meta, object, int, int]


def records_of(groups: list[Group]) -> list[Record]:
    out: list[Record] = []
    for meta, payload, items, tombstones in groups:
        out += [Record(meta, payload)] * items
        out += [Record(meta.as_tombstone(), payload)] * tombstones
    return out


def expected_output(groups: list[Group]) -> list[Record]:
    """Un-cancelled items sorted by meta (the order inside one meta is not specified)."""
    out: list[Record] = []
    for meta, payload, items, tombstones in groups:
        out += [Record(meta, payload)] * (items - tombstones)
    return sorted(out, key=lambda r: r.meta)


def assert_same_output(got: list[Record], want: list[Record]) -> None:
    assert [r.meta for r in got] == [r.meta for r in want]
    assert not any(r.meta.tombstone for r in got)
    remaining = list(want)
    for record in got:  # multiset equality with == on possibly unhashable payloads
        remaining.remove(record)
    assert remaining == []


def run(barrier: Barrier, records: list[Record], rng: random.Random) -> list[Bundle]:
    """Push ``records`` in order; release now and then, never past an unpushed record."""
    bundles: list[Bundle] = []
    released = 0
    for i, record in enumerate(records):
        barrier.push(record)
        if rng.random() < 0.3:
            unpushed = min((r.meta.gt.slot for r in records[i + 1 :]), default=8)
            released = max(released, min(unpushed, released + rng.randint(0, 3)))
            bundle = barrier.on_min_time(released)
            if bundle is not None:
                bundles.append(bundle)
    final = barrier.on_min_time(8)
    if final is not None:
        bundles.append(final)
    return bundles


def check_sequence(bundles: list[Bundle], first_seq: int) -> None:
    assert [b.seq for b in bundles] == list(range(first_seq, first_seq + len(bundles)))
    lasts = [b.gt_last for b in bundles]
    assert all(a < b for a, b in itertools.pairwise(lasts))
    for bundle in bundles:
        assert bundle.records
        assert all(r.meta.gt <= bundle.gt_last for r in bundle.records)


@settings(max_examples=300, deadline=None)
@given(groups=groups, seed=st.integers(0, 2**32))
def test_release_is_sorted_uncancelled_items(groups: list[Group], seed: int) -> None:
    rng = random.Random(seed)
    records = records_of(groups)
    rng.shuffle(records)
    barrier = Barrier()
    bundles = run(barrier, records, rng)
    assert_same_output([r for b in bundles for r in b.records], expected_output(groups))
    check_sequence(bundles, 0)
    assert barrier.pending == 0
    assert barrier.gt_last == GlobalTime.slot_end(7)


@settings(max_examples=200, deadline=None)
@given(groups=groups, seed=st.integers(0, 2**32))
def test_gt_last_drops_replays_and_resumes_exactly(groups: list[Group], seed: int) -> None:
    rng = random.Random(seed)
    records = records_of(groups)
    rng.shuffle(records)
    bundles = run(Barrier(), records, random.Random(seed))
    cut = rng.randint(0, len(bundles))
    resumed = Barrier(bundles[cut - 1].gt_last, cut) if cut else Barrier()
    replayed = list(records)
    rng.shuffle(replayed)
    again = run(resumed, replayed, rng)
    # Everything up to the crash point is dropped; what follows is what was still due.
    check_sequence(again, cut)
    want = expected_output(groups)
    if cut:
        want = [r for r in want if r.meta.gt > bundles[cut - 1].gt_last]
    assert_same_output([r for b in again for r in b.records], want)
    dropped = resumed.replays_dropped
    for record in replayed:  # a full replay after the end changes nothing
        resumed.push(record)
    assert resumed.pending == 0
    assert resumed.replays_dropped == dropped + len(replayed)
    assert resumed.on_min_time(9) is None


def item(slot: int, offset: int = 0, payload: object = "x", tomb: bool = False) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset), (0,), 5, tomb), payload)


def test_counts_go_two_to_one() -> None:
    barrier = Barrier()
    for record in (item(1), item(1), item(1, tomb=True)):
        barrier.push(record)
    assert barrier.pending == 1
    bundle = barrier.on_min_time(2)
    assert bundle is not None
    assert bundle.records == (item(1),)


def test_tombstone_first_cancels_and_unhashable_payloads() -> None:
    barrier = Barrier()
    barrier.push(item(1, payload={"k": [1]}, tomb=True))
    barrier.push(item(1, payload={"k": [2]}))
    barrier.push(item(1, payload={"k": [1]}))
    assert barrier.pending == 1
    bundle = barrier.on_min_time(5)
    assert bundle is not None
    assert bundle.records == (item(1, payload={"k": [2]}),)


def test_tombstone_then_two_items_releases_one_item_not_the_tombstone() -> None:
    barrier = Barrier()
    for record in (item(1, tomb=True), item(1), item(1)):
        barrier.push(record)
    bundle = barrier.on_min_time(2)
    assert bundle is not None
    assert bundle.records == (item(1),)
    assert not bundle.records[0].meta.tombstone


def test_tombstone_without_item_is_a_violation() -> None:
    barrier = Barrier()
    barrier.push(item(1, tomb=True))
    assert barrier.on_min_time(1) is None  # not released yet: no judgement
    with pytest.raises(ProtocolViolation):
        barrier.on_min_time(2)


def test_gt_last_advances_without_bundles_and_never_back() -> None:
    barrier = Barrier(next_seq=7)
    assert barrier.on_min_time(3) is None
    assert barrier.gt_last == GlobalTime.slot_end(2)
    barrier.push(item(2))  # behind gt_last: a replay
    barrier.push(item(3, offset=1))
    barrier.push(item(3, offset=0))
    barrier.push(item(4))
    assert barrier.pending == 3
    assert barrier.on_min_time(2) is None  # min time never goes back
    bundle = barrier.on_min_time(4)
    assert bundle == Bundle(7, GlobalTime.slot_end(3), (item(3, 0), item(3, 1)))
    assert (barrier.next_seq, barrier.pending) == (8, 1)
    with pytest.raises(FrozenInstanceError):
        bundle.seq = 9  # type: ignore[misc]


def test_resume_from_gt_last_inside_a_slot() -> None:
    barrier = Barrier(GlobalTime(3, 1, 5))
    barrier.push(item(3, offset=5))
    barrier.push(item(3, offset=6))
    barrier.push_many([item(3, offset=4)])
    bundle = barrier.on_min_time(4)
    assert bundle is not None
    assert bundle.records == (item(3, offset=6),)


@settings(max_examples=300, deadline=None)
@given(groups=groups, seed=st.integers(0, 2**32))
def test_push_reports_the_change_in_items_to_release(groups: list[Group], seed: int) -> None:
    rng = random.Random(seed)
    records = records_of(groups)
    rng.shuffle(records)
    barrier = Barrier()
    live: list[Record] = []  # what the reported changes add up to
    for record in records:
        change = barrier.push(record)
        if change == 1:
            live.append(record)
        elif change == -1:
            live.remove(Record(Meta(*record.meta[:3], False), record.value))
        else:
            assert change == 0
    assert barrier.releasable(8) == bool(records)
    bundle = barrier.on_min_time(8)
    assert_same_output(list(bundle.records) if bundle else [], sorted(live, key=lambda r: r.meta))


def test_a_replay_or_an_early_tombstone_changes_nothing_to_release() -> None:
    barrier = Barrier(GlobalTime.slot_end(3))
    assert barrier.push(item(2)) == 0  # a replay
    assert barrier.push(item(5, tomb=True)) == 0  # ahead of its item
    assert barrier.push(item(5)) == 0  # meets it
    assert (barrier.push(item(5)), barrier.push(item(5)), barrier.push(item(5, tomb=True))) == (
        1,
        1,
        -1,
    )
    assert not barrier.releasable(5)
    assert barrier.releasable(6)


def test_live_lists_what_a_release_would_emit_by_slot() -> None:
    barrier = Barrier()
    for record in (item(7), item(5, payload="a"), item(5, payload="a"), item(6, tomb=True)):
        barrier.push(record)
    barrier.push(item(7, tomb=True))
    assert barrier.live(0, 100) == [item(5, payload="a")] * 2
    assert barrier.live(6, 8) == []
    barrier.push(item(6))
    assert barrier.live(5, 7) == [item(5, payload="a")] * 2  # item 6 met its tombstone
    barrier.push(item(6, payload="b"))
    assert barrier.live(6, 7) == [item(6, payload="b")]


def test_a_strict_barrier_refuses_a_drop_no_restart_explains() -> None:
    """Released in this run and then arriving: min time was false; dropping it loses it."""
    barrier = Barrier(GlobalTime.slot_end(3), 2, strict=True)
    assert barrier.push(item(2)) == 0  # at or before the restored GT_last: a replay
    assert barrier.push(item(5)) == 1
    assert barrier.on_min_time(6) is not None
    with pytest.raises(ProtocolViolation, match="arrived after min time released"):
        barrier.push(item(4))
    assert barrier.replays_dropped == 2
