"""Cutting a pipeline graph into stages joined by Kafka topics (engine-independent).

A stage is what one task runs over one input partition. Records cross a stage boundary,
and so a Kafka topic, exactly where a node needs its input partitioned by key (``group``,
``aggregate``: a *shuffle*) and where they leave for a barrier (``sink``: the pre-barrier
topic). Everything else runs inside the stage that reaches it; a node reachable from two
stages (a ``merge`` and what follows it) runs in both, which is sound because operations
are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from framework.core.graph import Graph, Kind, Port
from framework.errors import PipelineError

__all__ = ["Exit", "ExitKind", "Stage", "Topics", "plan_stages"]

_SHUFFLES = frozenset({Kind.GROUP, Kind.AGGREGATE})


@dataclass(frozen=True, slots=True)
class Topics:
    """Names of the framework's own topics for application ``app`` in ``epoch``.

    A replay or a recovery starts a new epoch (`framework.zk.Epochs`): its internal topics
    are new (``<app>.e<epoch>.*``), so nothing of the old epoch's acks, shuffles, state or
    pre-barrier records can leak into the new one. Epoch 0 keeps the plain names. The
    dead-letter topic is for people and stays the same across epochs.
    """

    app: str
    epoch: int = 0

    @property
    def prefix(self) -> str:
        """``<app>`` in epoch 0, ``<app>.e<epoch>`` after."""
        return self.app if self.epoch == 0 else f"{self.app}.e{self.epoch}"

    @property
    def acks(self) -> str:
        """Acks, heartbeats and node times for the acker, one partition per shard."""
        return f"{self.prefix}.acks"

    @property
    def mintime(self) -> str:
        """Min-time notifications of the acker (compacted)."""
        return f"{self.prefix}.mintime"

    @property
    def acker(self) -> str:
        """Checkpoints of the acker's shards (compacted): where a restart resumes."""
        return f"{self.prefix}.acker"

    @property
    def dlq(self) -> str:
        """Dead letters: records that could not be decoded or processed, with the reason."""
        return f"{self.app}.dlq"

    def shuffle(self, node: str) -> str:
        """The input of a grouping or aggregate ``node``, partitioned by key."""
        return f"{self.prefix}.{node}"

    def state(self, node: str) -> str:
        """The changelog of stateful ``node`` (compacted)."""
        return f"{self.prefix}.{node}.state"

    def pre(self, sink: str) -> str:
        """Items and tombstones on their way to the barrier of ``sink``."""
        return f"{self.prefix}.{sink}.pre"


class ExitKind(StrEnum):
    """Where records leaving a stage go."""

    SHUFFLE = "shuffle"
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

    ``entry`` is a source node (``topic`` is the user's input topic) or a shuffle node
    (``topic`` is its shuffle topic). ``nodes`` are in graph order, ``entry`` first.
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
        elif node.kind in _SHUFFLES:
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
            elif kinds[target] is Kind.SINK:
                exits[Port(current, port)] = Exit(target, ExitKind.SINK, topics.pre(target))
            else:
                todo.append(target)
    return members, exits
