"""The logical graph of a pipeline: nodes (operations), edges, validation, segments.

A node reads from ports of upstream nodes; every node has one output port except
``broadcast``, which has one per copy. Nodes are kept in the order they were added, which
the builder makes topological; validation checks it anyway.

Segments (the tracker paper) partition the nodes for the acker. An item in flight belongs to the
segment of the node it travels to. A new segment starts at a source, at a ``group`` or
``aggregate`` (a keyed shuffle: a new Spark stage), at a ``merge`` or a ``loop``, and right
after an ``aggregate`` (whose outputs are released by min time, so they must be tracked
apart from its inputs). Every other node joins the segment of its single input.

A loop (docs/decisions/cyclic-dataflows.md) is the one cycle a graph may hold: a ``loop``
node merges its input with what its ``feedback`` node sends back, and that second input is
the only edge that may point at a node listed later. The segments on the cycle form one
loop for the tracker (`framework.core.acker.tracker.components`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from framework.core.calls import AsyncCall
from framework.core.meta import Meta
from framework.core.time import DEFAULT_DELTA_MS
from framework.core.windows import Aggregation
from framework.errors import PipelineError


class Source(ABC):
    """Descriptor of where a pipeline's records come from (a topic, a list, ...)."""

    @property
    @abstractmethod
    def name(self) -> str:
        """A name for messages and for the front ids of its partitions."""


class Sink(ABC):
    """Descriptor of where a barrier's bundles go."""

    @property
    @abstractmethod
    def name(self) -> str:
        """A name, unique among the sinks of one pipeline."""

    def encode(self, payload: object) -> Any:
        """What the last stage sends the barrier for ``payload``: the output record when
        the sink writes records of its own (a Kafka sink: ``(key, value)`` bytes), so the
        barrier only moves bytes and a payload it could not write is a dead letter at the
        stage; ``payload`` itself by default. Raises `PipelineError` if it cannot."""
        return payload

    def encode_item(self, meta: Meta, payload: object) -> Any:
        """What the last stage sends the barrier for the item ``meta``: `encode` by
        default; a sink whose records carry the item's meta and tag makes them here, where
        the work scales with the stage's tasks rather than in its one barrier."""
        return self.encode(payload)

    def encode_items(self, metas: Sequence[Meta], payloads: Sequence[Any]) -> list[Any]:
        """`encode_item` of each item, in bulk (a sink may share work across them); raises
        as `encode_item` would for any one of them."""
        return [self.encode_item(m, p) for m, p in zip(metas, payloads, strict=True)]


class Kind(StrEnum):
    """What a node does."""

    SOURCE = "source"
    MAP = "map"
    MAP_ASYNC = "map_async"
    FLAT_MAP = "flat_map"
    FILTER = "filter"
    KEY_BY = "key_by"
    GROUP = "group"
    AGGREGATE = "aggregate"
    MERGE = "merge"
    BROADCAST = "broadcast"
    SINK = "sink"
    LOOP = "loop"
    FEEDBACK = "feedback"
    CONVERGE = "converge"


_FUNCTION_KINDS = frozenset(
    {Kind.MAP, Kind.MAP_ASYNC, Kind.FLAT_MAP, Kind.FILTER, Kind.KEY_BY, Kind.CONVERGE}
)
_KEYED_INPUT = frozenset({Kind.GROUP, Kind.AGGREGATE, Kind.CONVERGE})
_SEGMENT_HEADS = frozenset(
    {Kind.SOURCE, Kind.GROUP, Kind.AGGREGATE, Kind.MERGE, Kind.LOOP, Kind.CONVERGE}
)
KEYED_STATE = frozenset({Kind.GROUP, Kind.AGGREGATE, Kind.CONVERGE})
"""Nodes whose stage keeps state per key in a changelog: one hash unit per partition."""
BUCKETED = frozenset({Kind.AGGREGATE, Kind.CONVERGE})
"""Keyed-state nodes whose changelog holds one bucket per key, which a snapshot cuts as an
image (`framework.snapshots.copies`); a grouping's holds one record per item."""
# Inside a loop: what emits only once min time passes would wait for itself.
_NOT_IN_LOOPS = frozenset({Kind.AGGREGATE})


class Port(NamedTuple):
    """Output port ``port`` of node ``node``."""

    node: str
    port: int = 0


@dataclass(frozen=True, slots=True)
class Node:
    """One logical operation; only the fields of its kind are set.

    ``fn`` is the user function of map, map_async, flat_map, filter and key_by; ``window``
    the group's window; ``ports`` the broadcast's copies; ``endpoint`` the source or sink
    descriptor; ``aggregation`` the aggregate's `Aggregation`; ``call`` how map_async
    calls its function; ``batch`` that map, flat_map or filter's ``fn`` takes a column of
    payloads (`framework.core.batches`); ``max_rounds`` how many times a feedback sends
    an item round its loop.
    """

    id: str
    kind: Kind
    inputs: tuple[Port, ...] = ()
    fn: Callable[[Any], Any] | None = None
    window: int = 0
    ports: int = 1
    endpoint: Source | Sink | None = None
    aggregation: Aggregation | None = None
    label: str = ""
    call: AsyncCall | None = None
    batch: bool = False  # map, flat_map, filter: ``fn`` takes a column (`core.batches`)
    max_rounds: int = 0  # feedback: the rounds an item may go

    def describe(self) -> str:
        """The node for error messages: its id and user label."""
        return f"{self.id} ({self.label})" if self.label else self.id


@dataclass(frozen=True, slots=True)
class Segments:
    """Acker segments: each node's segment, and each segment's inbound segments."""

    of_node: Mapping[str, str]
    inbound: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Graph:
    """A named pipeline graph; ``delta_ms`` is its global-time slot width."""

    name: str
    nodes: tuple[Node, ...]
    delta_ms: int = DEFAULT_DELTA_MS

    def node(self, node_id: str) -> Node:
        """The node with id ``node_id``."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise PipelineError(f"pipeline {self.name!r} has no node {node_id!r}")

    def by_kind(self, kind: Kind) -> Iterator[Node]:
        """Nodes of ``kind`` in graph order."""
        return (node for node in self.nodes if node.kind is kind)

    def consumers(self) -> dict[Port, Node]:
        """The node reading each consumed output port."""
        return {port: node for node in self.nodes for port in node.inputs}

    def retracts(self, node_id: str) -> bool:
        """Whether tombstones can reach node ``node_id``: a grouping is upstream of it with
        no aggregate in between. A grouping's repairs are the only source of tombstones,
        and an aggregate absorbs them (it emits only what min time has passed, which no
        tombstone can follow). Output no tombstone reaches is final as it arrives
        (`framework.barrier.blocks`)."""
        nodes = {n.id: n for n in self.nodes}
        todo, seen = [p.node for p in self.node(node_id).inputs], set()
        while todo:
            upstream = nodes[todo.pop()]
            if upstream.kind is Kind.GROUP:
                return True
            if upstream.id not in seen and upstream.kind is not Kind.AGGREGATE:
                seen.add(upstream.id)
                todo.extend(p.node for p in upstream.inputs)
        return False

    def validate(self) -> Graph:
        """This graph, or a `PipelineError` saying what is wrong and how to fix it."""
        _validate(self)
        return self

    def segments(self) -> Segments:
        """The acker segments of a valid graph (see the module docstring)."""
        self.validate()
        of_node: dict[str, str] = {}
        heads: list[Node] = []
        kinds = {node.id: node.kind for node in self.nodes}
        for node in self.nodes:  # a loop's feedback, listed later, is not needed here
            after_aggregate = any(kinds[port.node] is Kind.AGGREGATE for port in node.inputs)
            if node.kind in _SEGMENT_HEADS or after_aggregate:
                of_node[node.id] = node.id
                heads.append(node)
            else:
                of_node[node.id] = of_node[node.inputs[0].node]
        inbound = {
            head.id: tuple(dict.fromkeys(of_node[port.node] for port in head.inputs))
            for head in heads
        }
        return Segments(of_node, inbound)


def _validate(graph: Graph) -> None:
    if not graph.name:
        raise PipelineError("a pipeline needs a non-empty name (it seeds the op ids)")
    if graph.delta_ms < 1:
        raise PipelineError(f"delta_ms must be >= 1, got {graph.delta_ms}")
    ids = [node.id for node in graph.nodes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise PipelineError(f"duplicate node ids: {duplicates}")
    if not any(node.kind is Kind.SOURCE for node in graph.nodes):
        raise PipelineError(f"pipeline {graph.name!r} has no source: start it with .source()")
    if not any(node.kind is Kind.SINK for node in graph.nodes):
        raise PipelineError(f"pipeline {graph.name!r} has no sink: end it with .sink()")
    nodes = {node.id: node for node in graph.nodes}
    for node in graph.nodes:
        _check_node(node, nodes)
    _check_acyclic(graph)
    _check_loops(graph)
    _check_consumers(graph)
    _check_keys(graph)
    _check_combinable(graph)
    _check_async_calls(graph)
    _check_converge(graph)
    _check_names(graph)


def _check_node(node: Node, nodes: Mapping[str, Node]) -> None:
    for port in node.inputs:
        upstream = nodes.get(port.node)
        if upstream is None:
            raise PipelineError(f"{node.describe()} reads unknown upstream {port.node!r}")
        if not 0 <= port.port < upstream.ports:
            raise PipelineError(
                f"{node.describe()} reads port {port.port} of {upstream.describe()}, "
                f"which has {upstream.ports} port(s)"
            )
    arity = len(node.inputs)
    if node.kind is Kind.SOURCE and arity:
        raise PipelineError(f"source {node.describe()} cannot have inputs")
    if node.kind is Kind.MERGE and arity < 2:
        raise PipelineError(f"merge {node.describe()} needs at least two inputs, got {arity}")
    if node.kind is Kind.LOOP and arity != 2:
        raise PipelineError(
            f"loop {node.describe()} is never closed: call close(stream) on the Loop that "
            "Stream.loop() returned, with the stream that goes round again"
        )
    if node.kind is Kind.FEEDBACK and node.max_rounds < 1:
        raise PipelineError(f"loop {node.describe()} needs max_rounds >= 1, got {node.max_rounds}")
    if node.kind not in (Kind.SOURCE, Kind.MERGE, Kind.LOOP) and arity != 1:
        raise PipelineError(f"{node.describe()} needs exactly one input, got {arity}")
    if node.kind in _FUNCTION_KINDS and not callable(node.fn):
        raise PipelineError(f"{node.describe()} needs a function")
    if node.kind is Kind.GROUP and node.window < 1:
        raise PipelineError(f"group {node.describe()} needs window >= 1, got {node.window}")
    if node.kind is Kind.BROADCAST and node.ports < 2:
        raise PipelineError(f"broadcast {node.describe()} needs >= 2 copies, got {node.ports}")
    if node.kind is not Kind.BROADCAST and node.ports != 1:
        raise PipelineError(f"only broadcast has several ports, not {node.describe()}")
    if node.kind is Kind.SOURCE and not isinstance(node.endpoint, Source):
        raise PipelineError(f"source {node.describe()} needs a Source, got {node.endpoint!r}")
    if node.kind is Kind.SINK and not isinstance(node.endpoint, Sink):
        raise PipelineError(f"sink {node.describe()} needs a Sink, got {node.endpoint!r}")
    if node.kind is Kind.AGGREGATE and node.aggregation is None:
        raise PipelineError(f"aggregate {node.describe()} needs an aggregation")
    if node.kind is Kind.MAP_ASYNC and node.call is None:
        raise PipelineError(f"map_async {node.describe()} needs its call options")


def _check_acyclic(graph: Graph) -> None:
    """Nodes must come after their inputs, but for a loop's feedback; any other cycle is
    reported with its path."""
    position = {node.id: i for i, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        for index, port in enumerate(node.inputs):
            if node.kind is Kind.LOOP and index == 1:
                continue  # the feedback: `_check_loops`
            if position[port.node] >= position[node.id]:
                path = _cycle_through(graph, node.id)
                if path:
                    raise PipelineError(
                        f"cycle {' -> '.join(path)}: a cycle needs a loop: use "
                        "Stream.loop() and close the loop with the stream that goes round"
                    )
                raise PipelineError(
                    f"{node.describe()} is listed before its input {port.node!r}: "
                    "list nodes in topological order"
                )


def _check_loops(graph: Graph) -> None:
    """A loop is closed by a feedback that its own body feeds, and holds nothing that
    waits for min time (docs/decisions/cyclic-dataflows.md)."""
    nodes = {node.id: node for node in graph.nodes}
    for loop in graph.by_kind(Kind.LOOP):
        feedback = nodes[loop.inputs[1].node]
        if feedback.kind is not Kind.FEEDBACK:
            raise PipelineError(
                f"loop {loop.describe()}: its second input must be its feedback, not "
                f"{feedback.describe()}"
            )
        body = _downstream(graph, loop.id) & _upstream(graph, feedback.id)
        if loop.id not in body:
            raise PipelineError(
                f"loop {loop.describe()} is closed with a stream that does not come from "
                "the loop: close it with a stream derived from loop.stream"
            )
        for node in graph.nodes:
            if node.id in body and node.kind in _NOT_IN_LOOPS:
                raise PipelineError(
                    f"{node.describe()} is inside loop {loop.describe()}: an aggregate "
                    "emits once min time passes a slot, which no item still going round "
                    "lets it do; aggregate the loop's output after it"
                )
    for feedback in graph.by_kind(Kind.FEEDBACK):
        readers = [n for n in graph.nodes if Port(feedback.id) in n.inputs]
        if [n.kind for n in readers] != [Kind.LOOP]:
            raise PipelineError(f"feedback {feedback.describe()} must feed its loop only")


def _downstream(graph: Graph, start: str) -> set[str]:
    """Every node reachable from ``start`` along edges (``start`` only if on a cycle)."""
    readers: dict[str, list[str]] = {node.id: [] for node in graph.nodes}
    for node in graph.nodes:
        for port in node.inputs:
            readers[port.node].append(node.id)
    seen: set[str] = set()
    todo = list(readers[start])
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(readers[current])
    return seen


def _upstream(graph: Graph, start: str) -> set[str]:
    """Every node ``start`` is reachable from, and ``start`` itself."""
    nodes = {node.id: node for node in graph.nodes}
    seen = {start}
    todo = [port.node for port in nodes[start].inputs]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(port.node for port in nodes[current].inputs)
    return seen


def _cycle_through(graph: Graph, start: str) -> list[str]:
    """A path start -> ... -> start along input edges reversed, or [] if none."""
    downstream: dict[str, list[str]] = {node.id: [] for node in graph.nodes}
    for node in graph.nodes:
        for port in node.inputs:
            downstream[port.node].append(node.id)
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        current, path = stack.pop()
        for nxt in downstream[current]:
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return []


def _check_consumers(graph: Graph) -> None:
    readers: dict[Port, list[str]] = {}
    for node in graph.nodes:
        for port in node.inputs:
            readers.setdefault(port, []).append(node.id)
    for port, ids in readers.items():
        if len(ids) > 1:
            raise PipelineError(
                f"output {port.port} of {port.node!r} is read by {ids}: "
                "use broadcast(n) to send a stream to several operations"
            )
    for node in graph.nodes:
        if node.kind is Kind.SINK:
            continue
        for index in range(node.ports):
            if Port(node.id, index) not in readers:
                raise PipelineError(
                    f"output {index} of {node.describe()} goes nowhere: end it with .sink()"
                )


def _check_keys(graph: Graph) -> None:
    """Only key_by (or a merge of keyed streams) may feed group and aggregate."""
    keyed: dict[str, bool] = {}
    for node in graph.nodes:
        # A loop's feedback is listed later; it is checked as the feedback node itself.
        reads = node.inputs[:1] if node.kind is Kind.LOOP else node.inputs
        inputs = [keyed[port.node] for port in reads]
        if node.kind is Kind.LOOP and inputs[0]:
            raise PipelineError(
                f"loop {node.describe()} reads a keyed stream: loop over the stream before "
                "key_by() and key it inside the loop"
            )
        if node.kind is Kind.MERGE:
            if any(inputs) and not all(inputs):
                raise PipelineError(
                    f"merge {node.describe()} mixes keyed and unkeyed streams: "
                    "key_by every input or none"
                )
            keyed[node.id] = all(inputs)
            continue
        if node.kind in _KEYED_INPUT and not inputs[0]:
            raise PipelineError(
                f"{node.kind} {node.describe()} needs a keyed input: call key_by() before it"
            )
        if node.kind not in _KEYED_INPUT and inputs and inputs[0]:
            raise PipelineError(
                f"{node.describe()} reads a keyed stream: follow key_by() with group() "
                "or aggregate()"
            )
        keyed[node.id] = node.kind is Kind.KEY_BY


def _check_names(graph: Graph) -> None:
    sinks = [node.endpoint.name for node in graph.by_kind(Kind.SINK) if node.endpoint]
    repeated = sorted({name for name in sinks if sinks.count(name) > 1})
    if repeated:
        raise PipelineError(f"sink names must be unique, repeated: {repeated}")


def _check_async_calls(graph: Graph) -> None:
    """A grouping's repairs retract items with tombstones: a tombstone must carry the value
    its item had, which a second call of a service need not return."""
    for node in graph.by_kind(Kind.MAP_ASYNC):
        grouping = _upstream_grouping(graph, node)
        if grouping is not None:
            raise PipelineError(
                f"{node.describe()} follows {grouping.describe()}, whose repairs retract "
                "items with tombstones that would call the service again and may get "
                "another answer: call the service before the grouping"
            )


def _check_converge(graph: Graph) -> None:
    """A join cannot take a payload back: no tombstone may reach a converge."""
    for node in graph.by_kind(Kind.CONVERGE):
        if graph.retracts(node.id):
            raise PipelineError(
                f"{node.describe()} follows a grouping whose repairs retract items with "
                "tombstones, which a join cannot undo: converge before the grouping, or "
                "aggregate between them"
            )


def _upstream_grouping(graph: Graph, node: Node) -> Node | None:
    """A grouping upstream of ``node``, if any."""
    nodes = {n.id: n for n in graph.nodes}
    todo, seen = [p.node for p in node.inputs], set()
    while todo:
        upstream = nodes[todo.pop()]
        if upstream.kind is Kind.GROUP:
            return upstream
        if upstream.id not in seen:
            seen.add(upstream.id)
            todo.extend(p.node for p in upstream.inputs)
    return None


def _check_combinable(graph: Graph) -> None:
    """A pre-reduced value cannot drop one payload again: no tombstones may reach it."""
    for node in graph.nodes:
        if node.aggregation is None or not node.aggregation.combinable:
            continue
        upstream = _upstream_grouping(graph, node)
        if upstream is not None:
            raise PipelineError(
                f"{node.describe()} is combinable but {upstream.describe()} upstream "
                "retracts items with tombstones, which a pre-reduced value cannot undo: "
                "drop combinable=True"
            )
