"""Windowed aggregations: results are final exactly when min time passes their end."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime
from framework.core.windows import (
    Aggregation,
    Count,
    Sliding,
    Tumbling,
    WindowAggregator,
    WindowResult,
    WindowSpec,
)
from framework.errors import PipelineError

OP = 0xA99
DELTA = 10


def item(slot: int, value: object, key: object = "k", offset: int = 0) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset)), Keyed(key, key_hash(key), value))


def agg(window: WindowSpec, **kwargs: object) -> WindowAggregator:
    return WindowAggregator(OP, Aggregation(window, **kwargs), DELTA)  # type: ignore[arg-type]


def test_tumbling_window_is_emitted_exactly_when_min_time_reaches_its_end() -> None:
    a = agg(Tumbling(50), reduce=lambda x, y: x + y)
    for slot in (0, 2, 4, 5):
        assert a.push(item(slot, slot, offset=slot)) == []
    assert a.on_min_time(4) == []
    [result] = a.on_min_time(5)
    assert result.value == WindowResult("k", 0, 50, 0 + 2 + 4)
    assert result.meta == Meta(GlobalTime(4, 1, 4)).child(OP, 0)
    assert a.on_min_time(9) == []
    assert [r.value.value for r in a.on_min_time(10)] == [5]


def test_late_item_is_inserted_in_order_not_dropped() -> None:
    a = agg(Tumbling(50))
    a.push(item(3, "c", offset=3))
    a.push(item(1, "a", offset=1))  # late, but min time has not passed slot 1
    a.on_min_time(2)
    a.push(item(2, "b", offset=2))
    [result] = a.on_min_time(5)
    assert result.value.value == ("a", "b", "c")


def test_sliding_windows_each_get_a_result_with_a_distinct_meta() -> None:
    a = agg(Sliding(40, 20))
    a.push(item(3, 1))
    results = a.on_min_time(100)
    assert [(r.value.start_ms, r.value.end_ms) for r in results] == [(0, 40), (20, 60)]
    assert len({r.meta for r in results}) == 2


def test_count_windows_wait_for_min_time_past_their_last_item() -> None:
    a = agg(Count(2), fold=lambda acc, v: [*acc, v], initial=[])
    for slot in range(5):
        a.push(item(slot, slot, offset=slot))
    assert a.on_min_time(1) == []
    assert [r.value.value for r in a.on_min_time(2)] == [[0, 1]]
    assert [r.value for r in a.on_min_time(9)] == [WindowResult("k", 20, 40, [2, 3])]


def test_tombstone_removes_its_item_and_an_emptied_window_emits_nothing() -> None:
    a = agg(Tumbling(50))
    x = item(1, "x")
    a.push(x)
    a.push(x.tombstone())
    assert a.on_min_time(5) == []
    y = item(6, "y")
    a.push(y.tombstone())  # overtook its item
    a.push(y)
    a.push(item(7, "z", offset=1))
    assert [r.value.value for r in a.on_min_time(10)] == [("z",)]


def test_holds_cover_buffered_slots_until_their_windows_are_emitted() -> None:
    a = agg(Tumbling(50))
    a.push(item(1, "a"))
    a.push(item(1, "b", offset=1))
    a.push(item(7, "c"))
    assert a.take_holds() == ([1, 7], [])
    a.on_min_time(5)
    assert a.take_holds() == ([], [1])
    assert a.held == frozenset({7})


def test_snapshot_restore_resumes_without_re_emitting() -> None:
    a = agg(Sliding(40, 20), reduce=lambda x, y: x + y)
    for slot in (1, 3, 5):
        a.push(item(slot, slot, offset=slot))
    a.on_min_time(2)
    b = WindowAggregator.restore(OP, a.aggregation, DELTA, a.snapshot())
    assert b.held == a.held
    assert b.on_min_time(50) == a.on_min_time(50)


def test_invalid_specs() -> None:
    with pytest.raises(PipelineError, match="multiple of delta"):
        agg(Tumbling(15))
    with pytest.raises(PipelineError, match="not both"):
        agg(Tumbling(10), reduce=max, fold=max)
    with pytest.raises(PipelineError, match="step must not exceed"):
        agg(Sliding(10, 20))
    with pytest.raises(PipelineError, match=">= 1"):
        agg(Count(0))


WINDOWS = st.sampled_from(
    [Tumbling(30), Tumbling(10), Sliding(40, 20), Sliding(30, 10), Count(2), Count(3)]
)


def oracle(
    window: WindowSpec, kept: list[Record]
) -> set[tuple[object, int, int, tuple[object, ...]]]:
    """Brute-force results: per key and window, the payloads in meta order."""
    by_key: dict[object, list[Record]] = defaultdict(list)
    for record in sorted(kept, key=lambda r: r.meta):
        by_key[record.value.key].append(record)
    out = set()
    for key, records in by_key.items():
        if isinstance(window, Count):
            n = window.size
            for i in range(0, len(records) - n + 1, n):
                chunk = records[i : i + n]
                start, end = chunk[0].meta.gt.slot, chunk[-1].meta.gt.slot + 1
                out.add((key, start * DELTA, end * DELTA, tuple(r.value.value for r in chunk)))
            continue
        size = window.size_ms // DELTA
        step = size if isinstance(window, Tumbling) else window.step_ms // DELTA
        starts = {
            k * step
            for r in records
            for k in range((r.meta.gt.slot - size) // step + 1, r.meta.gt.slot // step + 1)
        }
        for start in starts:
            values = tuple(r.value.value for r in records if start <= r.meta.gt.slot < start + size)
            out.add((key, start * DELTA, (start + size) * DELTA, values))
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[WindowSpec, list[Record], list[Record], list[bool]]:
    window = draw(WINDOWS)
    n = draw(st.integers(0, 16))
    slots = sorted(draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)))
    items = [item(s, i, draw(st.sampled_from("xy")), offset=i) for i, s in enumerate(slots)]
    retracted = draw(st.lists(st.sampled_from(items), unique=True)) if items else []
    # Late arrivals: any order, but a tombstone comes after its item.
    order = draw(st.permutations(items))
    for r in retracted:
        at = draw(st.integers(order.index(r) + 1, len(order)))
        order.insert(at, r.tombstone())
    kept = [r for r in items if r not in retracted]
    notify = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    return window, kept, order, notify


@st.composite
def arrivals(
    draw: st.DrawFn, last_slot: int, keys: str
) -> tuple[list[Record], list[Record], list[bool]]:
    """Items of ``keys`` in slots up to ``last_slot``, some retracted by a later tombstone,
    in any order; the items kept; where a min time follows (`notify`)."""
    slots = draw(st.lists(st.integers(0, last_slot), max_size=25))
    items = [item(s, i, draw(st.sampled_from(keys)), offset=i) for i, s in enumerate(slots)]
    retracted = draw(st.lists(st.sampled_from(items), unique=True)) if items else []
    order = draw(st.permutations(items))
    for r in retracted:
        order.insert(draw(st.integers(order.index(r) + 1, len(order))), r.tombstone())
    kept = [r for r in items if r not in retracted]
    notify = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    return kept, order, notify


@given(scenarios())
@settings(max_examples=300, deadline=None)
def test_results_equal_the_oracle_and_come_exactly_when_min_time_passes_the_end(
    case: tuple[WindowSpec, list[Record], list[Record], list[bool]],
) -> None:
    window, kept, order, notify = case
    a = agg(window)
    emitted = []
    last_min = 0
    for i, record in enumerate(order):
        a.push(record)
        if notify[i]:
            # The largest legal min time: no later arrival is below it.
            m = min((r.meta.gt.slot for r in order[i + 1 :]), default=20)
            held = min(a.held, default=None)
            for result in a.on_min_time(m):
                w = result.value
                assert held is not None and result.meta.gt.slot >= held
                if not isinstance(window, Count):
                    assert last_min * DELTA < w.end_ms <= m * DELTA  # not earlier, not later
                emitted.append((w.key, w.start_ms, w.end_ms, w.value))
            last_min = max(last_min, m)
    emitted += [
        (r.value.key, r.value.start_ms, r.value.end_ms, r.value.value) for r in a.on_min_time(99)
    ]
    assert len(emitted) == len(set(emitted))
    assert set(emitted) == oracle(window, kept)
    assert a.held == frozenset()
