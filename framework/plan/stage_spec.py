"""What a stage task needs and produces: its static spec, its input decoder, its result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from framework.core.graph import Graph
from framework.plan.stages import Stage
from framework.wire.records import InRecord, OutRecord
from framework.wire.topics import Topics


class SourceDecoder(Protocol):
    """Turns an input record into a payload (`DecodeError` if it can't).

    ``context``: the payload needs the record's headers (the source query reads them).
    """

    @property
    def context(self) -> bool: ...

    def payload(self, record: InRecord) -> Any: ...


@dataclass(frozen=True)
class StageSpec:
    """Everything static a task of ``stage`` needs; shipped to Spark executors once."""

    graph: Graph
    stage: Stage
    partitions: Mapping[str, int]  # partition count of every topic the stage writes
    shards: int
    source: SourceDecoder | None = None  # how a source stage decodes its input records
    fail_fast: bool = False
    epoch: int = 0
    # Items that travel without acks, for a runner that moves them by other means than a
    # Kafka topic (a Spark shuffle: docs/decisions/fused-stages.md): the keyed target whose
    # items leave unacked, and whether this stage's input items came unacked (no receipt).
    unacked_exit: str | None = None
    unacked_input: bool = False
    # A source stage's chain of stateless operations runs on columns
    # (`framework.plan.columnar`).
    columnar: bool = True

    @property
    def topics(self) -> Topics:
        """The framework topic names of this pipeline in its epoch."""
        return Topics(self.graph.name, self.epoch)


@dataclass
class TaskResult:
    """What one task produced, to be committed in one transaction, and its counts."""

    records: list[OutRecord] = field(default_factory=list)
    records_in: int = 0  # Kafka records (frames on internal topics)
    items_in: int = 0
    items_out: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    last_offset: int = -1
    max_timestamp_ms: int = -1
    replayed: int = 0  # results below a restore floor, not emitted again (`put_floor`)
    next_due: int = -1  # an aggregate's earliest window end still to emit (-1: none)
    columnar: bool = False  # the batch ran on columns (`framework.plan.columnar`)
