"""Speculation: what an open bundle transaction holds, and when a release may commit it."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from framework.barrier.speculation import Hold, Speculation
from framework.core.barrier import Barrier
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation


def item(slot: int, offset: int = 0, payload: bytes = b"x", tomb: bool = False) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset), (0,), 5, tomb), (None, payload))


def test_a_release_that_covers_everything_held_goes_at_once() -> None:
    spec = Speculation(min_pending=0)
    assert spec.hold(5, True, 0.0) is Hold.GO  # nothing held
    spec.took(item(3), 0.0)
    spec.took(item(4), 0.0)
    assert spec.hold(5, True, 0.0) is Hold.GO
    assert spec.missing([item(2), item(3), item(4)]) == [item(2)]


def test_a_release_short_of_what_is_held_waits_sealed_then_aborts() -> None:
    spec = Speculation(max_hold_s=0.1, min_pending=0)
    spec.took(item(3), 0.0)
    spec.took(item(7), 0.0)
    assert spec.hold(5, False, 1.0) is Hold.GO  # nothing below 5 to release: gt_last moves
    assert spec.accepting
    assert spec.hold(5, True, 1.0) is Hold.WAIT
    assert not spec.accepting  # sealed: a later min time passes all it holds
    assert spec.hold(6, True, 1.05) is Hold.WAIT
    assert spec.hold(8, True, 1.06) is Hold.GO
    assert spec.hold(6, True, 1.2) is Hold.ABORT


def test_a_large_transaction_waits_as_long_as_rewriting_it_would_take() -> None:
    spec = Speculation(max_hold_s=0.05, rewrite_s=1e-3)
    for offset in range(100):
        spec.took(item(7, offset), 0.0)
    spec.took(item(3), 0.0)
    assert spec.hold_limit_s == pytest.approx(0.05 + 101 * 1e-3)
    assert spec.hold(5, True, 1.0) is Hold.WAIT
    assert spec.hold(5, True, 1.1) is Hold.WAIT  # past max_hold_s, short of the rewrite
    assert spec.hold(5, True, 1.16) is Hold.ABORT


def test_a_sealed_transaction_takes_items_up_to_its_latest_slot() -> None:
    barrier, spec = Barrier(), Speculation(min_pending=0)

    def push(record: Record) -> list[Record]:
        return spec.admit(record, barrier.push(record), barrier)

    push(item(9))
    for slot in (3, 7):
        spec.took(push(item(slot))[0], 0.0)
    assert spec.hold(5, True, 0.0) is Hold.WAIT
    assert push(item(6)) == [item(6)]  # the step that releases 7 releases it too
    assert push(item(8)) == []
    assert push(item(10)) == []  # the frontier moved, but 9 is past what it holds


def test_a_tombstone_poisons_only_a_transaction_holding_its_item() -> None:
    spec = Speculation(min_pending=0)
    spec.took(item(3, payload=b"a"), 0.0)
    spec.cancelled(item(3, payload=b"b"))
    assert not spec.poisoned
    spec.cancelled(item(3, payload=b"a"))
    assert spec.poisoned
    assert not spec.accepting
    assert spec.hold(9, True, 0.0) is Hold.GO  # the release aborts it


def test_missing_counts_copies_and_refuses_anything_left_over() -> None:
    spec = Speculation(min_pending=0)
    spec.took(item(3), 0.0)
    assert spec.missing([item(3), item(3)]) == [item(3)]  # an item released twice
    spec.took(item(4), 0.0)
    with pytest.raises(ProtocolViolation, match=r"holds 1 item\(s\) .* first at .*slot=4"):
        spec.missing([item(3), item(3)])


def test_aborts_pause_speculation_for_some_releases() -> None:
    spec = Speculation(cooldown=2)
    spec.took(item(3), 0.0)
    spec.end(pause=True)
    assert (spec.size, spec.held, spec.accepting) == (0, {}, False)
    spec.end(pause=False)
    assert not spec.accepting
    spec.end(pause=False)
    assert spec.accepting
    assert not Speculation(enabled=False).accepting


def test_a_transaction_open_too_long_expires() -> None:
    spec = Speculation(max_open_s=20.0)
    assert not spec.expired(100.0)
    spec.took(item(3), 10.0)
    assert not spec.expired(29.0)
    assert spec.expired(31.0)


def test_the_frontier_slot_goes_ahead_once_a_later_slot_arrives() -> None:
    barrier, spec = Barrier(), Speculation(min_pending=0)

    def push(record: Record) -> list[Record]:
        return spec.admit(record, barrier.push(record), barrier)

    assert push(item(5, 1)) == []  # the frontier
    assert push(item(5, 2)) == []
    assert push(item(4)) == [item(4)]  # before it: at once
    spec.took(item(4), 0.0)
    assert push(item(6)) == [item(5, 1), item(5, 2)]
    assert push(item(4, tomb=True)) == []
    assert spec.poisoned  # it cancelled an item written ahead
    assert push(item(7)) == []  # nothing goes ahead into a poisoned transaction
    spec.end(pause=False)
    assert spec.resync(barrier) == [item(5, 1), item(5, 2), item(6)]


# -- the barrier's use of it, simulated ---------------------------------------------------

streams = st.lists(
    st.tuples(
        st.integers(0, 6),  # slot
        st.integers(0, 3),  # offset
        st.sampled_from([b"a", b"b"]),  # payload
        st.integers(0, 2),  # copies
        st.integers(0, 2),  # tombstones (never more than copies)
    ),
    max_size=30,
)


def records_of(stream: list[tuple[int, int, bytes, int, int]]) -> list[Record]:
    out: list[Record] = []
    for slot, offset, payload, copies, tombstones in stream:
        out += [item(slot, offset, payload)] * copies
        out += [item(slot, offset, payload, tomb=True)] * min(copies, tombstones)
    return out


@settings(max_examples=300, deadline=None)
@given(stream=streams, seed=st.integers(0, 2**32), min_pending=st.sampled_from([0, 1, 3, 8]))
@example(  # a frame's first admitted item, not written yet, must not restart the catch-up
    stream=[(0, 0, b"a", 0, 0)] * 5
    + [(0, 0, b"a", 1, 1), (0, 0, b"b", 2, 0), (1, 0, b"a", 1, 1), (0, 0, b"a", 1, 1)],
    seed=305,
    min_pending=3,
)
@example(  # copies of one item arriving around its tombstones (found by the search)
    stream=[(0, 0, b"a", 0, 0)] * 3
    + [(2, 0, b"a", 1, 1), (1, 0, b"a", 2, 2), (0, 0, b"a", 2, 2)]
    + [(1, 0, b"a", 2, 2), (1, 0, b"a", 2, 1)],
    seed=11932,
    min_pending=3,
)
def test_each_commit_is_exactly_its_bundle(
    stream: list[tuple[int, int, bytes, int, int]], seed: int, min_pending: int
) -> None:
    """The barrier service's steps on one thread: every transaction that commits holds
    exactly the bundle it releases, whatever the arrival order, holds, aborts and the
    buffer's size at which writing ahead starts."""
    rng = random.Random(seed)
    records = records_of(stream)
    rng.shuffle(records)
    barrier = Barrier()
    spec = Speculation(cooldown=1, max_hold_s=0.1, min_pending=min_pending)
    released, now, min_time = Counter[Record](), 0.0, 0

    def release(target: int) -> None:
        nonlocal min_time
        verdict = spec.hold(target, barrier.releasable(target), now)
        if verdict is Hold.WAIT:
            return
        if verdict is Hold.ABORT:
            spec.end(pause=True)
        min_time = target
        bundle = barrier.on_min_time(target)
        if bundle is None:
            return
        if spec.poisoned:
            spec.end(pause=True)
        written = spec.missing(bundle.records) if spec.size else list(bundle.records)
        committed = Counter(spec.held) + Counter(written)
        assert committed == Counter(bundle.records)
        released.update(committed)
        spec.end(pause=False)
        for record in spec.resync(barrier):
            spec.took(record, now)

    ahead: list[Record] = []  # the service writes a frame's admitted items at once
    for i, record in enumerate(records):
        change = barrier.push(record)
        if change < 0 and ahead:  # as the service does: a cancelled item was written
            spec.took_many(ahead, now)
            ahead = []
        ahead += spec.admit(record, change, barrier)
        if rng.random() < 0.5:  # the frame goes on
            continue
        spec.took_many(ahead, now)
        ahead = []
        if spec.accepting and (spec.size or barrier.pending >= min_pending):
            # it holds every item before the frontier once it writes ahead at all
            assert spec.held == Counter(barrier.live(0, spec.frontier))
        if rng.random() < 0.4:
            now += rng.choice([0.0, 0.05, 0.2])
            unpushed = min((r.meta.gt.slot for r in records[i + 1 :]), default=8)
            release(max(min_time, min(unpushed, min_time + rng.randint(0, 3))))
    spec.took_many(ahead, now)
    release(8)
    assert barrier.pending == 0
    want = Counter[Record]()
    for slot, offset, payload, copies, tombstones in stream:
        want[item(slot, offset, payload)] += copies - min(copies, tombstones)
    assert released == +want


def test_nothing_goes_ahead_until_the_barrier_buffers_min_pending_items() -> None:
    """A small bundle is written at its release; once the buffer reaches ``min_pending``
    the transaction opens with every buffered item before the frontier."""
    barrier, spec = Barrier(), Speculation(min_pending=4)

    def push(record: Record) -> list[Record]:
        admitted = spec.admit(record, barrier.push(record), barrier)
        for one in admitted:
            spec.took(one, 0.0)
        return admitted

    assert push(item(3)) == []
    assert push(item(5)) == []  # a later slot: 3 would go ahead, but 2 items are few
    assert push(item(4)) == []
    assert push(item(5, 1)) == [item(3), item(4)]  # 4 buffered: everything before 5
    assert push(item(2)) == [item(2)]
    assert push(item(6)) == [item(5), item(5, 1)]
    assert spec.hold(5, True, 0.0) is Hold.WAIT  # it holds slot 5
    bundle = barrier.on_min_time(7)
    assert bundle is not None
    assert spec.missing(bundle.records) == [item(6)]
    spec.end(pause=False)
    assert spec.resync(barrier) == []  # nothing buffered: nothing ahead
    assert push(item(8)) == []
