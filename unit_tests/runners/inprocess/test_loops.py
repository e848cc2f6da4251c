"""Loops in the in-process harness (`Stream.loop`): exactly once across the feedback, the
same output in every delivery order, rounds bounded by the dead letters."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.acker.tracker import components
from framework.core.graph import Kind
from framework.errors import PipelineError
from framework.pipeline import Pipeline
from framework.plan.stages import ExitKind, plan_stages
from framework.testing import InOrder, Late, ListSink, ListSource, Shuffled, run_local

Step = tuple[int, int, int]  # (start, value, steps)


def _collatz(s: Step) -> Step:
    start, value, steps = s
    return start, value // 2 if value % 2 == 0 else 3 * value + 1, steps + 1


def _collatz_steps(n: int) -> int:
    """The oracle: steps of the Collatz map from ``n`` to 1."""
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _collatz_pipeline(numbers: list[int], max_rounds: int, partitions: int = 2) -> Pipeline:
    p = Pipeline("collatz")
    start = p.source(ListSource(numbers, partitions=partitions)).map(lambda n: (n, n, 0))
    loop = start.loop(max_rounds=max_rounds, name="steps")
    again, done = loop.stream.map(_collatz).broadcast(2)
    loop.close(again.filter(lambda s: s[1] != 1))
    done.filter(lambda s: s[1] == 1).map(lambda s: (s[0], s[2])).sink(ListSink("steps"))
    return p


def test_an_iteration_leaves_its_loop_once_with_the_oracles_result() -> None:
    numbers = [6, 7, 27, 97, 1_000, 3]
    result = run_local(_collatz_pipeline(numbers, max_rounds=200))
    assert sorted(result.values()) == sorted((n, _collatz_steps(n)) for n in numbers)
    assert result.dead_letters == ()


@settings(max_examples=40, deadline=None)
@given(
    numbers=st.lists(st.integers(2, 300), min_size=1, max_size=12),
    seed=st.integers(0, 2**16),
    late=st.integers(0, 1),
)
def test_every_delivery_order_releases_the_same_output_in_the_same_order(
    numbers: list[int], seed: int, late: int
) -> None:
    """The barrier releases past min time, which no item passes while it goes round: the
    output, and its order, are the in-order run's whatever the interleaving."""
    pipeline = _collatz_pipeline(numbers, max_rounds=200)
    expected = run_local(pipeline, InOrder()).values()
    delivery = Late(late, seed) if late else Shuffled(seed)
    assert run_local(pipeline, delivery).values() == expected


def test_an_item_past_max_rounds_goes_to_the_dead_letters_with_the_reason() -> None:
    """27 needs 111 steps: with 10 rounds it is dead-lettered after its 10th feedback
    (11 steps taken), the others come out, and the run ends (min time does not stall)."""
    result = run_local(_collatz_pipeline([6, 27, 3], max_rounds=10))
    assert sorted(result.values()) == [(3, 7), (6, 8)]
    [dead] = result.dead_letters
    assert dead.node == "steps-feedback"
    assert "loop 'steps' did not settle within 10 round(s)" in dead.reason
    assert dead.payload == (27, 107, 11)  # 27 -> 82 -> ... -> 214 -> 107


def _hops_pipeline(words: list[str], rounds: int) -> Pipeline:
    """Each word goes round ``rounds`` times through a window-2 grouping by word: every
    round pairs it with the word's item just before it in global-time order, the items
    of earlier rounds of the same occurrence included (a repair goes round too)."""
    p = Pipeline("hops")
    loop = p.source(ListSource(words, partitions=2)).map(lambda w: (w, 0)).loop(rounds + 1)
    paired = loop.stream.key_by(lambda item: item[0]).group(window=2)
    hop = paired.map(lambda window: (window[-1][0], window[-1][1] + 1, len(window)))
    again, done = hop.broadcast(2)
    loop.close(again.filter(lambda h: h[1] < rounds).map(lambda h: (h[0], h[1])))
    done.sink(ListSink("hops"))
    return p


@settings(max_examples=30, deadline=None)
@given(
    words=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_a_grouping_inside_a_loop_repairs_every_round_to_the_in_order_output(
    words: list[str], seed: int
) -> None:
    """Tombstones of a grouping's repairs carry their items' metas, rounds included, so
    they meet them at the barrier: out of order, the output is the in-order run's."""
    pipeline = _hops_pipeline(words, rounds=3)
    expected = run_local(pipeline, InOrder())
    shuffled = run_local(pipeline, Shuffled(seed))
    assert shuffled.values() == expected.values()
    assert Counter(h[1] for h in expected.values()) == {1: len(words), 2: len(words), 3: len(words)}


def test_a_loop_with_a_grouping_is_one_component_of_two_segments() -> None:
    graph = _hops_pipeline(["a"], rounds=2).graph()
    loop = next(graph.by_kind(Kind.LOOP)).id
    group = next(graph.by_kind(Kind.GROUP)).id
    segments = graph.segments()
    assert segments.inbound[loop] == ("source-input", group)
    assert segments.inbound[group] == (loop,)
    assert tuple(sorted((loop, group))) in components(segments.inbound)


def test_a_loop_of_the_wrong_shape_is_refused_with_the_fix() -> None:
    p = Pipeline("open")
    loop = p.source(ListSource([1])).loop(max_rounds=3)
    loop.stream.sink(ListSink())
    with pytest.raises(Exception, match=r"never closed: call close\(stream\)"):
        p.graph()

    p = Pipeline("unrelated")
    loop = p.source(ListSource([1])).loop(max_rounds=3)
    other = p.source(ListSource([2], topic="other")).map(lambda x: x)
    loop.stream.sink(ListSink())
    loop.close(other)
    with pytest.raises(Exception, match="does not come from the loop"):
        p.graph()

    p = Pipeline("waits")
    loop = p.source(ListSource([1])).loop(max_rounds=3)
    counted = loop.stream.key_by(lambda x: x).reduce(lambda a, b: a + b)
    again, out = counted.broadcast(2)
    loop.close(again)
    out.sink(ListSink())
    with pytest.raises(Exception, match=r"inside loop .* aggregate the loop's output after it"):
        p.graph()

    p = Pipeline("twice")
    loop = p.source(ListSource([1])).loop(max_rounds=3)
    a, b, _ = loop.stream.broadcast(3)
    loop.close(a)
    with pytest.raises(Exception, match="closed already"):
        loop.close(b)

    with pytest.raises(Exception, match="max_rounds >= 1"):
        Pipeline("none").source(ListSource([1])).loop(max_rounds=0)


def test_on_spark_a_loop_is_a_cycle_of_stages_through_its_own_topic() -> None:
    graph = _collatz_pipeline([6], max_rounds=5).graph()
    stages = {stage.entry: stage for stage in plan_stages(graph, {"source-input": "input"})}
    loop = next(graph.by_kind(Kind.LOOP))
    feedback = next(graph.by_kind(Kind.FEEDBACK))
    # The source stage and the loop's own stage (which holds the feedback) both leave by
    # an exit into the loop's topic, which the loop's stage reads.
    assert stages[loop.id].topic == f"collatz.{loop.id}"
    into_loop = [
        (stage.entry, port.node)
        for stage in stages.values()
        for port, exit_ in stage.exits.items()
        if exit_.kind is ExitKind.LOOP
    ]
    assert sorted(into_loop) == sorted(
        [("source-input", loop.inputs[0].node), (loop.id, feedback.id)]
    )
    assert all(
        e.topic == stages[loop.id].topic
        for s in stages.values()
        for e in s.exits.values()
        if e.kind is ExitKind.LOOP
    )
    assert feedback.id in stages[loop.id].nodes and loop.id not in stages["source-input"].nodes


def test_converge_after_a_grouping_is_refused_with_the_fix() -> None:
    p = Pipeline("retracted")
    windows = p.source(ListSource([1, 2])).key_by(lambda n: n).group(window=2)
    windows.key_by(lambda w: w[-1]).converge(min).sink(ListSink())
    with pytest.raises(PipelineError, match="converge before the grouping, or aggregate between"):
        p.graph()
