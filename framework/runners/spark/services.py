"""The services a Spark run starts beside its queries: acker, min-time view, barriers."""

from __future__ import annotations

from typing import Any

from framework.config import Settings
from framework.core.graph import Graph
from framework.kafka.endpoints import sink_nodes
from framework.kafka.mintime import MinTimeView
from framework.runners.assembly import acker_for, barrier_for, view_for

__all__ = ["start_services"]


def start_services(
    settings: Settings, graph: Graph, epoch: int = 0, *, embedded: bool = True
) -> tuple[MinTimeView, list[Any]]:
    """Start and await the min-time view and, if ``embedded``, the acker, the snapshot
    coordinator, the stall watch and the barriers.

    Not embedded: ``flamepipe acker`` (with the coordinator) and ``flamepipe barrier`` run
    them elsewhere; the driver still needs the view to prune grouping state.
    """
    from framework.runners.recovery import StallWatch
    from framework.runners.snapshots import coordinator_for

    view = view_for(settings, graph, epoch).start()
    services: list[Any] = []
    try:
        if embedded:
            services.append(acker_for(settings, graph, epoch=epoch).start())
            services.append(coordinator_for(settings, graph, epoch, view).start())
            services.append(StallWatch(settings, graph, epoch, view).start())
            services.extend(
                barrier_for(settings, graph, sink, view=view, epoch=epoch).start()
                for sink in sink_nodes(graph)
            )
        for service in (view, *services):
            service.wait_ready()
    except BaseException:
        for service in (*reversed(services), view):
            service.stop_quietly()
        raise
    return view, services
