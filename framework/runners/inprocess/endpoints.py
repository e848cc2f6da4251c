"""In-memory source and sink descriptors for the in-process harness."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from framework.core.barrier import Bundle
from framework.core.context import LOG_APPEND_TIME, Message
from framework.core.graph import Sink, Source
from framework.core.meta import Record
from framework.errors import PipelineError


class SourceRecord(NamedTuple):
    """One input record as Kafka would store it: partition, offset, timestamp, payload."""

    partition: int
    offset: int
    timestamp_ms: int
    value: object


class ListSource(Source):
    """Records from a list, spread round-robin over ``partitions`` of topic ``topic``.

    Payloads get timestamps ``start_ms, start_ms + step_ms, ...``; use `timed` to give
    them explicitly. Offsets count up per partition from 0. ``context=True``: payloads are
    `framework.core.context.Message` (key None, no headers), as `KafkaSource` gives them.
    """

    def __init__(
        self,
        values: Iterable[object] = (),
        *,
        partitions: int = 1,
        topic: str = "input",
        start_ms: int = 0,
        step_ms: int = 1,
        context: bool = False,
    ) -> None:
        stamped = [(start_ms + i * step_ms, v) for i, v in enumerate(values)]
        self._init(stamped, partitions, topic, context)

    @classmethod
    def timed(
        cls,
        records: Iterable[tuple[int, object]],
        *,
        partitions: int = 1,
        topic: str = "input",
        context: bool = False,
    ) -> ListSource:
        """A source of ``(timestamp_ms, payload)`` pairs, in list order per partition."""
        source = cls.__new__(cls)
        source._init(list(records), partitions, topic, context)
        return source

    def payload(self, record: SourceRecord) -> object:
        """What the pipeline sees of ``record``: its value, or a `Message` with context."""
        if not self.context:
            return record.value
        return Message(
            record.value,
            None,
            (),
            record.timestamp_ms,
            LOG_APPEND_TIME,
            self.topic,
            record.partition,
            record.offset,
        )

    def _init(
        self, stamped: list[tuple[int, object]], partitions: int, topic: str, context: bool
    ) -> None:
        self.context = context
        if partitions < 1:
            raise PipelineError(f"a ListSource needs >= 1 partition, got {partitions}")
        if not topic:
            raise PipelineError("a ListSource needs a non-empty topic")
        self.topic = topic
        self.partitions = partitions
        offsets = [0] * partitions
        records = []
        for i, (timestamp, value) in enumerate(stamped):
            partition = i % partitions
            records.append(SourceRecord(partition, offsets[partition], int(timestamp), value))
            offsets[partition] += 1
        self.records: tuple[SourceRecord, ...] = tuple(records)

    @property
    def name(self) -> str:
        return self.topic

    def partition(self, partition: int) -> list[SourceRecord]:
        """The records of one partition in offset order."""
        return [r for r in self.records if r.partition == partition]

    def __repr__(self) -> str:
        return f"ListSource({self.topic!r}, records={len(self.records)})"


class ListSink(Sink):
    """Collects the barrier's bundles; a runner clears it when a run starts."""

    def __init__(self, name: str = "output") -> None:
        self._name = name
        self.bundles: list[Bundle] = []

    @property
    def name(self) -> str:
        return self._name

    def clear(self) -> None:
        """Forget every bundle."""
        self.bundles.clear()

    def write(self, bundle: Bundle) -> None:
        """Append a released bundle."""
        self.bundles.append(bundle)

    @property
    def records(self) -> list[Record]:
        """Every released record, in release order."""
        return [record for bundle in self.bundles for record in bundle.records]

    @property
    def values(self) -> list[object]:
        """Every released payload, in release order."""
        return [record.value for record in self.records]

    def __repr__(self) -> str:
        return f"ListSink({self._name!r}, bundles={len(self.bundles)})"
