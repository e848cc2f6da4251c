"""The services a Spark run starts beside its queries: acker, min-time view, barriers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from framework.config import Settings
from framework.core.graph import Graph, Kind
from framework.services.acker import AckerService
from framework.services.barrier import BarrierService
from framework.services.mintime import MinTimeView

__all__ = ["start_services"]


def start_services(
    settings: Settings, graph: Graph, fronts: Sequence[int]
) -> tuple[MinTimeView, list[Any]]:
    """Start and await the acker, the min-time view and one barrier per sink."""
    bootstrap, shards = settings.kafka_bootstrap, settings.acker_shards
    inbound = graph.segments().inbound
    acker = AckerService(bootstrap, graph.name, inbound, fronts, shards).start()
    view = MinTimeView(bootstrap, graph.name, shards, tuple(inbound)).start()
    barriers = [
        BarrierService.for_graph(bootstrap, graph, node.id, shards, view=view).start()
        for node in graph.by_kind(Kind.SINK)
    ]
    for service in (acker, view, *barriers):
        service.wait_ready()
    return view, [acker, *barriers]
