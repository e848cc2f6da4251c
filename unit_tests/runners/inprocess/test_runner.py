"""The in-process executor: any delivery interleaving yields the in-order barrier output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.errors import PipelineError
from framework.pipeline import Count, Pipeline, Sliding, Stream, Tumbling
from framework.testing import (
    InOrder,
    InProcessRunner,
    Late,
    ListSink,
    ListSource,
    RunResult,
    Shuffled,
    run_local,
)

# -- random pipelines ------------------------------------------------------------------


@dataclass(frozen=True)
class Map:
    a: int
    b: int


@dataclass(frozen=True)
class FlatMap:
    k: int


@dataclass(frozen=True)
class Filter:
    m: int


@dataclass(frozen=True)
class Group:
    keys: int
    window: int


@dataclass(frozen=True)
class Aggregate:
    keys: int
    window: Any


@dataclass(frozen=True)
class Branch:
    left: tuple[Any, ...]
    right: tuple[Any, ...]


def digest(window: tuple[int, ...]) -> int:
    """An order-sensitive fold of a window into a small int."""
    h = len(window)
    for v in window:
        h = (h * 31 + v) % 97
    return h


def extend(stream: Stream, steps: tuple[Any, ...]) -> Stream:
    for step in steps:
        if isinstance(step, Map):
            stream = stream.map(lambda v, s=step: (v * s.a + s.b) % 97)
        elif isinstance(step, FlatMap):
            stream = stream.flat_map(lambda v, k=step.k: [(v + i) % 97 for i in range(v % k)])
        elif isinstance(step, Filter):
            stream = stream.filter(lambda v, m=step.m: v % m != 0)
        elif isinstance(step, Group):
            keyed = stream.key_by(lambda v, n=step.keys: v % n)
            stream = keyed.group(window=step.window).map(digest)
        elif isinstance(step, Aggregate):
            keyed = stream.key_by(lambda v, n=step.keys: v % n)
            windowed = keyed.aggregate(step.window, fold=lambda h, v: (h * 31 + v) % 97, initial=1)
            stream = windowed.map(lambda r: (r.value + r.start_ms) % 97)
        else:
            left, right = stream.broadcast(2)
            stream = extend(left, step.left).merge(extend(right, step.right))
    return stream


SIMPLE = st.one_of(
    st.builds(Map, st.integers(1, 96), st.integers(0, 96)),
    st.builds(FlatMap, st.integers(2, 3)),
    st.builds(Filter, st.integers(2, 5)),
    st.builds(Group, st.integers(1, 3), st.integers(1, 3)),
    st.builds(
        Aggregate,
        st.integers(1, 3),
        st.sampled_from([Tumbling(20), Sliding(30, 10), Count(2)]),
    ),
)
CHAINS = st.lists(
    st.deferred(lambda: SIMPLE | st.builds(Branch, CHAINS.map(tuple), CHAINS.map(tuple))),
    max_size=3,
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Any], list[tuple[int, int]], int, bool]:
    """Steps (at least two groupings in sequence in some), inputs, partitions, 2 sources."""
    steps = draw(CHAINS)
    if draw(st.booleans()):
        steps = [*steps, Group(2, 2), Map(3, 1), Group(1, 2)]
    inputs = draw(st.lists(st.tuples(st.integers(0, 59), st.integers(0, 96)), max_size=12))
    return steps, inputs, draw(st.integers(1, 3)), draw(st.booleans())


def build(steps: list[Any], inputs: list[tuple[int, int]], partitions: int, two: bool) -> Pipeline:
    p = Pipeline("random")
    stream = p.source(ListSource.timed(inputs, partitions=partitions, topic="a"))
    if two:
        other = p.source(ListSource.timed(inputs[::2], partitions=1, topic="b"))
        stream = stream.merge(other.map(lambda v: (v + 1) % 97))
    extend(stream, tuple(steps)).sink(ListSink())
    return p


@given(scenarios(), st.integers(0, 2**16))
@settings(max_examples=200, deadline=None)
def test_any_delivery_yields_the_in_order_barrier_output(
    scenario: tuple[list[Any], list[tuple[int, int]], int, bool], seed: int
) -> None:
    pipeline = build(*scenario)
    oracle = run_local(pipeline, InOrder()).records()
    for delivery in (Shuffled(seed), Late(1, seed), Late(2)):
        assert run_local(pipeline, delivery).records() == oracle, delivery


# -- targeted behaviour ----------------------------------------------------------------


def grouping_pipeline(out: ListSink) -> Pipeline:
    # Partition 1 holds the earlier timestamps; Late(1) ingests it last.
    records = [(50, "a"), (0, "b"), (60, "c"), (10, "d"), (70, "e"), (20, "f")]
    p = Pipeline("late")
    p.source(ListSource.timed(records, partitions=2)).key_by(lambda _: 0).group(window=2).sink(out)
    return p


def test_late_front_makes_the_grouping_repair_and_the_barrier_hides_it() -> None:
    out = ListSink()
    p = grouping_pipeline(out)
    oracle = p.run(InProcessRunner())
    late = p.run(InProcessRunner(Late(1)))
    assert oracle.repairs == 0
    assert late.repairs > 0
    assert late.records() == oracle.records()
    assert late.values() == [("b",), ("b", "d"), ("d", "f"), ("f", "a"), ("a", "c"), ("c", "e")]
    assert out.values == late.values()


def test_bundles_are_released_in_meta_order_with_growing_gt_last() -> None:
    out = ListSink()
    result = grouping_pipeline(out).run(InProcessRunner(Shuffled(5)))
    records = result.records()
    assert [r.meta for r in records] == sorted(r.meta for r in records)
    seqs = [b.seq for b in out.bundles]
    assert seqs == list(range(len(seqs)))
    lasts = [b.gt_last for b in out.bundles]
    assert lasts == sorted(lasts)
    assert all(r.meta.gt <= b.gt_last for b in out.bundles for r in b.records)


def window_pipeline(out: ListSink, window: Any) -> Pipeline:
    records = [(ts, ts % 3) for ts in (0, 5, 12, 17, 25, 31, 38, 44, 52, 58)]
    p = Pipeline("windows")
    (
        p.source(ListSource.timed(records, partitions=3))
        .key_by(lambda v: v % 2)
        .aggregate(window, reduce=lambda a, b: a + b)
        .sink(out)
    )
    return p


@pytest.mark.parametrize("window", [Tumbling(20), Sliding(20, 10), Count(2)])
@pytest.mark.parametrize("delivery", [Shuffled(1), Shuffled(2), Late(1), Late(2, seed=3)])
def test_window_results_are_final_whatever_the_delivery(window: Any, delivery: Any) -> None:
    out = ListSink()
    p = window_pipeline(out, window)
    oracle = p.run(InProcessRunner()).records()
    assert p.run(InProcessRunner(delivery)).records() == oracle
    keys_windows = [(r.value.key, r.value.start_ms) for r in oracle]
    assert len(keys_windows) == len(set(keys_windows))  # one final result per key and window


def test_sink_is_cleared_per_run_and_result_names_sinks() -> None:
    out = ListSink("counts")
    p = Pipeline("p")
    p.source(ListSource([1, 2])).sink(out)
    result: RunResult = p.run(InProcessRunner())
    p.run(InProcessRunner())
    assert out.values == [1, 2] == result.values("counts")
    assert result.steps > 0


def test_runner_needs_list_endpoints() -> None:
    from framework.core.graph import Sink

    class Other(Sink):
        @property
        def name(self) -> str:
            return "other"

    p = Pipeline("p")
    p.source(ListSource([1])).sink(Other())
    with pytest.raises(PipelineError, match="needs a ListSink"):
        p.run(InProcessRunner())


def test_two_sources_on_one_topic_are_rejected() -> None:
    p = Pipeline("p")
    p.source(ListSource([1])).merge(p.source(ListSource([2]))).sink(ListSink())
    with pytest.raises(PipelineError, match="share a topic"):
        p.run(InProcessRunner())


def test_a_list_source_with_context_gives_each_function_its_records_coordinates() -> None:
    from framework import Message

    def where(message: Message) -> tuple[object, ...]:
        return (message.value, message.partition, message.offset, message.timestamp_ms)

    p = Pipeline("ctx")
    source = ListSource(["a", "b", "c"], partitions=2, start_ms=100, step_ms=10, context=True)
    p.source(source).map(where).sink(ListSink())
    assert sorted(p.run(InProcessRunner()).values()) == [  # type: ignore[union-attr]
        ("a", 0, 0, 100),
        ("b", 1, 0, 110),
        ("c", 0, 1, 120),
    ]
