"""Built-in reducers: pairwise as any reduce, and vectorized exactly like the fold."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.reducers import (
    Max,
    Mean,
    Min,
    Reducer,
    Subtotal,
    Sum,
    Tally,
    combine_runs,
)
from framework.errors import PipelineError
from framework.pipeline import Pipeline, Sliding, Tumbling
from framework.testing import ListSink, ListSource, Shuffled, run_local


def test_pairwise_on_numbers_and_fields() -> None:
    assert Sum()(2, 3) == 5 and Min()(2, 3) == 2 and Max()(2, 3) == 3
    assert Sum(1)(("a", 1), ("a", 2)) == ("a", 3)
    assert Max("n")({"w": "a", "n": 1}, {"w": "b", "n": 5}) == {"w": "a", "n": 5}
    assert Min(0)([4, "x"], [3, "y"]) == [3, "x"]
    with pytest.raises(TypeError, match="cannot set field 0 of a str"):
        Sum(0)("ab", "cd")


def test_count_and_mean_reduce_payloads_and_tallies_alike() -> None:
    assert Tally()("x", "y") == Subtotal(2) and Tally()(Subtotal(3), "y") == Subtotal(4)
    assert Tally()(Subtotal(3), Subtotal(2)) == Subtotal(5)
    assert Mean()(1, 2) == Subtotal(2, 3) and Mean(1)(Subtotal(2, 3), ("a", 6)) == Subtotal(3, 9)
    assert Tally().finish(Subtotal(5)) == 5 and Tally().finish("a lone payload") == 1
    assert Mean().finish(Subtotal(4, 10)) == 2.5 and Mean("n").finish({"n": 7}) == 7.0
    assert functools.reduce(Mean(), [Mean()(1, 2), 3, Subtotal(1, 6)]) == Subtotal(4, 12)
    with pytest.raises(PipelineError, match=r"Tally\(\) counts payloads and takes no field"):
        Tally(1)


def _fold(
    reducer: Reducer, panes: list[int], keys: list[Any], values: list[Any]
) -> list[tuple[int, int, int, Any]]:
    """What the per-item path does: per run of a pane, a dict of keys in first-seen order."""
    out: list[tuple[int, int, int, Any]] = []
    start = 0
    for end in range(1, len(panes) + 1):
        if end < len(panes) and panes[end] == panes[start]:
            continue
        seen: dict[Any, list[Any]] = {}
        for i in range(start, end):
            entry = seen.get(keys[i])
            if entry is None:
                seen[keys[i]] = [i, i, values[i]]
            else:
                entry[1], entry[2] = i, reducer(entry[2], values[i])
        out += [(panes[start], first, last, value) for first, last, value in seen.values()]
        start = end
    return out


REDUCERS = [Sum(), Min(), Max(), Sum(1), Min(1), Max(1), Tally(), Mean(), Mean(1)]


def _shown(reducer: Reducer, runs: list[tuple[int, int, int, Any]] | None) -> list[Any] | None:
    """Runs with the values a result shows: a run of one item is its payload to the per-item
    path and a tally to the vectorized one, and both show the same count or mean."""
    if runs is None:
        return None
    return [(pane, first, last, reducer.finish(value)) for pane, first, last, value in runs]


@settings(max_examples=300, deadline=None)
@given(
    reducer=st.sampled_from(REDUCERS),
    rows=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from("abc"), st.integers(-(2**40), 2**40)),
        min_size=1,
        max_size=40,
    ),
)
def test_vectorized_runs_equal_the_fold(reducer: Reducer, rows: list[Any]) -> None:
    rows.sort(key=lambda row: row[0])  # items in meta order: panes never decrease
    panes = [pane for pane, _, _ in rows]
    keys = [key for _, key, _ in rows]
    values = [n if reducer.field is None else (key, n) for _, key, n in rows]
    got = combine_runs(reducer, np.array(panes, np.int64), keys, values)
    assert _shown(reducer, got) == _shown(reducer, _fold(reducer, panes, keys, values))


def test_arrow_structs_reduce_their_field() -> None:
    rows = [{"w": "a", "n": 1}, {"w": "b", "n": 2}, {"w": "a", "n": 3}]
    got = combine_runs(Sum("n"), np.zeros(3, np.int64), ["a", "b", "a"], pa.array(rows))
    assert got == [(0, 0, 2, {"w": "a", "n": 4}), (0, 1, 1, {"w": "b", "n": 2})]


@pytest.mark.parametrize(
    ("keys", "values"),
    [
        (["a", "a"], [1.5, 2.5]),  # floats: a sum depends on its order
        (["a", "a"], [True, 1]),  # bools are ints to Python, not to a sum's type
        (["a", "a"], [2**62, 2**62]),  # might leave 64 bits
        (["a", "a"], [-(2**63), -1]),  # might leave 64 bits below (abs(-2**63) is negative)
        ([1.0, 1.0], [1, 2]),  # float keys: NaN and -0.0 are not Python's equality
        (["a", b"a"], [1, 2]),  # keys Arrow cannot hold in one array
        ([("a",), ("a",)], [1, 2]),  # nested keys
        ([2**70, 2**70], [1, 2]),  # a key beyond 64 bits
    ],
)
def test_what_does_not_fit_is_left_to_the_fold(keys: list[Any], values: list[Any]) -> None:
    assert combine_runs(Sum(), np.zeros(2, np.int64), keys, values) is None


def test_count_counts_any_payloads_but_not_tallies() -> None:
    got = combine_runs(Tally(), np.array([0, 0, 1]), ["a", "a", "a"], [None, [1], 2.5])
    assert got == [(0, 0, 1, Subtotal(2)), (1, 2, 2, Subtotal(1))]
    assert combine_runs(Tally(), np.zeros(2, np.int64), ["a", "a"], [Subtotal(2), 1]) is None
    assert combine_runs(Mean(), np.zeros(2, np.int64), ["a", "a"], [1.5, 2]) is None


def test_only_the_built_in_reducers_run_vectorized() -> None:
    class Twice(Sum):
        pass

    assert combine_runs(Twice(), np.zeros(1, np.int64), ["a"], [1]) is None
    assert functools.reduce(Sum(), [1, 2, 3]) == 6


# -- Tally and Mean through every aggregation that reduces, in the harness ------------------

ROWS = [("a", 1), ("b", 4), ("a", 2), ("a", 6), ("b", 5), ("c", 3), ("a", 3), ("b", 7)]
"""Ingested at 0, 10, ..., 70 ms."""


def _windows(rows: list[tuple[str, int]], size: int, step: int) -> dict[tuple[str, int], list[int]]:
    """The oracle: per key and window start, the numbers in it."""
    out: dict[tuple[str, int], list[int]] = {}
    for i, (key, n) in enumerate(rows):
        at = i * 10
        for start in range(at - at % step - size + step, at + 1, step):
            out.setdefault((key, start), []).append(n)
    return out


def _aggregated(window: Any, reducer: Reducer, combinable: bool, seed: int) -> Any:
    p = Pipeline("tallies")
    keyed = p.source(ListSource(ROWS, partitions=2, step_ms=10)).key_by(lambda r: r[0])
    results = keyed.aggregate(window, reduce=reducer, combinable=combinable)
    results.map(lambda w: ((w.key, w.start_ms), w.value)).sink(ListSink())
    return dict(run_local(p, Shuffled(seed=seed)).values())


@pytest.mark.parametrize("combinable", [True, False])
@pytest.mark.parametrize(("size", "step"), [(30, 30), (40, 20)])
def test_tally_and_mean_in_windows_equal_the_oracle(combinable: bool, size: int, step: int) -> None:
    window = Tumbling(size) if size == step else Sliding(size, step)
    oracle = _windows(ROWS, size, step)
    for seed in (1, 2):
        tallies = _aggregated(window, Tally(), combinable, seed)
        assert tallies == {k: len(v) for k, v in oracle.items()}
        means = _aggregated(window, Mean(1), combinable, seed)
        assert means == {k: sum(v) / len(v) for k, v in oracle.items()}
        assert all(type(v) is float for v in means.values())


def test_rolling_tally_and_mean_show_counts_and_means() -> None:
    p = Pipeline("rolling")
    one, two = p.source(ListSource(ROWS, step_ms=10)).broadcast(2)
    one.key_by(lambda r: r[0]).reduce(Mean(1)).map(tuple).sink(ListSink("means"))
    two.key_by(lambda r: r[0]).reduce(Tally(), every_ms=30, combinable=True).map(tuple).sink(
        ListSink("panes")
    )
    result = run_local(p)
    seen: dict[str, list[int]] = {}
    running = []
    for key, n in ROWS:
        seen.setdefault(key, []).append(n)
        running.append((key, sum(seen[key]) / len(seen[key])))
    assert result.values("means") == running
    # Per pane of 30 ms with items (rows 0-2, 3-5, 6-7), each key's count after it.
    assert sorted(result.values("panes")) == sorted(
        [("a", 2), ("b", 1), ("a", 3), ("b", 2), ("c", 1), ("a", 4), ("b", 3)]
    )
