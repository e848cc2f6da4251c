"""The harness's columnar ingest releases what the per-item harness releases."""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from framework import Pipeline, Sum, Tumbling
from framework.core.graph import Graph
from framework.runners.inprocess.delivery import InOrder, Shuffled
from framework.runners.inprocess.routes import Plan
from framework.runners.inprocess.runner import InProcessRunner, RunResult
from framework.testing import ListSink, ListSource


def picky(word: str) -> str:
    if word == "boom":
        raise ValueError("no boom")
    return word


def graph(lines: list[str], shape: str) -> Graph:
    p = Pipeline("harness-cols")
    src = p.source(ListSource(lines, partitions=2, topic="lines"))
    words = src.flat_map_batches(pc.utf8_split_whitespace).map(picky)
    if shape == "group":
        words.key_by(lambda w: w).group(2).map(lambda w: (w[-1], len(w))).sink(ListSink())
    elif shape == "aggregate":
        ones = words.map(lambda w: (w, 1)).key_by(lambda pair: pair[0])
        ones.aggregate(Tumbling(20), reduce=lambda a, b: (a[0], a[1] + b[1]), combinable=True).map(
            lambda r: (r.key, r.start_ms, r.value[1])
        ).sink(ListSink())
    elif shape == "sum":  # the built-in reducer: the same windows as the lambda's
        ones = words.map(lambda w: (w, 1)).key_by(lambda pair: pair[0])
        ones.aggregate(Tumbling(20), reduce=Sum(1), combinable=True).map(
            lambda r: (r.key, r.start_ms, r.value[1])
        ).sink(ListSink())
    else:
        words.filter(lambda w: len(w) > 1).sink(ListSink())
    return p.graph()


def released(result: RunResult) -> list[Any]:
    return [(r.meta, r.value) for r in result.records()]


def letters(result: RunResult) -> list[Any]:
    return sorted((d.node, d.payload) for d in result.dead_letters)


@settings(max_examples=40, deadline=None)
@given(
    lines=st.lists(
        st.lists(st.sampled_from(["a", "bb", "a", "boom", "cc"]), max_size=4).map(" ".join),
        min_size=1,
        max_size=20,
    ),
    shape=st.sampled_from(["group", "aggregate", "sum", "stateless"]),
    seed=st.integers(0, 1000),
)
def test_columns_release_what_items_release(lines: list[str], shape: str, seed: int) -> None:
    g = graph(lines, shape)
    items = InProcessRunner(InOrder(), columnar=False).run(g)
    for delivery in (InOrder(), Shuffled(seed)):
        columns = InProcessRunner(delivery, columnar=True).run(g)
        assert released(columns) == released(items)
        assert letters(columns) == letters(items)


def test_a_source_followed_by_stateless_operations_runs_them_as_a_chain() -> None:
    plan = Plan(graph(["a b"], "aggregate"), columnar=True)
    ((head, chain),) = plan.chains.items()
    assert len(chain.ops) == 4  # flat_map_batches, map, map, key_by
    assert plan.kinds[head] == "flat_map" and plan.kinds[chain.exit] == "aggregate"
    assert Plan(graph(["a b"], "aggregate")).chains == {}
