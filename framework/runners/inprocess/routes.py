"""The physical plan of a graph for the in-process harness: operations, routes, fronts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from framework.core.aggregate import aggregator
from framework.core.barrier import Barrier
from framework.core.converge import Converge
from framework.core.graph import Graph, Kind, Node, Port, Segments
from framework.core.grouping import Grouping
from framework.core.ops import Operation, op_id_of
from framework.core.physical import stateless_operation
from framework.core.time import GlobalTime, front_id
from framework.core.windows import Count, Session, WindowAggregator
from framework.errors import PipelineError
from framework.runners.inprocess.columns import Chain, chain_from
from framework.runners.inprocess.endpoints import ListSink, ListSource

_NO_END = 1 << 40
"""A last heartbeat past any window: slots of ~350 years of 10 ms."""


@dataclass(slots=True)
class Front:
    """One source partition: its items in offset order and its heartbeat promises."""

    id: int
    target: str  # the node its items go to
    items: list[tuple[GlobalTime, object]]
    promise: list[int] = field(default_factory=list)  # promise[i]: min slot of items[i:]
    next: int = 0
    heartbeat: int = 0

    def __post_init__(self) -> None:
        low: int | None = None
        self.promise = [0] * len(self.items)
        for i in range(len(self.items) - 1, -1, -1):
            slot = self.items[i][0].slot
            low = slot if low is None else min(low, slot)
            self.promise[i] = low

    def promised(self, end: int) -> int:
        """The slot this front can heartbeat now: no remaining item is below it."""
        return self.promise[self.next] if self.next < len(self.items) else end


class Plan:
    """Everything static about one run: ops by node, where outputs go, fronts, segments."""

    def __init__(self, graph: Graph, *, columnar: bool = False) -> None:
        self.graph = graph.validate()
        self.segments: Segments = graph.segments()
        consumers = graph.consumers()
        self.kinds: dict[str, Kind] = {node.id: node.kind for node in graph.nodes}
        # routes[node][port] = the node reading that output port
        self.routes: dict[str, list[str]] = {
            node.id: [consumers[Port(node.id, p)].id for p in range(node.ports)]
            for node in graph.nodes
            if node.kind is not Kind.SINK
        }
        self.ops: dict[str, Operation] = {}
        self.groupings: dict[str, Grouping] = {}
        self.converges: dict[str, Converge] = {}
        self.aggregates: dict[str, WindowAggregator] = {}
        self.barriers: dict[str, Barrier] = {}
        self.sinks: dict[str, ListSink] = {}
        for node in graph.nodes:
            self._add(node)
        self.fronts = self._fronts()
        self.end = self._end_slot()
        # A source's target where a chain of stateless operations runs on columns.
        self.chains: dict[str, Chain] = {}
        for front in self.fronts if columnar else ():
            chain = chain_from(front.target, self.ops, self.routes)
            if chain is not None:
                self.chains[front.target] = chain

    def _add(self, node: Node) -> None:
        graph = self.graph
        if node.kind is Kind.GROUP:
            self.groupings[node.id] = Grouping(op_id_of(graph.name, node.id), node.window)
        elif node.kind is Kind.CONVERGE and node.fn is not None:
            join: Any = node.fn  # a node's fn is typed for one argument; a join takes two
            self.converges[node.id] = Converge(op_id_of(graph.name, node.id), join)
        elif node.kind is Kind.AGGREGATE and node.aggregation is not None:
            op_id = op_id_of(graph.name, node.id)
            self.aggregates[node.id] = aggregator(op_id, node.aggregation, graph.delta_ms)
        elif node.kind is Kind.SINK:
            if not isinstance(node.endpoint, ListSink):
                raise PipelineError(f"the in-process runner needs a ListSink at {node.id}")
            self.barriers[node.id] = Barrier()
            self.sinks[node.id] = node.endpoint
        elif node.kind is not Kind.SOURCE:
            self.ops[node.id] = stateless_operation(graph.name, node)

    def _fronts(self) -> list[Front]:
        fronts: list[Front] = []
        for node in self.graph.by_kind(Kind.SOURCE):
            source = node.endpoint
            if not isinstance(source, ListSource):
                raise PipelineError(f"the in-process runner needs a ListSource at {node.id}")
            for partition in range(source.partitions):
                items = [
                    (
                        GlobalTime.of_record(
                            r.timestamp_ms, source.topic, partition, r.offset, self.graph.delta_ms
                        ),
                        source.payload(r),
                    )
                    for r in source.partition(partition)
                ]
                target = self.routes[node.id][0]
                fronts.append(Front(front_id(source.topic, partition), target, items))
        ids = [front.id for front in fronts]
        if len(set(ids)) != len(ids):
            raise PipelineError("two sources share a topic: give each ListSource its own topic")
        return fronts

    def _end_slot(self) -> int:
        """A heartbeat past every window that holds an item: the input has ended."""
        last = max((gt.slot for f in self.fronts for gt, _ in f.items), default=0)
        span = 0
        for node in self.graph.by_kind(Kind.AGGREGATE):
            window = node.aggregation.window if node.aggregation else Count(1)
            if node.aggregation is not None and node.aggregation.event_time is not None:
                return _NO_END  # event times are known only to the extractor, at run time
            if isinstance(window, Session):
                span = max(span, window.gap_ms // self.graph.delta_ms)
            elif not isinstance(window, Count):
                span = max(span, window.size_ms // self.graph.delta_ms)
        return last + 1 + span

    def segment(self, node_id: str) -> str:
        """The segment of items travelling to ``node_id``."""
        return self.segments.of_node[node_id]
