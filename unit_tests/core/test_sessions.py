"""Session windows: runs of items less than a gap apart, final exactly by min time."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings

from framework.core.aggregate import aggregator
from framework.core.meta import Record
from framework.core.sessions import SessionAggregator
from framework.core.windows import Aggregation, Session, WindowResult
from framework.pipeline import Pipeline
from framework.plan.stage_state import apply_changelog, changelog_records
from framework.testing import ListSink, ListSource, Shuffled, run_local
from unit_tests.core.test_windows import DELTA, OP, arrivals, item

GAP = 3  # slots


def sessions() -> SessionAggregator:
    a = aggregator(OP, Aggregation(Session(GAP * DELTA)), DELTA)
    assert isinstance(a, SessionAggregator)
    return a


def oracle(kept: list[Record]) -> set[tuple[object, int, int, tuple[object, ...]]]:
    by_key: dict[object, list[Record]] = defaultdict(list)
    for r in sorted(kept, key=lambda r: r.meta):
        by_key[r.value.key].append(r)
    out = set()
    for key, items in by_key.items():
        run = [items[0]]
        for r in items[1:]:
            if r.meta.gt.slot - run[-1].meta.gt.slot >= GAP:
                out.add(_session(key, run))
                run = []
            run.append(r)
        out.add(_session(key, run))
    return out


def _session(key: object, run: list[Record]) -> tuple[object, int, int, tuple[object, ...]]:
    start, end = run[0].meta.gt.slot * DELTA, (run[-1].meta.gt.slot + GAP) * DELTA
    return (key, start, end, tuple(r.value.value for r in run))


def test_a_late_item_bridging_two_runs_merges_them_before_min_time_passes() -> None:
    a = sessions()
    a.push(item(1, "a", offset=1))
    a.push(item(7, "d", offset=7))
    assert a.on_min_time(3) == [] and a.next_due() == 4  # the run at 1 could still grow
    a.push(item(3, "b", offset=3))  # 1 -> 3: less than the gap apart
    a.push(item(5, "c", offset=5))  # 3 -> 5 -> 7: the two runs become one session
    assert a.on_min_time(9) == []
    [result] = a.on_min_time(10)
    assert result.value == WindowResult("k", 10, 100, ("a", "b", "c", "d"))
    assert a.held == frozenset() and a.next_due() is None


def test_the_changelog_rebuilds_sessions_and_their_holds() -> None:
    live = sessions()
    for slot, key in [(1, "p"), (2, "p"), (9, "p"), (3, "q")]:
        live.push(item(slot, slot, key, offset=slot))
    live.on_min_time(6)  # p's run 1-2 and q's run at 3 end at 5 and 6: emitted
    rebuilt = sessions()
    apply_changelog(rebuilt, changelog_records(live))
    assert rebuilt.hold_counts == live.hold_counts == {9: 1}
    assert [r.value for r in rebuilt.on_min_time(20)] == [r.value for r in live.on_min_time(20)]


@given(arrivals(last_slot=30, keys="xy"))
@settings(max_examples=300, deadline=None)
def test_sessions_equal_the_oracle_and_come_exactly_when_min_time_reaches_their_end(
    case: tuple[list[Record], list[Record], list[bool]],
) -> None:
    kept, order, notify = case
    a = sessions()
    emitted = []
    last_min = 0
    for i, record in enumerate(order):
        a.push(record)
        if notify[i]:
            m = min((r.meta.gt.slot for r in order[i + 1 :]), default=40)
            held = min(a.held, default=None)
            for result in a.on_min_time(m):
                w = result.value
                assert held is not None and result.meta.gt.slot >= held
                assert last_min * DELTA < w.end_ms <= m * DELTA  # not earlier, not later
                emitted.append((w.key, w.start_ms, w.end_ms, w.value))
            last_min = max(last_min, m)
    emitted += [(r.value.key, *r.value[1:]) for r in a.on_min_time(99)]
    assert len(emitted) == len(set(emitted))
    assert set(emitted) == oracle(kept)
    assert a.held == frozenset()


def test_session_windows_run_in_the_harness_under_any_delivery() -> None:
    stamps = [0, 10, 20, 100, 110, 400, 5, 15]  # keyed by the parity of the index
    records = [(t, (i % 2, t)) for i, t in enumerate(stamps)]
    outputs = []
    for delivery in (None, Shuffled(seed=1), Shuffled(seed=2)):
        p = Pipeline("s")
        keyed = p.source(ListSource.timed(records, partitions=2)).key_by(lambda kv: kv[0])
        keyed.aggregate(Session(50), fold=lambda n, _: n + 1, initial=0).sink(ListSink())
        outputs.append(sorted(run_local(p, delivery).values()))  # type: ignore[type-var]
    assert outputs[0] == outputs[1] == outputs[2]
    assert [(r.key, r.start_ms, r.end_ms, r.value) for r in outputs[0]] == [
        (0, 0, 70, 3),  # 0, 5, 20 (slots 0, 0, 2); then 110 is 9 slots later
        (0, 110, 160, 1),
        (1, 10, 60, 2),  # 10, 15
        (1, 100, 150, 1),
        (1, 400, 450, 1),
    ]
