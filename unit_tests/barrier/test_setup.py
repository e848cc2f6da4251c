"""A barrier service made from a pipeline graph (no Kafka is touched before `start`)."""

from __future__ import annotations

import pytest

from framework.barrier.service import BarrierService
from framework.core.graph import Kind
from framework.errors import PipelineError
from framework.kafka.endpoints import KafkaSink, KafkaSource
from framework.pipeline import Pipeline
from framework.runners.inprocess.endpoints import ListSink, ListSource


def test_for_graph_finds_the_sinks_segment_topics_and_ids() -> None:
    pipeline = Pipeline("shop")
    stream = pipeline.source(KafkaSource("orders")).map(str.upper)
    stream.key_by(len).group(2).sink(KafkaSink("out"))
    graph = pipeline.graph()
    (sink,) = graph.by_kind(Kind.SINK)
    barrier = BarrierService.for_graph("kafka:9092", graph, sink.id, 3)
    assert barrier.segment == graph.segments().of_node[sink.id] != graph.nodes[0].id
    assert (barrier.pre, barrier.group) == (f"shop.{sink.id}.pre", f"shop.{sink.id}.barrier")
    assert barrier.sink.topic == "out" and barrier.shards == 3 and barrier.exactly_once
    assert not barrier.running and barrier.released_through() == 0


def test_for_graph_needs_a_kafka_sink_and_a_barrier_needs_min_times() -> None:
    pipeline = Pipeline("shop")
    pipeline.source(ListSource(["a"])).sink(ListSink())
    graph = pipeline.graph()
    (sink,) = graph.by_kind(Kind.SINK)
    with pytest.raises(PipelineError, match="not a KafkaSink"):
        BarrierService.for_graph("kafka:9092", graph, sink.id, 1)
    with pytest.raises(PipelineError, match="needs the pipeline's segments"):
        BarrierService("kafka:9092", "shop", sink.id, "s", KafkaSink("out"), shards=1)


def test_barrier_instances_have_their_own_names_and_ids() -> None:
    pipeline = Pipeline("shop")
    pipeline.source(KafkaSource("orders")).sink(KafkaSink("out", partitions=4, barriers=3))
    graph = pipeline.graph()
    (sink,) = graph.by_kind(Kind.SINK)
    first, second = (
        BarrierService.for_graph("kafka:9092", graph, sink.id, 1, instance=k) for k in (0, 2)
    )
    # Instance 0 keeps a single barrier's names; every instance commits in one group.
    assert first.transactional_id == first.group == second.group == f"shop.{sink.id}.barrier"
    assert second.transactional_id == f"shop.{sink.id}.barrier.2"
    assert first.name != second.name and second.instance == 2
    with pytest.raises(PipelineError, match=r"instances 0\.\.2, not 3"):
        BarrierService.for_graph("kafka:9092", graph, sink.id, 1, instance=3)


def test_a_sink_takes_1_to_64_barriers() -> None:
    for bad in (0, 65, "2"):
        with pytest.raises(PipelineError, match=r"barriers must be 1\.\.64"):
            KafkaSink("out", barriers=bad)  # type: ignore[arg-type]
    assert "barriers=2" in repr(KafkaSink("out", barriers=2))
    assert "barriers" not in repr(KafkaSink("out"))
