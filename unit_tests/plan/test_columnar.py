"""A source stage on columns gives the per-item path's output exactly, record for record."""

from __future__ import annotations

import os
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import KafkaSink, KafkaSource
from framework import Max, Mean, Min, Pipeline, Sum, Tally, Tumbling
from framework.core.graph import Graph, Kind
from framework.plan.stage_spec import StageSpec, TaskResult
from framework.plan.stages import plan_stages
from framework.plan.task import StageProgram
from framework.testing import ListSink, ListSource
from framework.wire.records import InRecord
from unit_tests.plan.test_task import items_of, xor_table

WORDS = ["a", "bb", "ccc", "dd", "e", "", "ffff"]


def _even(s: str) -> bool:
    return len(s) % 2 == 0


def _even_batch(column: pa.Array) -> pa.Array:
    return pc.equal(pc.bit_wise_and(pc.utf8_length(column), 1), 0)


OPS: dict[str, Callable[[Any, str], Any]] = {
    "map": lambda stream, n: stream.map(lambda s: s + "x", name=n),
    "upper": lambda stream, n: stream.map_batches(pc.utf8_upper, name=n),
    "split": lambda stream, n: stream.flat_map(str.split, name=n),
    "split_batches": lambda stream, n: stream.flat_map_batches(pc.utf8_split_whitespace, name=n),
    "chars": lambda stream, n: stream.flat_map(lambda s: list(s[:2]), name=n),
    "even": lambda stream, n: stream.filter(_even, name=n),
    "even_batches": lambda stream, n: stream.filter_batches(_even_batch, name=n),
}


def _structs(words: pa.Array) -> pa.Array:
    lengths = pc.utf8_length(words)
    return pa.StructArray.from_arrays([words, lengths], names=["w", "n"])


REDUCED: dict[str, Callable[[Any], Any]] = {
    # Built-in reducers, which run vectorized: a field of tuples, plain ints, Arrow structs.
    "sum_field": lambda s: (
        s.map(lambda w: (w[:1], len(w)))
        .key_by(lambda t: t[0])
        .aggregate(Tumbling(50), reduce=Sum(1), combinable=True)
    ),
    "max_int": lambda s: (
        s.map(len).key_by(lambda n: n % 3).aggregate(Tumbling(50), reduce=Max(), combinable=True)
    ),
    "min_struct": lambda s: (
        s.map_batches(_structs)
        .key_by_batches(lambda rows: pc.struct_field(rows, "n"))
        .aggregate(Tumbling(100), reduce=Min("n"), combinable=True)
    ),
    "tally_any": lambda s: s.key_by(lambda w: w[:1]).aggregate(
        Tumbling(50), reduce=Tally(), combinable=True
    ),
    "mean_struct": lambda s: (
        s.map_batches(_structs)
        .key_by_batches(lambda rows: pc.struct_field(rows, "n"))
        .aggregate(Tumbling(100), reduce=Mean("n"), combinable=True)
    ),
    "mean_field": lambda s: (
        s.map(lambda w: (w[:1], len(w) / 2))  # floats: item by item
        .key_by(lambda t: t[0])
        .aggregate(Tumbling(50), reduce=Mean(1), combinable=True)
    ),
    "sum_big": lambda s: (
        s.map(lambda w: 2**62 + len(w))  # may leave 64 bits: item by item
        .key_by(lambda n: "k")
        .aggregate(Tumbling(50), reduce=Sum(), combinable=True)
    ),
}


def graph_of(chain: list[str], exit_: str, batch_key: bool = False) -> Graph:
    p = Pipeline("cols")
    stream = p.source(ListSource([], topic="lines"))
    for i, op in enumerate(chain):
        stream = OPS[op](stream, f"{op}{i}")
        stream = stream.map(lambda s: s, name=f"id{i}") if i % 3 == 2 else stream
    if exit_ in REDUCED:
        REDUCED[exit_](stream).sink(ListSink())
    elif exit_ == "sink":
        stream.sink(ListSink())
    elif exit_ == "kafka":
        stream.sink(KafkaSink("out"))
    else:
        keyed = (
            stream.key_by_batches(lambda a: pc.utf8_slice_codeunits(a, 0, 1), name="k")
            if batch_key
            else stream.key_by(lambda s: s[:1], name="k")
        )
        if exit_ == "group":
            keyed.group(2).sink(ListSink())
        else:
            keyed.aggregate(Tumbling(50), reduce=lambda a, b: a + b, combinable=True).sink(
                ListSink()
            )
    return p.graph()


def program(graph: Graph, *, columnar: bool) -> StageProgram:
    sources = {n.id: "lines" for n in graph.by_kind(Kind.SOURCE)}
    stages = plan_stages(graph, sources)
    topics = {e.topic: 1 for stage in stages for e in stage.exits.values()}
    topics.update({stage.topic: 3 for stage in stages if not stage.is_source})
    spec = StageSpec(graph, stages[0], topics, 2, KafkaSource("lines"), columnar=columnar)
    return StageProgram(spec)


def run(
    graph: Graph, records: list[InRecord], slots: dict[int, int], *, columnar: bool
) -> TaskResult:
    draws = random.Random(7)
    return program(graph, columnar=columnar).run(
        records, None, 1, 1, lambda: draws.getrandbits(64) | 1, slots=slots
    )


def batch(texts: list[bytes], stamps: list[int]) -> list[InRecord]:
    return [
        InRecord("lines", 1, 100 + i, ts, None, t)
        for i, (t, ts) in enumerate(zip(texts, stamps, strict=True))
    ]


lines = st.lists(st.sampled_from(WORDS), max_size=4).map(lambda ws: " ".join(ws).encode())


@settings(max_examples=300, deadline=None)
@given(
    chain=st.lists(st.sampled_from(sorted(OPS)), max_size=4),
    exit_=st.sampled_from(["sink", "kafka", "group", "aggregate", *REDUCED]),
    texts=st.lists(lines, min_size=1, max_size=12),
    batch_key=st.booleans(),
    data=st.data(),
)
def test_columns_give_the_per_item_output(
    chain: list[str], exit_: str, texts: list[bytes], batch_key: bool, data: st.DataObject
) -> None:
    stamps = data.draw(st.lists(st.integers(0, 400), min_size=len(texts), max_size=len(texts)))
    lifted = data.draw(st.sets(st.integers(0, len(texts) - 1)))
    records = batch(texts, stamps)
    slots = {100 + i: 45 for i in lifted}
    graph = graph_of(chain, exit_, batch_key)
    items = run(graph, records, slots, columnar=False)
    columns = run(graph, records, slots, columnar=True)
    assert columns.columnar and not items.columnar
    assert replace(columns, columnar=False) == items


def test_a_failing_function_leaves_the_batch_to_the_per_item_path() -> None:
    def picky(s: str) -> str:
        if s == "dd":
            raise ValueError("no dd")
        return s

    p = Pipeline("cols")
    p.source(ListSource([], topic="lines")).flat_map(str.split).map(picky).sink(ListSink())
    graph = p.graph()
    records = batch([b"a bb", b"a dd e", b"ccc"], [10, 20, 30])
    items = run(graph, records, {}, columnar=False)
    columns = run(graph, records, {}, columnar=True)
    assert not columns.columnar and columns == items
    assert columns.dead_letters == 1 and columns.items_out == 4  # "a dd e" yields "a" first


def test_an_undecodable_record_leaves_the_batch_to_the_per_item_path() -> None:
    graph = graph_of(["split"], "sink")
    records = batch([b"a bb", b"\xff\xfe", b"ccc"], [10, 20, 30])
    columns = run(graph, records, {}, columnar=True)
    assert not columns.columnar and columns.dead_letters == 1
    assert columns == run(graph, records, {}, columnar=False)


def test_a_chain_that_does_not_run_on_columns_runs_item_by_item() -> None:
    p = Pipeline("cols")
    left, right = p.source(ListSource([], topic="lines")).broadcast(2)
    left.sink(ListSink("one"))
    right.sink(ListSink("two"))
    assert program(p.graph(), columnar=True).chain is None
    assert program(graph_of(["split"], "aggregate"), columnar=True).chain is not None


def test_the_acks_of_items_sent_on_columns_are_what_their_frames_carry() -> None:
    graph = graph_of(["split"], "group")
    records = batch([b"a bb a", b"ccc dd", b"e"], [10, 20, 400])
    stage = program(graph, columnar=True)
    result = stage.run(records, None, 1, 1)  # the task's own ack values, not a test's
    assert result.columnar and result.items_out == 6
    sent = xor_table(result.records, stage.spec.topics.acks)
    carried: dict[tuple[str, int], int] = defaultdict(int)
    (exit_,) = stage.spec.stage.exits.values()
    segment = graph.segments().of_node[exit_.target]
    for record in result.records:
        if record.topic == exit_.topic:
            for meta, ack, _ in items_of(record):
                assert ack % 2 == 1
                carried[(segment, meta.gt.slot)] ^= ack
    assert carried and sent == carried


def test_a_forked_child_draws_other_ack_values() -> None:
    stage = program(graph_of(["split"], "group"), columnar=True)
    records = batch([b"a bb a"], [10])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own values, written back
        values = [a for r in stage.run(records, None, 1, 1).records for _, a, _ in _items(r)]
        os.write(write, repr(values).encode())
        os._exit(0)
    os.close(write)
    ours = [a for r in stage.run(records, None, 1, 1).records for _, a, _ in _items(r)]
    os.waitpid(pid, 0)
    theirs = eval(os.read(read, 1 << 16).decode())
    assert ours and len(theirs) == len(ours) and not set(ours) & set(theirs)


def _items(record: Any) -> list[Any]:
    return items_of(record) if record.topic.endswith("group") or "shuffle" in record.topic else []
