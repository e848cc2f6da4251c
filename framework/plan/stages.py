"""Cutting a pipeline graph into stages joined by Kafka topics (engine-independent).

A stage is what one task runs over one input partition. Records cross a stage boundary,
and so a Kafka topic, exactly where a node needs its input partitioned by key (``group``,
``aggregate``, ``converge``: a *shuffle*), where they enter a loop (``loop``: its input and
what its feedback sends back meet in a topic of its own) and where they leave for a barrier
(``sink``: the pre-barrier topic). Everything else runs inside the stage that reaches it; a
node reachable from two stages (a ``merge`` and what follows it) runs in both, which is
sound because operations are deterministic.

A loop is a cycle of stages through Kafka (docs/decisions/cyclic-dataflows.md): the
stage that feeds the loop and the stage holding its ``feedback`` both leave by an exit
into the loop's topic, which the stage entered at the ``loop`` node reads. Its items are
not keyed: they go to the topic's partitions by their front, as into a pre-barrier topic,
so a replay lands them alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from framework.core.graph import Graph, Kind, Port
from framework.errors import PipelineError
from framework.wire.topics import Topics

_SHUFFLES = frozenset({Kind.GROUP, Kind.AGGREGATE, Kind.CONVERGE})
_HEADS = _SHUFFLES | {Kind.LOOP}  # the nodes that start a stage of their own, but sources


class ExitKind(StrEnum):
    """Where records leaving a stage go."""

    SHUFFLE = "shuffle"
    LOOP = "loop"
    SINK = "sink"


@dataclass(frozen=True, slots=True)
class Exit:
    """Records from an output port leave the stage for ``target`` through ``topic``."""

    target: str
    kind: ExitKind
    topic: str


@dataclass(frozen=True, slots=True)
class Stage:
    """One Spark query: reads ``topic`` into ``entry``, runs ``nodes``, leaves by ``exits``.

    ``entry`` is a source node (``topic`` is the user's input topic), a shuffle node
    (``topic`` is its shuffle topic) or a loop (its own topic, named as a shuffle's).
    ``nodes`` are in graph order, ``entry`` first.
    """

    entry: str
    topic: str
    nodes: tuple[str, ...]
    exits: Mapping[Port, Exit]
    is_source: bool

    @property
    def id(self) -> str:
        """The stage's id: its entry node's id (Kafka-name safe)."""
        return self.entry


def plan_stages(
    graph: Graph, source_topics: Mapping[str, str], epoch: int = 0
) -> tuple[Stage, ...]:
    """The stages of ``graph`` in ``epoch``; ``source_topics``: source node -> its topic."""
    graph.validate()
    topics = Topics(graph.name, epoch)
    kinds = {node.id: node.kind for node in graph.nodes}
    order = {node.id: i for i, node in enumerate(graph.nodes)}
    consumers = graph.consumers()
    stages: list[Stage] = []
    for node in graph.nodes:
        if node.kind is Kind.SOURCE:
            if node.id not in source_topics:
                raise PipelineError(f"source {node.describe()} has no topic")
            entry, topic = node.id, source_topics[node.id]
        elif node.kind in _HEADS:
            entry, topic = node.id, topics.shuffle(node.id)
        else:
            continue
        members, exits = _reach(graph, entry, kinds, consumers, topics)
        ordered = tuple(sorted(members, key=order.__getitem__))
        stages.append(Stage(entry, topic, ordered, exits, node.kind is Kind.SOURCE))
    return tuple(stages)


def _reach(
    graph: Graph,
    entry: str,
    kinds: Mapping[str, Kind],
    consumers: Mapping[Port, object],
    topics: Topics,
) -> tuple[set[str], dict[Port, Exit]]:
    """Nodes run by the stage entered at ``entry`` and the ports where records leave it."""
    members: set[str] = set()
    exits: dict[Port, Exit] = {}
    todo = [entry]
    while todo:
        current = todo.pop()
        if current in members:
            continue
        members.add(current)
        for port in range(graph.node(current).ports):
            consumer = consumers[Port(current, port)]
            target: str = consumer.id  # type: ignore[attr-defined]
            if kinds[target] in _SHUFFLES:
                exits[Port(current, port)] = Exit(target, ExitKind.SHUFFLE, topics.shuffle(target))
            elif kinds[target] is Kind.LOOP:
                exits[Port(current, port)] = Exit(target, ExitKind.LOOP, topics.shuffle(target))
            elif kinds[target] is Kind.SINK:
                exits[Port(current, port)] = Exit(target, ExitKind.SINK, topics.pre(target))
            else:
                todo.append(target)
    return members, exits
