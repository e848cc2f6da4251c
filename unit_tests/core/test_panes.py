"""A combinable window as one value per key and pane: the buffering aggregate's results."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.aggregate import aggregator
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.panes import PaneAggregator
from framework.core.time import GlobalTime
from framework.core.windows import Aggregation, Count, Sliding, Tumbling, WindowAggregator
from framework.errors import PipelineError

OP = 0xA99
DELTA = 10

# (key, slot ahead of min time, front) pushes and min-time steps, in any mix.
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from("abc"), st.integers(0, 25), st.integers(1, 3)),
        st.tuples(st.just("min"), st.just(""), st.integers(0, 12), st.just(0)),
    ),
    max_size=60,
)
_WINDOWS = st.sampled_from([Tumbling(50), Tumbling(10), Sliding(60, 20), Sliding(40, 40)])


def item(slot: int, value: int, key: str, front: int, offset: int) -> Record:
    return Record(Meta(GlobalTime(slot, front, offset)), Keyed(key, key_hash(key), value))


def _pair(window: Tumbling | Sliding) -> tuple[WindowAggregator, WindowAggregator]:
    aggregation = Aggregation(window, reduce=operator.add, combinable=True)
    return WindowAggregator(OP, aggregation, DELTA), aggregator(OP, aggregation, DELTA)


def _sorted(results: list[Record]) -> list[Record]:
    """Results in meta order: the buffering aggregate emits one window end's in the order
    its keys first arrived, the pane aggregate in meta order."""
    return sorted(results, key=lambda r: r.meta)


def _held_after(agg: WindowAggregator, held: set[int]) -> set[int]:
    acquired, released = agg.take_holds()
    for slot in acquired + released:
        held ^= {slot}
    return held


@settings(max_examples=300, deadline=None)
@given(_WINDOWS, _STEPS)
def test_results_and_their_metas_equal_the_buffering_aggregates(
    window: Tumbling | Sliding, steps: list[tuple[str, str, int, int]]
) -> None:
    buffering, panes = _pair(window)
    assert isinstance(panes, PaneAggregator)
    min_time, offset, held = 0, 0, set[int]()
    for kind, key, amount, front in steps:
        if kind == "push":
            offset += 1
            record = item(min_time + amount, offset, key, front, offset)
            assert buffering.push(record) == panes.push(record) == []
        else:
            min_time += amount
            out = panes.on_min_time(min_time)
            assert _sorted(out) == _sorted(buffering.on_min_time(min_time))
            # A result's slot was held until it was emitted (held: before this step).
            assert all(r.meta.gt.slot >= min(held) for r in out)
        held = _held_after(panes, held)
        assert held == set(panes.held)
        assert panes.next_due() == buffering.next_due()
    final = min_time + 1000
    assert _sorted(panes.on_min_time(final)) == _sorted(buffering.on_min_time(final))
    assert _held_after(panes, held) == set() == set(panes.held)


@settings(max_examples=600, deadline=None)
@given(_WINDOWS, _STEPS, st.integers(0, 60), st.booleans())
def test_a_state_rebuilt_from_its_changelog_or_the_buffering_ones_goes_on_alike(
    window: Tumbling | Sliding, steps: list[tuple[str, str, int, int]], cut: int, foreign: bool
) -> None:
    """Replaying bucket states (a pane aggregate's own, or a buffering aggregate's written
    by an earlier flamepipe) and the min time gives a state whose results are the same and
    which holds what the state's writer held, releasing each hold once, however often it
    is replayed."""
    buffering, panes = _pair(window)
    min_time, offset, held = 0, 0, set[int]()
    for index, (kind, key, amount, front) in enumerate(steps):
        if index == cut:
            source = buffering if foreign else panes
            _held_after(panes, held)
            rebuilt = _rebuilt(source)
            assert rebuilt.hold_counts == source.hold_counts
            again = _rebuilt(rebuilt)  # a restart after the first one, before any change
            assert again.hold_counts == source.hold_counts
            assert again.take_holds() == ([], [])  # replayed holds are silent
            panes, held = again, set(source.held)
        if kind == "push":
            offset += 1
            record = item(min_time + amount, offset, key, front, offset)
            buffering.push(record)
            panes.push(record)
        else:
            min_time += amount
            assert _sorted(panes.on_min_time(min_time)) == _sorted(buffering.on_min_time(min_time))
        held = _held_after(panes, held)
    final = min_time + 1000
    assert _sorted(panes.on_min_time(final)) == _sorted(buffering.on_min_time(final))
    assert _held_after(panes, held) == set() == set(panes.held)


def _rebuilt(source: WindowAggregator) -> WindowAggregator:
    rebuilt = aggregator(OP, source.aggregation, DELTA)
    rebuilt.put_min_time(source.min_time)
    for key in "abc":
        rebuilt.put_bucket(key, source.bucket_state(key))
    return rebuilt


def test_a_cell_holds_the_slot_of_its_largest_meta_only() -> None:
    _, panes = _pair(Tumbling(50))
    panes.push(item(1, 1, "k", 1, 1))
    panes.push(item(3, 1, "k", 1, 2))
    panes.push(item(2, 1, "k", 1, 3))
    assert panes.held == {3}
    acquired, released = panes.take_holds()
    assert sorted(acquired) == [1, 3] and released == [1]
    [result] = panes.on_min_time(5)
    assert result.value.value == 3 and result.meta.gt == GlobalTime(3, 1, 2)
    assert panes.held == frozenset() and panes.take_holds() == ([], [3])


def test_snapshot_restores_the_cells() -> None:
    _, panes = _pair(Sliding(60, 20))
    for offset, slot in enumerate((1, 2, 3, 4, 9), start=1):
        panes.push(item(slot, offset, "k", 1, offset))
    restored = PaneAggregator.restore(OP, panes.aggregation, DELTA, panes.snapshot())
    assert restored.held == panes.held
    assert restored.on_min_time(100) == panes.on_min_time(100)


def test_only_combinable_time_windows_run_per_pane() -> None:
    with pytest.raises(PipelineError, match="combinable"):
        PaneAggregator(OP, Aggregation(Tumbling(50), reduce=operator.add), DELTA)
    assert not isinstance(aggregator(OP, Aggregation(Count(3)), DELTA), PaneAggregator)
    _, panes = _pair(Tumbling(50))
    with pytest.raises(PipelineError, match="tombstone"):
        panes.push(item(1, 1, "k", 1, 1).tombstone())
