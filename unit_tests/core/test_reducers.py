"""Built-in reducers: pairwise as any reduce, and vectorized exactly like the fold."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.reducers import Max, Min, Reducer, Sum, combine_runs


def test_pairwise_on_numbers_and_fields() -> None:
    assert Sum()(2, 3) == 5 and Min()(2, 3) == 2 and Max()(2, 3) == 3
    assert Sum(1)(("a", 1), ("a", 2)) == ("a", 3)
    assert Max("n")({"w": "a", "n": 1}, {"w": "b", "n": 5}) == {"w": "a", "n": 5}
    assert Min(0)([4, "x"], [3, "y"]) == [3, "x"]
    with pytest.raises(TypeError, match="cannot set field 0 of a str"):
        Sum(0)("ab", "cd")


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


REDUCERS = [Sum(), Min(), Max(), Sum(1), Min(1), Max(1)]


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
    assert got == _fold(reducer, panes, keys, values)


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
        ([1.0, 1.0], [1, 2]),  # float keys: NaN and -0.0 are not Python's equality
        (["a", b"a"], [1, 2]),  # keys Arrow cannot hold in one array
        ([("a",), ("a",)], [1, 2]),  # nested keys
        ([2**70, 2**70], [1, 2]),  # a key beyond 64 bits
    ],
)
def test_what_does_not_fit_is_left_to_the_fold(keys: list[Any], values: list[Any]) -> None:
    assert combine_runs(Sum(), np.zeros(2, np.int64), keys, values) is None


def test_only_the_built_in_reducers_run_vectorized() -> None:
    class Twice(Sum):
        pass

    assert combine_runs(Twice(), np.zeros(1, np.int64), ["a"], [1]) is None
    assert functools.reduce(Sum(), [1, 2, 3]) == 6
