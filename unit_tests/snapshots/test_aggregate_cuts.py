"""An aggregate's snapshot: its changelog cut at a slot, restored below a floor.

A live aggregator runs batches as a stage task does (push, advance by the batch's min
time, changelog records). Its changelog is cut at a slot ``S`` as the snapshot copies cut
it, saved and restored as a new epoch's changelog; the restored aggregator then gets the
items at or after ``S`` again, as sources replay them. What it emits must be exactly what
the live one emitted at or after ``S``, and it must hold no slot below ``S``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.aggregate import aggregator
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.rolling import First
from framework.core.time import GlobalTime
from framework.core.windows import Aggregation, Count, Session, Sliding, Tumbling
from framework.errors import DecodeError
from framework.kafka.topics import CHANGELOG_DELETE_RETENTION_MS
from framework.plan.stage_state import (
    ChangelogImage,
    apply_changelog,
    apply_record,
    changelog_records,
)
from framework.snapshots.copies import UnitCopy, _apply_until
from framework.snapshots.units import (
    aggregate_records,
    decode_unit,
    encode_aggregate_unit,
)
from framework.wire.changelog import read_record

OP, DELTA, END = 0xC07, 10, 10**6


def add(a: int, b: int) -> int:
    return a + b


AGGREGATIONS = {
    "tumbling": Aggregation(Tumbling(50), reduce=add),
    "sliding": Aggregation(Sliding(40, 20)),
    "count": Aggregation(Count(3), reduce=add),
    "session": Aggregation(Session(30)),
    "rolling": Aggregation(Count(1), reduce=add, rolling=True),
    "rolling-pane": Aggregation(Tumbling(30), reduce=add, rolling=True),
    "dedup": Aggregation(Count(1), step=First(), rolling=True),
}

Batch = tuple[list[Record], int]


def _item(slot: int, offset: int, key: str, value: int) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset)), Keyed(key, key_hash(key), value))


def _batches(items: Sequence[Record], sizes: Sequence[int], floor: int = 0) -> list[Batch]:
    """Batches of ``items`` in arrival order; each batch's min time is at most the least
    slot of every item not yet pushed (min time never passes an item in flight)."""
    batches, at, size = [], 0, iter(sizes)
    while at < len(items):
        n = max(1, next(size, 3))
        rest = [r.meta.gt.slot for r in items[at:]]
        batches.append((list(items[at : at + n]), max(floor, min(rest)) if at else 0))
        at += n
    return batches


def _run(agg: Any, batches: list[Batch]) -> tuple[list[Record], list[list[tuple[bytes, bytes]]]]:
    """Each batch as `framework.plan.task` runs it; the outputs and each batch's changelog."""
    out, log = [], []
    for items, min_time in batches:
        for record in items:
            agg.push(record)
        out += agg.advance(min_time)
        log.append(changelog_records(agg))
    out += agg.advance(END)
    return out, log


def _restored(name: str, log: list[list[tuple[bytes, bytes]]], cut: int) -> Any:
    """The aggregator a new epoch's task builds from the snapshot cut at ``cut``."""
    copy = UnitCopy(ChangelogImage(), ChangelogImage)
    copy.pending.extend((k, v, 0) for batch in log for k, v in batch if v is not None)
    _apply_until(copy, cut)
    image = copy.state
    assert isinstance(image, ChangelogImage)
    data = encode_aggregate_unit(image.cut(cut), image.min_time, name, "label")
    unit = decode_unit(data, "label", "test")
    agg = aggregator(OP, AGGREGATIONS[name], DELTA)
    apply_changelog(agg, aggregate_records(unit["buckets"], unit["min_time"], cut))
    agg.take_changed()
    return agg


def _raws(keys: str) -> st.SearchStrategy[list[tuple[int, str, int]]]:
    """Items as ``(slot, key, value)``, in any order."""
    return st.lists(
        st.tuples(st.integers(0, 80), st.sampled_from(keys), st.integers(0, 5)),
        min_size=1,
        max_size=40,
    )


def _ordered(raw: list[tuple[int, str, int]]) -> list[Record]:
    """The items in slot order, offsets numbering them."""
    return [
        _item(slot, i, key, v) for i, (slot, key, v) in enumerate(sorted(raw, key=lambda t: t[0]))
    ]


def _key(record: Record) -> tuple[Any, ...]:
    return (record.meta, repr(record.value))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(AGGREGATIONS)),
    raw=_raws("abc"),
    swaps=st.lists(st.integers(0, 39), max_size=10),
    sizes=st.lists(st.integers(1, 6), max_size=40),
    replay_sizes=st.lists(st.integers(1, 6), max_size=40),
    cut=st.integers(1, 90),
)
def test_a_restored_cut_emits_exactly_what_the_live_run_emitted_from_the_cut_on(  # noqa: PLR0917
    name: str,
    raw: list[tuple[int, str, int]],
    swaps: list[int],
    sizes: list[int],
    replay_sizes: list[int],
    cut: int,
) -> None:
    ordered = _ordered(raw)
    arrival = list(ordered)
    for i in swaps:  # neighbours swap: disorder within what min time allows
        if i + 1 < len(arrival):
            arrival[i], arrival[i + 1] = arrival[i + 1], arrival[i]
    live_out, log = _run(aggregator(OP, AGGREGATIONS[name], DELTA), _batches(arrival, sizes))

    agg = _restored(name, log, cut)
    assert not agg.held, "a restored item holds no slot"
    replay = [r for r in ordered if r.meta.gt.slot >= cut]
    out, _ = _run(agg, _batches(replay, replay_sizes, floor=cut))

    expected = [r for r in live_out if r.meta.gt.slot >= cut]
    assert sorted(map(_key, out)) == sorted(map(_key, expected))
    suppressed = len([r for r in live_out if r.meta.gt.slot < cut])
    assert agg.replayed <= suppressed
    acquired, released = agg.take_holds()
    assert all(slot >= cut for slot in acquired + released)
    assert not agg.held


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(AGGREGATIONS)),
    raw=_raws("abcd"),
    sizes=st.lists(st.integers(1, 6), max_size=40),
    cuts=st.lists(st.integers(0, 90), min_size=1, max_size=4),
)
def test_an_image_decodes_each_keys_last_record_only_and_equals_every_record_applied(
    name: str, raw: list[tuple[int, str, int]], sizes: list[int], cuts: list[int]
) -> None:
    """Cut after cut, an image equals the changelog's records applied one by one up to the
    cut's stop (the first batch whose min time is past it)."""
    ordered = _ordered(raw)
    _, log = _run(aggregator(OP, AGGREGATIONS[name], DELTA), _batches(ordered, sizes))
    records = [(k, v, n) for n, (k, v) in enumerate(r for batch in log for r in batch)]
    copy = UnitCopy(ChangelogImage(), ChangelogImage)
    copy.pending.extend(r for r in records if r[1] is not None)
    for cut in sorted(cuts):
        _apply_until(copy, cut)
        left = len(copy.pending)
        applied = [r for r in records if r[1] is not None][: -left or None]
        one_by_one = ChangelogImage()
        for kafka_key, value, _ in applied:
            apply_record(one_by_one, *read_record(kafka_key, value))
        image = copy.state
        assert isinstance(image, ChangelogImage)
        assert (image.buckets, image.min_time, image.floor) == (
            one_by_one.buckets,
            one_by_one.min_time,
            one_by_one.floor,
        )
        if left:  # stopped at a batch whose min time is past the cut
            kind, _, slot = read_record(copy.pending[0][0], copy.pending[0][1])  # type: ignore[arg-type]
            assert kind == "min_time" and slot > cut
            assert copy.stop_age_ms == copy.pending[0][2]


def test_an_undecodable_record_leaves_every_record_of_the_cut_pending() -> None:
    """Applying the records again once they can be read gives the same image."""
    agg = aggregator(OP, AGGREGATIONS["tumbling"], DELTA)
    agg.push(_item(3, 0, "a", 1))
    good = [(k, v, 0) for k, v in changelog_records(agg) if v is not None]
    copy = UnitCopy(ChangelogImage(), ChangelogImage)
    copy.pending.extend([*good, (b"\x01not-a-key", b"not a pickle", 0)])
    with pytest.raises(DecodeError):
        _apply_until(copy, None)
    assert len(copy.pending) == len(good) + 1
    copy.pending.pop()
    _apply_until(copy, None)
    assert not copy.pending
    image = copy.state
    assert isinstance(image, ChangelogImage) and set(image.buckets) == {"a"}


def test_holds_below_the_floor_are_never_acked_and_their_results_are_counted() -> None:
    a = aggregator(OP, Aggregation(Tumbling(50), reduce=add), DELTA)
    a.put_floor(7)
    a.put_bucket("k", ([(GlobalTime(3, 1, 0), (), 0, False)], [4], []))
    a.push(_item(8, 1, "k", 5))
    assert a.held == frozenset({8})
    assert a.take_holds() == ([8], [])
    assert a.advance(5) == [] and a.replayed == 1  # window [0, 5) of slot 3
    a.put_bucket("j", ([(GlobalTime(6, 1, 0), (), 0, False)], [1], []))
    [result] = a.advance(10)  # [5, 10): k's has slot 8, j's only slot 6
    assert result.value.key == "k" and result.value.value == 5 and a.replayed == 2
    assert a.take_holds() == ([], [8])


def test_a_copy_read_too_long_ago_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction may since have removed deletions it never read, with their records."""
    copy = UnitCopy(ChangelogImage(), ChangelogImage, position=40, read_at=time.monotonic())
    stale = copy.state
    copy.start_over_if_outlived()
    assert copy.state is stale and copy.position == 40
    later = time.monotonic() + CHANGELOG_DELETE_RETENTION_MS / 1000
    monkeypatch.setattr(time, "monotonic", lambda: later)
    copy.start_over_if_outlived()
    assert copy.state is not stale and copy.position == 0 and copy.read_at is None
