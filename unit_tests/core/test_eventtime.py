"""Event-time windows: membership by the item alone, final by min time, late items loud."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.aggregate import aggregator
from framework.core.eventtime import EventTimeAggregator, LateItem
from framework.core.meta import Record
from framework.core.windows import Aggregation, Tumbling, WindowSpec
from framework.errors import PipelineError, UserFunctionError
from framework.pipeline import Pipeline
from framework.plan.stage_state import apply_changelog, changelog_records
from framework.testing import ListSink, ListSource, Shuffled, run_local
from unit_tests.core.test_windows import DELTA, OP, item

SIZE, LATE = 5, 2  # slots


def event(payload: Any) -> int:
    return payload[0]  # type: ignore[no-any-return]


def windows(window: WindowSpec | None = None, updates: int = 0) -> EventTimeAggregator:
    spec = Aggregation(
        window or Tumbling(SIZE * DELTA),
        event_time=event,
        lateness_ms=LATE * DELTA,
        updates_ms=updates * DELTA,
    )
    agg = aggregator(OP, spec, DELTA)
    assert isinstance(agg, EventTimeAggregator)
    return agg


def reading(ingested: int, event_slot: int, key: object = "k") -> Record:
    return item(ingested, (event_slot * DELTA, ingested), key, offset=ingested)


def test_a_window_takes_items_by_event_time_and_is_final_at_its_end_plus_lateness() -> None:
    a = windows()
    a.push(reading(1, 3))
    a.push(reading(2, 7))  # the next window
    a.push(reading(6, 4))  # ingested after the end (5), before end + lateness (7): in
    assert a.on_min_time(6) == []
    [first] = a.on_min_time(7)
    assert first.value.start_ms == 0 and first.value.end_ms == 50
    assert [ingested for _, ingested in first.value.value] == [1, 6]  # global-time order
    assert first.meta.gt.slot == 6 and a.held == frozenset({2})


def test_an_item_ingested_after_its_window_was_final_is_late_and_raises() -> None:
    a = windows()
    with pytest.raises(LateItem, match="late: event time 30 ms, ingested at 70 ms"):
        a.push(reading(7, 3))  # window [0, 5) is final at 7
    assert a.held == frozenset() and a.bucket_state("k") is None
    for bad in ("soon", -1, 2.5, None):
        with pytest.raises(UserFunctionError, match="event_time returned"):
            a.push(item(1, (bad, 0), offset=1))
    with pytest.raises(UserFunctionError, match="event_time failed"):
        a.push(item(1, (), offset=1))


def test_the_changelog_rebuilds_event_time_windows() -> None:
    live = windows()
    for ingested, event_slot, key in [(1, 3, "a"), (2, 12, "a"), (3, 4, "b"), (4, 1, "b")]:
        live.push(reading(ingested, event_slot, key))
    live.on_min_time(5)
    rebuilt = windows()
    apply_changelog(rebuilt, changelog_records(live))
    assert rebuilt.hold_counts == live.hold_counts and rebuilt.next_due() == live.next_due()
    assert [r.value for r in rebuilt.on_min_time(30)] == [r.value for r in live.on_min_time(30)]


@pytest.mark.parametrize("updates", [0, 6])
def test_a_changelog_replayed_batch_by_batch_without_compaction_rebuilds_the_holds(
    updates: int,
) -> None:
    live, records = windows(updates=updates), []
    batches = [([(1, 3), (2, 4), (3, 8)], 4), ([(5, 9), (8, 2)], 8), ([(9, 13)], 16), ([], 30)]
    for pushes, min_time in batches:
        for ingested, event_slot in pushes:
            with contextlib.suppress(LateItem):
                live.push(reading(ingested, event_slot))
        live.on_min_time(min_time)
        records += changelog_records(live)  # each batch's records, oldest first
        rebuilt = windows(updates=updates)
        apply_changelog(rebuilt, records)
        assert rebuilt.hold_counts == live.hold_counts, min_time
        assert rebuilt.bucket_state("k") == live.bucket_state("k")


def test_event_time_declarations_that_cannot_work_are_refused() -> None:
    with pytest.raises(PipelineError, match="without combinable"):
        Aggregation(Tumbling(10), reduce=max, combinable=True, event_time=event)
    with pytest.raises(PipelineError, match="lateness_ms"):
        Aggregation(Tumbling(10), lateness_ms=10)


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[Record], list[bool]]:
    pairs = draw(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=25))
    items = [
        item(ingested, (ev * DELTA, i), draw(st.sampled_from("xy")), offset=i)
        for i, (ingested, ev) in enumerate(pairs)
    ]
    order = draw(st.permutations(items))
    notify = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    return order, notify


@given(arrivals(), st.sampled_from([0, 4]))
@settings(max_examples=300, deadline=None)
def test_results_updates_and_late_items_depend_on_the_items_alone(
    case: tuple[list[Record], list[bool]], updates: int
) -> None:
    order, notify = case
    a = windows(updates=updates)
    emitted, late = [], set()
    for i, record in enumerate(order):
        try:
            a.push(record)
        except LateItem:
            late.add(record.value.value[1])
        if notify[i]:
            m = min((r.meta.gt.slot for r in order[i + 1 :]), default=60)
            held = min(a.held, default=None)
            for result in a.on_min_time(m):
                assert held is not None and result.meta.gt.slot >= held
                w = result.value
                emitted.append((w.key, w.start_ms, tuple(sorted(v[1] for v in w.value))))
    emitted += [
        (r.value.key, r.value.start_ms, tuple(sorted(v[1] for v in r.value.value)))
        for r in a.on_min_time(99)
    ]
    assert sorted(emitted) == sorted(oracle(order, updates)[0])
    assert late == oracle(order, updates)[1]
    assert a.held == frozenset() and a.bucket_state("x") is None


def oracle(
    order: list[Record], updates: int
) -> tuple[list[tuple[object, int, tuple[int, ...]]], set[int]]:
    """Per window: its first release (members), then one per update item in meta order."""
    members: dict[tuple[object, int], list[int]] = defaultdict(list)
    ups: dict[tuple[object, int], list[Record]] = defaultdict(list)
    late = set()
    for r in sorted(order, key=lambda r: r.meta):
        ingested, (ev_ms, ident) = r.meta.gt.slot, r.value.value
        start = ev_ms // DELTA // SIZE * SIZE
        due = start + SIZE + LATE
        if ingested < due:
            members[(r.value.key, start * DELTA)].append(ident)
        elif ingested < due + updates:
            ups[(r.value.key, start * DELTA)].append(r)
        else:
            late.add(ident)
    out = []
    for window in set(members) | set(ups):
        ids = list(members[window])
        if ids:
            out.append((*window, tuple(sorted(ids))))
        for r in ups[window]:
            ids.append(r.value.value[1])
            out.append((*window, tuple(sorted(ids))))
    return out, late


def test_a_window_is_released_again_for_each_update_and_holds_nothing_back_meanwhile() -> None:
    a = windows(updates=10)
    a.push(reading(1, 3))
    [first] = a.on_min_time(7)  # final at 5 + 2
    assert [v[1] for v in first.value.value] == [1] and a.held == frozenset()
    a.push(reading(9, 2))  # ingested after the release, before 7 + 10: an update
    assert a.held == frozenset({9}) and a.on_min_time(9) == []
    rebuilt = windows(updates=10)
    apply_changelog(rebuilt, changelog_records(a))
    assert rebuilt.hold_counts == a.hold_counts and rebuilt.next_due() == a.next_due()
    [update] = a.on_min_time(10)
    assert [r.value for r in rebuilt.on_min_time(10)] == [update.value]
    assert update.value.start_ms == first.value.start_ms
    assert [v[1] for v in update.value.value] == [1, 9] and update.meta.gt.slot == 9
    with pytest.raises(LateItem, match="updates 100 ms"):
        a.push(reading(17, 4))  # 7 + 10: too late even to update
    a.on_min_time(17)
    assert a.bucket_state("k") is None  # dropped at the horizon


def test_the_harness_sends_late_items_to_its_dead_letters_under_any_delivery() -> None:
    # (event ms, id); ingested at 0, 100, 200, ... ms
    records = [(0, 0), (50, 1), (120, 2), (30, 3), (10, 4), (260, 5), (140, 6)]
    runs = []
    for delivery in (None, Shuffled(seed=3), Shuffled(seed=4)):
        p = Pipeline("et")
        keyed = p.source(ListSource(records, step_ms=100, partitions=2)).key_by(lambda r: 0)
        keyed.aggregate(
            Tumbling(100),
            fold=lambda ids, r: (*ids, r[1]),
            initial=(),
            event_time=lambda r: r[0],
            lateness_ms=150,
        ).sink(ListSink())
        result = run_local(p, delivery)
        windows_out = sorted((w.start_ms, tuple(sorted(w.value))) for w in result.values())  # type: ignore[union-attr]
        dead = sorted(d.payload[1] for d in result.dead_letters)  # type: ignore[index]
        runs.append((windows_out, dead, {d.reason.split(":")[0] for d in result.dead_letters}))
    assert runs[0] == runs[1] == runs[2]
    windows_out, dead, reasons = runs[0]
    # [0, 100) is final at 250 ms: ids 0 and 1 in, 3 (ingested at 300) and 4 late;
    # [100, 200) at 350: 2 in, 6 late; [200, 300) at 450: 5 (ingested at 500) late.
    assert windows_out == [(0, (0, 1)), (100, (2,))] and dead == [3, 4, 5, 6]
    assert reasons == {"late"}
