"""Step 1 of a snapshot: has every barrier released everything below the snapshot slot?

FlameStream's fault-tolerance protocol asks each barrier to accept a snapshot at ``GT``
once the consumer acknowledged every bundle with items before ``GT``. A flamepipe barrier
writes a bundle and its new
``GT_last`` in one Kafka transaction, committing ``GT_last`` as the offset metadata of its
pre-barrier partitions (`BarrierMark`), so the acceptance can be read instead of asked
for: a committed ``GT_last`` at or after the end of slot ``M - 1`` means every item below
``M`` is in a committed bundle or was cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Consumer, TopicPartition

from framework.core.time import GlobalTime
from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import KafkaClientError
from framework.kafka.admin import partitions_if_exists
from framework.kafka.clients import close_quietly, kafka_retry, new_consumer
from framework.wire.positions import BarrierMark
from framework.wire.topics import Topics


def barrier_group(app: str, sink_node: str) -> str:
    """The consumer group the barrier of ``sink_node`` commits its positions in."""
    return f"{app}.{sink_node}.barrier"


def accepts(marks: Iterable[BarrierMark | None], slot: int) -> bool:
    """Whether marks of every pre-barrier partition show all items below ``slot`` released.

    The barrier's ``GT_last`` after min time ``M`` is the end of slot ``M - 1``
    (`Barrier.on_min_time`); comparing with that end, not only its slot, also refuses a
    ``GT_last`` inside slot ``M - 1``. A partition without a mark (None) has not
    accepted; neither has a barrier with no partitions listed.
    """
    if slot < 1:
        return False
    needed = GlobalTime.slot_end(slot - 1)
    listed = list(marks)
    return bool(listed) and all(
        mark is not None and mark.gt_last is not None and mark.gt_last >= needed for mark in listed
    )


def accepted_slot(marks: Iterable[BarrierMark | None]) -> int:
    """The largest slot ``M`` that ``marks`` accept (`accepts`); 0 if none.

    ``accepts(marks, M)`` holds exactly for ``1 <= M <= accepted_slot(marks)``.
    """
    bound: int | None = None
    for mark in marks:
        gt = None if mark is None else mark.gt_last
        if gt is None:
            return 0
        # Slot S is wholly released once GT_last is the end of S: then S + 1 is accepted.
        accepted = gt.slot + 1 if gt >= GlobalTime.slot_end(gt.slot) else gt.slot
        bound = accepted if bound is None else min(bound, accepted)
    return bound or 0


class BarrierMarks:
    """Reads the committed `BarrierMark` of every pre-barrier partition of some sinks."""

    def __init__(self, bootstrap: str, app: str, epoch: int, sinks: Iterable[str]) -> None:
        """Marks of the barriers of ``sinks`` of ``app`` in ``epoch``; `close` when done."""
        self.bootstrap = bootstrap
        self.app = app
        self.topics = Topics(app, epoch)
        self.sinks = tuple(sinks)
        # One consumer per group, only for OffsetFetch: it never subscribes, so it never
        # joins the barrier's group, and it never commits.
        self._consumers: dict[str, Consumer] = {}
        self._partitions: dict[str, int] = {}

    def accept(self, slot: int) -> bool:
        """Whether every barrier accepts a snapshot at ``slot`` (see `accepts`)."""
        return all(accepts(self.marks(sink), slot) for sink in self.sinks)

    def accepted(self) -> int:
        """The largest slot every barrier accepts (`accepted_slot`); 0 if one accepts none."""
        return min((accepted_slot(self.marks(sink)) for sink in self.sinks), default=0)

    def marks(self, sink: str) -> list[BarrierMark | None]:
        """The committed mark of each partition of ``sink``'s pre-barrier topic (None: none).

        An empty list while the pre-barrier topic does not exist yet.
        """
        topic = self.topics.pre(sink)
        partitions = self._partition_count(topic)
        if not partitions:
            return []
        group = barrier_group(self.app, sink)
        consumer = self._consumers.get(group)
        if consumer is None:
            consumer = self._consumers[group] = new_consumer(self.bootstrap, group)
        asked = [TopicPartition(topic, p) for p in range(partitions)]
        found = kafka_retry(
            f"cannot read the positions of group {group!r}",
            lambda: consumer.committed(asked, timeout=DEFAULT_TIMEOUT_S),
        )
        marks: list[BarrierMark | None] = []
        for tp in found:
            if tp.error is not None:
                raise KafkaClientError(f"position of {group!r} on {topic}: {tp.error}")
            where = f"group {group!r} on {topic}[{tp.partition}]"
            marks.append(BarrierMark.decode(tp.metadata or "", where) if tp.offset >= 0 else None)
        return marks

    def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            count = partitions_if_exists(self.bootstrap, topic)
            if not count:
                return 0  # not created yet: no barrier has accepted anything
            self._partitions[topic] = count
        return count

    def close(self) -> None:
        """Close the consumers."""
        consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            close_quietly(consumer)
