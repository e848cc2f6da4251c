"""The services of one pipeline graph, built the same way in-process and from the CLI.

`pipeline.run()` starts them beside its Spark queries (the embedded default); ``flamepipe
acker`` and ``flamepipe barrier`` start them as processes of their own (docker-compose, or
several acker instances splitting the shards). Both paths build them here, so both agree
on fronts, segments, topics and transactional ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from framework.acker.service import AckerService
from framework.barrier.service import BarrierService
from framework.config import Settings
from framework.core.graph import Graph
from framework.core.time import front_id
from framework.errors import PipelineError
from framework.kafka.admin import TopicSpec, ensure_topics
from framework.kafka.endpoints import kafka_sources, sink_nodes
from framework.kafka.mintime import MinTimeView
from framework.wire.topics import Topics

__all__ = [
    "acker_for",
    "barrier_for",
    "current_epoch",
    "pre_topic_spec",
    "source_fronts",
    "view_for",
]


def source_fronts(bootstrap: str, graph: Graph) -> list[int]:
    """The front id of every source partition (creating or checking the source topics)."""
    return [
        front_id(source.topic, p)
        for source in kafka_sources(graph).values()
        for p in range(source.prepare(bootstrap))
    ]


def pre_topic_spec(app: str, sink_node: str, epoch: int = 0) -> TopicSpec:
    """The pre-barrier topic of ``sink_node``: one partition, so the barrier reads it whole."""
    return TopicSpec(Topics(app, epoch).pre(sink_node), 1)


def current_epoch(settings: Settings, app: str) -> int:
    """The epoch ``app`` runs in (ZooKeeper; 0 before its first replay or recovery)."""
    from framework.coordination import Epochs

    epochs = Epochs(settings.zookeeper, app)
    try:
        record = epochs.current()
    finally:
        epochs.close()
    return 0 if record is None else record.epoch


def acker_for(
    settings: Settings,
    graph: Graph,
    partitions: Sequence[int] | None = None,
    *,
    epoch: int = 0,
) -> AckerService:
    """The acker of ``graph`` in ``epoch`` owning ``partitions`` of the acks topic (all)."""
    bootstrap = settings.kafka_bootstrap
    inbound = graph.segments().inbound
    fronts = source_fronts(bootstrap, graph)
    return AckerService(
        bootstrap,
        graph.name,
        inbound,
        fronts,
        settings.acker_shards,
        partitions=partitions,
        epoch=epoch,
    )


def view_for(settings: Settings, graph: Graph, epoch: int = 0) -> MinTimeView:
    """A min-time view of every segment of ``graph`` in ``epoch``."""
    segments = tuple(graph.segments().inbound)
    return MinTimeView(
        settings.kafka_bootstrap, graph.name, settings.acker_shards, segments, epoch=epoch
    )


def barrier_for(
    settings: Settings,
    graph: Graph,
    sink_node: str,
    *,
    view: MinTimeView | None = None,
    exactly_once: bool = True,
    epoch: int = 0,
) -> BarrierService:
    """The barrier of ``sink_node`` in ``epoch``, its pre-barrier topic created if missing."""
    if sink_node not in sink_nodes(graph):
        known = ", ".join(sink_nodes(graph)) or "none"
        raise PipelineError(f"{graph.name!r} has no sink {sink_node!r} (sinks: {known})")
    bootstrap = settings.kafka_bootstrap
    ensure_topics(bootstrap, [pre_topic_spec(graph.name, sink_node, epoch)])
    return BarrierService.for_graph(
        bootstrap,
        graph,
        sink_node,
        settings.acker_shards,
        view=view,
        exactly_once=exactly_once,
        epoch=epoch,
    )
