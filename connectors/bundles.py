"""Reading a flamepipe output topic downstream: verified bundles, exactly once.

`BundleConsumer` reads with read_committed, buffers each partition's items until the
bundle header that closes them, checks the bundle rules (`BundleVerifier`: consecutive
``seq``, increasing ``gt_last``, items inside their bundle, item count) and hands out whole
bundles, their items in meta order. A bundle counts as received when the next one is asked
for (or on `close`): its position is committed then, with its ``seq`` and ``gt_last`` in
the offset metadata, so a restarted consumer resumes after it and goes on verifying where
it stopped.

`last_bundle_header` is the other half of FlameStream's output contract: the consumer side hands
the last bundle back to a restarting barrier.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from confluent_kafka import Consumer, Message, TopicPartition

from framework.core.messages import BundleHeader
from framework.core.meta import Meta
from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import FlamepipeError, PipelineError, ProtocolViolation
from framework.kafka.admin import partition_count
from framework.kafka.clients import (
    assign,
    close_quietly,
    is_record,
    kafka_call,
    kafka_retry,
    new_consumer,
    where,
)
from framework.kafka.tail import last_bundle_header
from framework.wire.bundles import BundleVerifier, read_bundle_header
from framework.wire.positions import BundleMark
from framework.wire.serde import Json, Serde

__all__ = [
    "BundleConsumer",
    "OutputItem",
    "VerifiedBundle",
    "last_bundle_header",
]


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One output record: its decoded payload, meta and coordinates."""

    value: Any
    meta: Meta
    key: bytes | None
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class VerifiedBundle:
    """A whole bundle of one partition, checked against the bundle rules."""

    partition: int
    header: BundleHeader
    items: tuple[OutputItem, ...]
    offset: int


def _meta_of(item: OutputItem) -> Meta:
    return item.meta


class BundleConsumer:
    """Verified bundles of ``topic`` for consumer group ``group`` (see the module docstring).

    ``serde`` decodes item values. Any broken rule raises `ProtocolViolation` naming the
    partition, offset and rule; nothing of the broken bundle is handed out.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        serde: Serde | None = None,
        *,
        poll_s: float = 0.05,
    ) -> None:
        """A consumer of ``topic``; it connects on `open` (or entering ``with``)."""
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.serde: Serde = serde if serde is not None else Json()
        self.poll_s = poll_s
        self._consumer: Consumer | None = None
        self._verifiers: dict[int, BundleVerifier] = {}
        self._items: dict[int, list[OutputItem]] = {}
        self._syncing: set[int] = set()
        self._ready: deque[VerifiedBundle] = deque()
        self._unacked: VerifiedBundle | None = None
        self._violation: ProtocolViolation | None = None

    def open(self) -> Self:
        """Connect and resume after the last committed bundle of every partition."""
        self._consumer = consumer = new_consumer(self.bootstrap, self.group)
        try:
            partitions = partition_count(self.bootstrap, self.topic)
            asked = [TopicPartition(self.topic, p) for p in range(partitions)]
            found = kafka_retry(
                f"cannot read the positions of {self.group!r}",
                lambda: consumer.committed(asked, timeout=DEFAULT_TIMEOUT_S),
            )
            starts = {tp.partition: self._resume(consumer, tp) for tp in found}
            assign(consumer, self.topic, starts)
        except FlamepipeError:
            self.close()
            raise
        return self

    def _resume(self, consumer: Consumer, tp: TopicPartition) -> int | None:
        """Where to read partition ``tp`` from, and how to verify what comes."""
        p = tp.partition
        at = f"{self.topic}[{p}]"
        self._items[p] = []
        if tp.offset >= 0:
            mark = BundleMark.decode(tp.metadata or "", f"group {self.group!r} on {at}")
            self._verifiers[p] = BundleVerifier(at, mark.seq + 1, mark.gt_last)
            return int(tp.offset)
        low, _ = kafka_retry(
            f"cannot read the offsets of {at}",
            lambda: consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), DEFAULT_TIMEOUT_S
            ),
        )
        self._verifiers[p] = BundleVerifier(at, 0 if low == 0 else None)
        if low > 0:  # retention cut the log: its first bundle may be partial
            self._syncing.add(p)
        return None

    def poll(self, timeout: float) -> VerifiedBundle | None:
        """The next verified bundle, None if none completes within ``timeout`` seconds.

        Asking for the next bundle acknowledges (commits) the previous one.
        """
        self.commit()
        deadline = Deadline(timeout)
        while not self._ready and self._violation is None:
            left = deadline.remaining()
            if left <= 0:
                return None
            self._fill(min(left, self.poll_s))
        if not self._ready and self._violation is not None:
            raise self._violation
        self._unacked = self._ready.popleft()
        return self._unacked

    def bundles(self, idle_s: float | None = None) -> Iterator[VerifiedBundle]:
        """Bundles as they come; stops after ``idle_s`` seconds without one (None: never)."""
        while True:
            bundle = self.poll(idle_s if idle_s is not None else 3600.0)
            if bundle is None:
                if idle_s is not None:
                    return
                continue
            yield bundle

    def commit(self) -> None:
        """Acknowledge the last bundle handed out: commit its position and header."""
        bundle, self._unacked = self._unacked, None
        if bundle is None or self._consumer is None:
            return
        consumer = self._consumer
        position = TopicPartition(
            self.topic,
            bundle.partition,
            bundle.offset + 1,
            metadata=BundleMark(bundle.header.seq, bundle.header.gt_last).encode(),
        )
        kafka_call(
            f"cannot commit the position of {self.group!r}",
            lambda: consumer.commit(offsets=[position], asynchronous=False),
        )

    def _fill(self, timeout: float) -> None:
        if self._consumer is None:
            raise PipelineError("BundleConsumer is not open: call open() or use `with`")
        for msg in self._consumer.consume(1000, timeout):
            if not is_record(msg, self.topic):
                continue
            try:
                self._take(msg)
            except ProtocolViolation as exc:
                # Bundles verified before the violation are still handed out first.
                self._violation = exc
                return

    def _take(self, msg: Message) -> None:
        partition, offset = where(msg)
        header = read_bundle_header(msg.headers())
        if partition in self._syncing:
            if header is not None:  # verification starts after the first whole bundle
                self._syncing.discard(partition)
                self._verifiers[partition] = BundleVerifier(
                    f"{self.topic}[{partition}]", header.seq + 1, header.gt_last
                )
            return
        verifier = self._verifiers[partition]
        if header is not None:
            verifier.header(header, offset)
            items, self._items[partition] = self._items[partition], []
            items.sort(key=_meta_of)  # a bundle's wire order is no contract
            self._ready.append(VerifiedBundle(partition, header, tuple(items), offset))
            return
        meta = verifier.item(msg.headers(), offset)
        raw = msg.value()
        value = self.serde.loads(raw) if raw is not None else None
        self._items[partition].append(OutputItem(value, meta, msg.key(), partition, offset))

    def close(self) -> None:
        """Acknowledge the last bundle handed out and disconnect."""
        try:
            self.commit()
        finally:
            consumer, self._consumer = self._consumer, None
            close_quietly(consumer)

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:  # a failed caller did not receive the last bundle: do not acknowledge it
            self._unacked = None
            self.close()
