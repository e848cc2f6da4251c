"""The services of one pipeline graph, built the same way in-process and from the CLI.

`pipeline.run()` starts them beside its Spark queries (the embedded default); ``flamepipe
acker`` and ``flamepipe barrier`` start them as processes of their own (docker-compose, or
several acker instances splitting the shards). Both paths build a `ServiceSet` here, so
both agree on fronts, segments, topics and transactional ids, and start, check and stop
them the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Self

from framework.acker.service import AckerService
from framework.barrier.service import BarrierService
from framework.config import Settings
from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.core.graph import Graph
from framework.core.time import front_id
from framework.errors import ConfigError, FlamepipeError, PipelineError
from framework.kafka.admin import ensure_topics
from framework.kafka.endpoints import KafkaSink, kafka_sources, sink_nodes
from framework.kafka.mintime import MinTimeView
from framework.kafka.topics import pre_topic_spec
from framework.runners.keys import install_keys
from framework.runners.recovery import StallWatch
from framework.service import Service
from framework.snapshots.backends.factory import open_backend
from framework.snapshots.coordinator import SnapshotCoordinator


def source_fronts(bootstrap: str, graph: Graph) -> list[int]:
    """The front id of every source partition (creating or checking the source topics)."""
    return [
        front_id(source.topic, p)
        for source in kafka_sources(graph).values()
        for p in range(source.prepare(bootstrap))
    ]


def current_epoch(settings: Settings, app: str) -> int:
    """The epoch ``app`` runs in (ZooKeeper; 0 before its first replay or recovery)."""
    from framework.coordination.epochs import read_epoch

    record = read_epoch(settings.zookeeper, app)
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
        delta_ms=graph.delta_ms,
        max_future_ms=settings.max_future_ms,
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
    instance: int = 0,
) -> BarrierService:
    """Barrier ``instance`` of ``sink_node`` in ``epoch``, its pre-barrier topic created if
    missing."""
    if sink_node not in sink_nodes(graph):
        known = ", ".join(sink_nodes(graph)) or "none"
        raise PipelineError(f"{graph.name!r} has no sink {sink_node!r} (sinks: {known})")
    bootstrap = settings.kafka_bootstrap
    barriers = barrier_count(graph, sink_node)
    ensure_topics(bootstrap, [pre_topic_spec(graph.name, sink_node, epoch, barriers)])
    return BarrierService.for_graph(
        bootstrap,
        graph,
        sink_node,
        settings.acker_shards,
        view=view,
        exactly_once=exactly_once,
        epoch=epoch,
        instance=instance,
    )


def check_instance(graph: Graph, sinks: Sequence[str], instance: int | None) -> None:
    """`ConfigError` unless every sink of ``sinks`` has barrier ``instance`` (None: all)."""
    for sink in sinks:
        count = barrier_count(graph, sink)
        if instance is not None and not 0 <= instance < count:
            raise ConfigError(
                f"sink {sink} has {count} barrier instance(s), 0..{count - 1}: "
                f"--instance {instance} is not one of them"
            )


def barrier_count(graph: Graph, sink_node: str) -> int:
    """How many barrier instances sink ``sink_node`` has (`KafkaSink` ``barriers``)."""
    endpoint = graph.node(sink_node).endpoint
    return endpoint.barriers if isinstance(endpoint, KafkaSink) else 1


def coordinator_for(
    settings: Settings, graph: Graph, epoch: int, view: MinTimeView | None = None
) -> SnapshotCoordinator:
    """The snapshot coordinator of ``graph`` in ``epoch`` (backend and interval: settings)."""
    return SnapshotCoordinator(
        settings.kafka_bootstrap,
        graph,
        epoch,
        open_backend(settings, graph.name),
        SnapshotRegistry(settings.zookeeper, graph.name),
        view=view,
        interval_ms=settings.snapshot_interval_ms,
        shards=settings.acker_shards,
    )


@dataclass
class ServiceSet:
    """The services of one pipeline in one epoch, started, checked and stopped together.

    `start`:

    1. Start each service's thread in `all` order: the min-time view first (the others
       read it), then the acker, the snapshot coordinator, the stall watch, the barriers.
    2. Wait until each is ready. If one fails, stop those started, in reverse order, and
       raise its failure.

    `launch` is step 1 and `wait_ready` step 2, for a caller with something to do while
    the services open (the Spark runner starts its stage tasks in between).
    `stop` stops every service in reverse order and raises the first failure only once all
    are stopped; `check` raises the first failure of a running one.
    """

    view: MinTimeView | None = None
    acker: AckerService | None = None
    coordinator: SnapshotCoordinator | None = None
    stall_watch: StallWatch | None = None
    barriers: list[BarrierService] = field(default_factory=list)

    def all(self) -> list[Service]:
        """Every service, in start order."""
        singles = (self.view, self.acker, self.coordinator, self.stall_watch)
        return [s for s in singles if s is not None] + list(self.barriers)

    def start(self) -> Self:
        """Steps 1-2 above; returns self."""
        return self.launch().wait_ready()

    def launch(self) -> Self:
        """Step 1 above; returns self. If a thread cannot start, those started stop."""
        return self._each(Service.start)

    def wait_ready(self) -> Self:
        """Step 2 above; returns self."""
        return self._each(Service.wait_ready)

    def _each(self, step: Callable[[Service], object]) -> Self:
        """``step`` on every service in `all` order; on a failure all stop, then it raises."""
        try:
            for service in self.all():
                step(service)
        except BaseException:
            self._stop_started()
            raise
        return self

    def _stop_started(self) -> None:
        for service in reversed(self.all()):  # stopping one never started does nothing
            service.stop_quietly()

    def check(self) -> None:
        """Raise the failure of the first service that stopped on one."""
        for service in self.all():
            service.check()

    def stop(self) -> None:
        """Stop every service (reverse order); then raise the first failure, if any."""
        failure: FlamepipeError | None = None
        for service in reversed(self.all()):
            try:
                service.stop()
            except FlamepipeError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def stop_quietly(self) -> None:
        """`stop`, for cleanup after another failure: the services' own errors are dropped."""
        with contextlib.suppress(FlamepipeError):
            self.stop()


def embedded_services(settings: Settings, graph: Graph, epoch: int = 0) -> ServiceSet:
    """Everything beside the stage queries, in the driver: view, acker, snapshots, stall
    watch, every barrier instance of every sink (`pipeline.run()` with embedded
    services)."""
    install_keys(settings)
    view = view_for(settings, graph, epoch)
    return ServiceSet(
        view=view,
        acker=acker_for(settings, graph, epoch=epoch),
        coordinator=coordinator_for(settings, graph, epoch, view),
        stall_watch=StallWatch(settings, graph, epoch, view),
        barriers=[
            barrier_for(settings, graph, sink, view=view, epoch=epoch, instance=k)
            for sink in sink_nodes(graph)
            for k in range(barrier_count(graph, sink))
        ],
    )


def acker_services(
    settings: Settings,
    graph: Graph,
    epoch: int,
    partitions: Sequence[int] | None = None,
) -> ServiceSet:
    """``flamepipe acker``: the acker of ``partitions`` (all: None); the instance owning
    shard 0 also takes and commits the snapshots and watches for stalls."""
    install_keys(settings)
    acker = acker_for(settings, graph, partitions, epoch=epoch)
    if partitions is not None and 0 not in partitions:
        return ServiceSet(acker=acker)
    view = view_for(settings, graph, epoch)
    return ServiceSet(
        view=view,
        acker=acker,
        coordinator=coordinator_for(settings, graph, epoch, view),
        stall_watch=StallWatch(settings, graph, epoch, view),
    )


def barrier_services(
    settings: Settings,
    graph: Graph,
    epoch: int,
    sinks: Sequence[str],
    *,
    exactly_once: bool = True,
    instance: int | None = None,
) -> ServiceSet:
    """``flamepipe barrier``: the barriers of ``sinks`` (every instance, or ``instance``
    only) and the min-time view they read."""
    install_keys(settings)
    check_instance(graph, sinks, instance)
    view = view_for(settings, graph, epoch)
    barriers = [
        barrier_for(
            settings, graph, sink, view=view, exactly_once=exactly_once, epoch=epoch, instance=k
        )
        for sink in sinks
        for k in (range(barrier_count(graph, sink)) if instance is None else (instance,))
    ]
    return ServiceSet(view=view, barriers=barriers)
