"""A barrier service made from a pipeline graph (no Kafka is touched before `start`)."""

from __future__ import annotations

import pytest

from framework.barrier import BarrierService
from framework.core.graph import Kind
from framework.core.ids import service_node_id
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
    assert barrier.node == service_node_id("shop", sink.id, "barrier") < 2**63
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
