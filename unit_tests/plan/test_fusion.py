"""Which stages fuse (`framework.plan.fusion`)."""

from __future__ import annotations

from connectors import KafkaSink, KafkaSource
from framework import Pipeline, Tumbling
from framework.plan.fusion import fuse
from framework.plan.stages import plan_stages


def _stages(pipeline: Pipeline) -> tuple:  # type: ignore[type-arg]
    graph = pipeline.graph()
    sources = {n.id: n.endpoint.topic for n in graph.nodes if n.kind.name == "SOURCE"}
    return plan_stages(graph, sources)


def test_a_source_stage_and_the_aggregate_it_alone_feeds_fuse() -> None:
    p = Pipeline("wc")
    words = p.source(KafkaSource("lines")).flat_map(str.split).key_by(lambda w: w)
    words.aggregate(Tumbling(1000), reduce=lambda a, b: a + b).map(str).sink(KafkaSink("out"))
    stages = _stages(p)
    alone, fused = fuse(stages)
    (pair,) = fused
    assert alone == ()
    assert (pair.map.is_source, pair.reduce.entry) == (True, stages[1].entry)
    assert pair.id == f"{stages[0].id}+{stages[1].id}"


def test_a_source_that_also_feeds_a_sink_or_a_keyed_stage_fed_twice_does_not_fuse() -> None:
    p = Pipeline("wc")
    lines, copy = p.source(KafkaSource("lines")).broadcast(2)
    lines.key_by(len).group(2).map(str).sink(KafkaSink("out"))
    copy.sink(KafkaSink("raw"))
    assert fuse(_stages(p))[1] == ()

    q = Pipeline("two")
    first = q.source(KafkaSource("a")).key_by(len)
    second = q.source(KafkaSource("b")).key_by(len)
    first.merge(second).group(2).map(str).sink(KafkaSink("out"))
    stages = _stages(q)
    alone, fused = fuse(stages)
    assert fused == () and alone == stages
