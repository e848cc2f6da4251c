"""An aggregate stage that reduces per pane takes its frames in bulk: what the per-item path
does, to the same outputs, acks, changelog and dead letters."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import Json, KafkaSink
from framework import Pipeline, Sliding, Tumbling
from framework.core.graph import Graph
from framework.core.panes import PaneAggregator
from framework.plan.stage_spec import TaskResult
from framework.plan.task import StageProgram
from framework.testing import ListSink, ListSource
from framework.wire.frames import FRAME_HEADERS
from framework.wire.records import InRecord, OutRecord
from unit_tests.plan.test_aggregate_task import add, programs
from unit_tests.plan.test_task import as_input, items_of, lines, one_per_frame, xor_table


def _picky_add(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    if b == ("d", 2):
        raise ValueError("no pair of d")
    return add(a, b)


def _graph(window: Any, reduce: Any) -> Graph:
    p = Pipeline("wa")
    (
        p.source(ListSource([], topic="lines"))
        .flat_map(lambda line: [(w, 1) for w in line.split()])
        .key_by(lambda pair: pair[0])
        .aggregate(window, reduce=reduce, combinable=True)
        .map(lambda r: (r.key, r.start_ms, r.value[1]))
        .sink(ListSink())
    )
    return p.graph()


def _stages(window: Any, reduce: Any = add) -> tuple[StageProgram, StageProgram, StageProgram]:
    first, second = programs(_graph(window, reduce))
    return first, second, StageProgram(replace(second.spec, columnar=False))


def _split(records: list[OutRecord], topic: str, rng: random.Random) -> list[list[InRecord]]:
    """The shuffle's items, one per frame, shuffled into three batches."""
    mine = one_per_frame(records, topic)
    rng.shuffle(mine)
    cut = sorted(rng.sample(range(len(mine) + 1), 2))
    return [mine[: cut[0]], mine[cut[0] : cut[1]], mine[cut[1] :]]


def _same(program: StageProgram, bulk: TaskResult, items: TaskResult) -> None:
    """The same state changes, receipts, holds and results; the results may leave in
    another order (a window end's in the order its keys first arrived), so with other
    ack values."""
    acks = program.spec.topics.acks
    state_topic = program.spec.topics.state(program.spec.stage.entry)
    assert bulk.columnar and not items.columnar
    assert _received(program, bulk) == _received(program, items)
    assert _changelog(bulk.records, state_topic) == _changelog(items.records, state_topic)
    assert _results(bulk, acks, state_topic) == _results(items, acks, state_topic)
    assert replace(bulk, records=[], columnar=False) == replace(items, records=[])


def _results(result: TaskResult, acks: str, state_topic: str) -> list[Any]:
    outputs = [r for r in result.records if r.topic not in (acks, state_topic)]
    return sorted((meta, payload) for r in outputs for meta, _, payload in items_of(r))


def _received(program: StageProgram, result: TaskResult) -> dict[tuple[str, int], int]:
    """The acks a batch sent (receipts and holds; results into a sink are not acked)."""
    table = xor_table(result.records, program.spec.topics.acks)
    return {key: value for key, value in table.items() if value}


def _draws(seed: int) -> Callable[[], int]:
    rng = random.Random(seed)
    return lambda: rng.getrandbits(64) | 1


def _changelog(records: Iterable[OutRecord], topic: str) -> dict[bytes | None, bytes | None]:
    return {r.key: r.value for r in records if r.topic == topic}


@settings(max_examples=150, deadline=None)
@given(
    window=st.sampled_from([Tumbling(100), Sliding(200, 100), Tumbling(50)]),
    words=st.lists(st.sampled_from(["a b", "d", "c d a", "e"]), min_size=1, max_size=20),
    seed=st.integers(0, 1000),
)
def test_frames_in_bulk_give_the_per_item_result(window: Any, words: list[str], seed: int) -> None:
    first, bulk, items = _stages(window)
    source = first.run(lines(*(w.encode() for w in words)), None, sender=1, node_time=1)
    topic = bulk.spec.stage.topic
    states = {"bulk": bulk.new_state(), "items": items.new_state()}
    assert isinstance(states["bulk"], PaneAggregator)
    batches = _split(source.records, topic, random.Random(seed))
    for step, batch in enumerate(batches):
        # Min time never passes an item still to come.
        later = [m.gt.slot for b in batches[step + 1 :] for r in b for m, _, _ in items_of(r)]
        min_time = min(later, default=10_000)
        fast = bulk.run(batch, states["bulk"], 2, 1, _draws(seed), min_time=min_time, partition=0)
        slow = items.run(batch, states["items"], 2, 1, _draws(seed), min_time=min_time, partition=0)
        if batch:
            _same(bulk, fast, slow)
        else:
            assert _received(bulk, fast) == _received(bulk, slow)
    assert not states["bulk"].held and not states["items"].held


def test_an_item_whose_reduction_raises_is_the_same_dead_letter() -> None:
    first, bulk, items = _stages(Tumbling(100), _picky_add)
    # Two source batches into one pane: ("d", 1), then ("d", 2), whose reduction raises.
    one = first.run(lines(b"d"), None, sender=1, node_time=1)
    two = first.run(lines(b"d d"), None, sender=1, node_time=1)
    topic = bulk.spec.stage.topic
    batch = as_input(one.records + two.records, topic)
    batch = [r._replace(partition=0) for r in batch]
    fast = bulk.run(batch, bulk.new_state(), 2, 1, min_time=10_000, partition=0)
    slow = items.run(batch, items.new_state(), 2, 1, min_time=10_000, partition=0)
    assert fast.columnar and fast.dead_letters == slow.dead_letters == 1
    dlq = bulk.spec.topics.dlq
    letters = [r for r in fast.records if r.topic == dlq]
    assert letters == [r for r in slow.records if r.topic == dlq]


def test_a_frame_that_is_not_authentic_goes_the_per_item_way() -> None:
    _, bulk, items = _stages(Tumbling(100))
    forged = InRecord(bulk.spec.stage.topic, 0, 5, 0, None, bytes(1), FRAME_HEADERS)
    one = bulk.run([forged], bulk.new_state(), 2, 1, partition=0)
    assert not one.columnar and one.dead_letters == 1
    assert one == items.run([forged], items.new_state(), 2, 1, partition=0)


def _results_graph(window: Any, tail: str, spread: int) -> Graph:
    p = Pipeline("wr")
    results = (
        p.source(ListSource([], topic="lines"))
        .flat_map(lambda line: [(w, 1) for w in line.split()])
        .key_by(lambda pair: pair[0])
        .aggregate(window, reduce=add, combinable=True)
    )
    if tail == "map":
        results = results.map(lambda r: (r.key, r.start_ms, r.value[1]))
    elif tail == "flat_map, filter":
        results = results.flat_map(lambda r: [r.key] * r.value[1]).filter(lambda k: k != "a")
    if spread:  # a Kafka sink of several barriers: items spread by their output partition
        results.sink(KafkaSink("out", value=Json(), key=str, partitions=7, barriers=spread))
    else:
        results.sink(ListSink(name="out"))
    return p.graph()


@settings(max_examples=60, deadline=None)
@given(
    window=st.sampled_from([Tumbling(100), Sliding(200, 100)]),
    tail=st.sampled_from(["", "map", "flat_map, filter"]),
    spread=st.sampled_from([0, 3]),
    words=st.lists(st.sampled_from(["a b", "d", "c d a", "e a a"]), min_size=1, max_size=20),
    seed=st.integers(0, 1000),
)
def test_window_results_leave_on_columns_as_the_per_item_path_sends_them(
    window: Any, tail: str, spread: int, words: list[str], seed: int
) -> None:
    """The same records, byte for byte: frames, metas, ack values, barrier partitions."""
    first, second = programs(_results_graph(window, tail, spread))
    partitions = dict(second.spec.partitions)
    if spread:
        partitions.update({e.topic: spread for e in second.spec.stage.exits.values()})
        partitions["out"] = 7
    spec = replace(second.spec, partitions=partitions)
    columns, items = StageProgram(spec), StageProgram(spec)
    assert columns.results_chain is not None
    items.results_chain = None
    source = first.run(lines(*(w.encode() for w in words)), None, sender=1, node_time=1)
    batch = as_input(source.records, spec.stage.topic)
    batch = [r._replace(partition=0) for r in batch]
    states = columns.new_state(), items.new_state()
    fast = columns.run(batch, states[0], 2, 1, _draws(seed), min_time=10_000, partition=0)
    slow = items.run(batch, states[1], 2, 1, _draws(seed), min_time=10_000, partition=0)
    assert fast.items_out == slow.items_out > 0
    assert fast.records == slow.records
