"""The logical graph: validation messages and acker segments."""

from __future__ import annotations

import pytest

from framework.core.graph import Graph, Kind, Node, Port, Sink, Source
from framework.core.windows import Aggregation, Tumbling
from framework.errors import PipelineError


class _Src(Source):
    @property
    def name(self) -> str:
        return "in"


class _Snk(Sink):
    def __init__(self, name: str = "out") -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name


def ident(v: object) -> object:
    return v


def src(i: str) -> Node:
    return Node(i, Kind.SOURCE, endpoint=_Src())


def op(i: str, kind: Kind, *inputs: str, **fields: object) -> Node:
    if kind in (Kind.MAP, Kind.FLAT_MAP, Kind.FILTER, Kind.KEY_BY):
        fields.setdefault("fn", ident)
    return Node(i, kind, tuple(Port(u) for u in inputs), **fields)  # type: ignore[arg-type]


def sink(i: str, upstream: str, name: str = "out") -> Node:
    return Node(i, Kind.SINK, (Port(upstream),), endpoint=_Snk(name))


def graph(*nodes: Node) -> Graph:
    return Graph("g", nodes)


def fails(match: str, *nodes: Node) -> None:
    with pytest.raises(PipelineError, match=match):
        graph(*nodes).validate()


def test_a_valid_chain() -> None:
    g = graph(src("s"), op("m", Kind.MAP, "s"), sink("o", "m"))
    assert g.validate() is g
    assert [n.id for n in g.by_kind(Kind.MAP)] == ["m"]


def test_missing_source_or_sink() -> None:
    fails("no source", op("m", Kind.MAP))
    fails("no sink: end it with .sink", src("s"), op("m", Kind.MAP, "s"))


def test_unknown_upstream() -> None:
    fails("reads unknown upstream 'x'", src("s"), op("m", Kind.MAP, "x"), sink("o", "m"))


def test_cycle_is_reported_with_its_path() -> None:
    fails(
        r"cycle m -> n -> m",
        src("s"),
        op("m", Kind.MERGE, "s", "n"),
        op("n", Kind.MAP, "m"),
        sink("o", "n"),
    )


def test_out_of_order_listing_without_cycle() -> None:
    fails("listed before its input", src("s"), sink("o", "m"), op("m", Kind.MAP, "s"))


def test_group_needs_key_by() -> None:
    fails("call key_by", src("s"), op("g", Kind.GROUP, "s", window=2), sink("o", "g"))


def test_keyed_stream_must_feed_group_or_aggregate() -> None:
    fails("follow key_by", src("s"), op("k", Kind.KEY_BY, "s"), sink("o", "k"))


def test_merge_must_not_mix_keyed_and_unkeyed() -> None:
    fails(
        "mixes keyed",
        src("s"),
        op("b", Kind.BROADCAST, "s", ports=2),
        op("k", Kind.KEY_BY, "b"),
        Node("m", Kind.MERGE, (Port("k"), Port("b", 1))),
        sink("o", "m"),
    )


def test_fan_out_needs_broadcast() -> None:
    fails(
        "use broadcast",
        src("s"),
        op("a", Kind.MAP, "s"),
        op("b", Kind.MAP, "s"),
        sink("o", "a"),
        sink("p", "b", "p"),
    )


def test_dangling_output() -> None:
    fails(
        "output 1 of b goes nowhere",
        src("s"),
        op("b", Kind.BROADCAST, "s", ports=2),
        sink("o", "b"),
    )


def test_arity_ports_and_parameters() -> None:
    fails("at least two inputs", src("s"), op("m", Kind.MERGE, "s"), sink("o", "m"))
    fails("exactly one input", src("s"), src("t"), op("m", Kind.MAP, "s", "t"), sink("o", "m"))
    fails(
        "window >= 1", src("s"), op("k", Kind.KEY_BY, "s"), op("g", Kind.GROUP, "k"), sink("o", "g")
    )
    fails("needs a function", src("s"), op("m", Kind.MAP, "s", fn=None), sink("o", "m"))
    fails(
        "has 1 port",
        src("s"),
        Node("m", Kind.MAP, (Port("s", 1),), fn=ident),
        sink("o", "m"),
    )


def test_duplicate_ids_and_sink_names() -> None:
    fails("duplicate node ids", src("s"), src("s"), sink("o", "s"))
    fails(
        "sink names must be unique",
        src("s"),
        op("b", Kind.BROADCAST, "s", ports=2),
        sink("o", "b"),
        Node("p", Kind.SINK, (Port("b", 1),), endpoint=_Snk("out")),
    )


def test_segments_split_at_sources_groupings_merges_and_after_aggregates() -> None:
    g = graph(
        src("s"),
        op("f", Kind.FLAT_MAP, "s"),
        op("k", Kind.KEY_BY, "f"),
        op("g", Kind.GROUP, "k", window=2),
        op("m", Kind.MAP, "g"),
        op("k2", Kind.KEY_BY, "m"),
        op("a", Kind.AGGREGATE, "k2", aggregation=Aggregation(Tumbling(100))),
        op("x", Kind.MAP, "a"),
        sink("o", "x"),
    )
    segments = g.segments()
    assert segments.of_node == {
        "s": "s",
        "f": "s",
        "k": "s",
        "g": "g",
        "m": "g",
        "k2": "g",
        "a": "a",
        "x": "x",
        "o": "x",
    }
    assert segments.inbound == {"s": (), "g": ("s",), "a": ("g",), "x": ("a",)}


def test_merge_segment_has_every_input_segment_inbound() -> None:
    g = Graph(
        "g",
        (
            src("s"),
            Node("t", Kind.SOURCE, endpoint=_Src()),
            op("m", Kind.MERGE, "s", "t"),
            sink("o", "m"),
        ),
    )
    assert g.segments().inbound == {"s": (), "t": (), "m": ("s", "t")}
    assert g.node("m").kind is Kind.MERGE
    with pytest.raises(PipelineError, match="no node 'zz'"):
        g.node("zz")


def test_tombstones_reach_what_follows_a_grouping_until_an_aggregate() -> None:
    g = graph(
        src("s"),
        op("k", Kind.KEY_BY, "s"),
        op("g", Kind.GROUP, "k", window=2),
        op("b", Kind.BROADCAST, "g", ports=2),
        op("m", Kind.MAP, "b"),
        Node("k2", Kind.KEY_BY, (Port("b", 1),), fn=ident),
        op("a", Kind.AGGREGATE, "k2", aggregation=Aggregation(Tumbling(100))),
        sink("repaired", "m", "o1"),
        sink("final", "a", "o2"),
        src("t"),
        op("plain", Kind.MAP, "t"),
        sink("direct", "plain", "o3"),
    )
    assert g.validate() is g
    assert [g.retracts(n) for n in ("repaired", "final", "direct")] == [True, False, False]
