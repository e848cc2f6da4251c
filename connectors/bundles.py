"""Reading a flamepipe output topic downstream: verified bundles, exactly once.

`BundleConsumer` reads the output topic and its bundle topic (`framework.wire.bundles`)
with read_committed, buffers each partition's items until the bundle header that closes
them, checks the bundle rules (`BundleVerifier`: consecutive ``seq``, increasing
``gt_last``, items inside their bundle, none lost) and hands out whole bundles, their items
in meta order. A bundle counts as received when the next one is asked for (or on
`close`): the positions of both topics are committed then in one request, the bundle
topic's with the bundle's ``seq`` and ``gt_last`` in the offset metadata, so a restarted
consumer resumes after it and goes on verifying where it stopped.

A plain consumer of the output topic sees only the user's records; this one is for readers
that want the guarantee checked.

`last_bundle_header` is the other half of FlameStream's output contract: the consumer side
hands the last bundle back to a restarting barrier.

Example::

    >>> with BundleConsumer("127.0.0.1:9092", "counts", "my-group") as consumer:  # doctest: +SKIP
    ...     for bundle in consumer.bundles(idle_s=5):
    ...         print(bundle.header.seq, [item.value for item in bundle.items])
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from confluent_kafka import Consumer, Message, TopicPartition

from framework.core.messages import BundleHeader
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import DecodeError, FlamepipeError, PipelineError, ProtocolViolation
from framework.kafka.admin import partition_count
from framework.kafka.clients import (
    assign_topics,
    close_quietly,
    is_eof,
    is_record,
    kafka_call,
    kafka_retry,
    new_consumer,
    take,
    where,
)
from framework.wire.bundles import BundleVerifier, bundles_topic, read_bundle_header, read_meta
from framework.wire.positions import BundleMark
from framework.wire.serde import Json, Serde

# A header still short of items this long after it arrived, with the output partition read
# to its end since, has lost an item: its items committed with it in one transaction.
_LOST_AFTER_S = 1.0


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
    """A whole bundle of one partition, checked against the bundle rules.

    ``offset`` is its header's on the bundle topic; ``items_end`` the output offset after
    its last item (None: no item on this partition).
    """

    partition: int
    header: BundleHeader
    items: tuple[OutputItem, ...]
    offset: int
    items_end: int | None = None


@dataclass(frozen=True, slots=True)
class BundleStart:
    """Where a partition resumes after a bundle its reader applied and keeps the position
    of itself (with its own output, e.g. in a database transaction): the bundle topic's
    offset after that bundle's header, the output topic's offset after its last item
    (None: no item read yet), and its ``seq`` and ``gt_last``."""

    bundles_offset: int
    items_offset: int | None
    seq: int
    gt_last: GlobalTime

    @classmethod
    def after(cls, bundle: VerifiedBundle, items_offset: int | None) -> BundleStart:
        """The start after ``bundle``; ``items_offset``: the partition's before it."""
        end = bundle.items_end if bundle.items_end is not None else items_offset
        return cls(bundle.offset + 1, end, bundle.header.seq, bundle.header.gt_last)


@dataclass
class _Partition:
    """What one output partition and its bundle partition hold between records."""

    verifier: BundleVerifier
    items: list[OutputItem] = field(default_factory=list)
    headers: deque[tuple[BundleHeader, int, float]] = field(default_factory=deque)
    # The bundle topic was cut by retention: verification starts after its first header,
    # and items at or before that header's gt_last (a cut bundle's) are skipped.
    syncing: bool = False
    floor: GlobalTime | None = None
    eof_at: float = 0.0  # when the output partition was last read to its end
    # Read to the end of each topic's partition since its last record (`at_end`).
    items_end: bool = False
    headers_end: bool = False


def _meta_of(item: OutputItem) -> Meta:
    return item.meta


class BundleConsumer:
    """Verified bundles of ``topic`` for consumer group ``group`` (see the module docstring).

    ``serde`` decodes item values. Any broken rule raises `ProtocolViolation` naming the
    partition, offset and rule; nothing of the broken bundle is handed out. With
    ``starts`` the reader keeps its positions itself: partitions resume there (the others
    from their first bundle) and nothing is committed to Kafka.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        serde: Serde | None = None,
        *,
        poll_s: float = 0.05,
        starts: Mapping[int, BundleStart] | None = None,
    ) -> None:
        """A consumer of ``topic``; it connects on `open` (or entering ``with``)."""
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.control = bundles_topic(topic)
        self.serde: Serde = serde if serde is not None else Json()
        self.poll_s = poll_s
        self.starts = None if starts is None else dict(starts)
        self._consumer: Consumer | None = None
        self._parts: dict[int, _Partition] = {}
        self._ready: deque[VerifiedBundle] = deque()
        self._unacked: VerifiedBundle | None = None
        self._violation: ProtocolViolation | None = None

    def open(self) -> Self:
        """Connect and resume after the last committed bundle of every partition."""
        self._consumer = consumer = new_consumer(self.bootstrap, self.group)
        try:
            partitions = partition_count(self.bootstrap, self.topic)
            asked = [
                TopicPartition(topic, p)
                for topic in (self.topic, self.control)
                for p in range(partitions)
            ]
            found = kafka_retry(
                f"cannot read the positions of {self.group!r}",
                lambda: consumer.committed(asked, timeout=DEFAULT_TIMEOUT_S),
            )
            committed = {(tp.topic, tp.partition): tp for tp in found}
            starts: dict[str, dict[int, int | None]] = {self.topic: {}, self.control: {}}
            for p in range(partitions):
                control, items = committed[(self.control, p)], committed[(self.topic, p)]
                given = None if self.starts is None else self.starts.get(p)
                if self.starts is not None and given is None:  # nothing applied yet
                    control = items = TopicPartition(self.control, p)
                if given is not None:
                    at = f"{self.topic}[{p}]"
                    verifier = BundleVerifier(at, given.seq + 1, given.gt_last)
                    self._parts[p] = _Partition(verifier)
                    starts[self.control][p] = given.bundles_offset
                    starts[self.topic][p] = given.items_offset
                    continue
                starts[self.control][p] = self._resume(consumer, control)
                starts[self.topic][p] = int(items.offset) if items.offset >= 0 else None
            assign_topics(consumer, starts)
        except FlamepipeError:
            self.close()
            raise
        return self

    def _resume(self, consumer: Consumer, tp: TopicPartition) -> int | None:
        """Where to read bundle partition ``tp`` from, and how to verify what comes."""
        p = tp.partition
        at = f"{self.topic}[{p}]"
        if tp.offset >= 0:
            mark = BundleMark.decode(tp.metadata or "", f"group {self.group!r} on {at}")
            self._parts[p] = _Partition(BundleVerifier(at, mark.seq + 1, mark.gt_last))
            return int(tp.offset)
        low, _ = kafka_retry(
            f"cannot read the offsets of {self.control}[{p}]",
            lambda: consumer.get_watermark_offsets(
                TopicPartition(self.control, p), DEFAULT_TIMEOUT_S
            ),
        )
        # Retention cut the log (low > 0): its first bundle may be partial; start after it.
        self._parts[p] = _Partition(BundleVerifier(at, 0 if low == 0 else None), syncing=low > 0)
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

    def bundles(
        self,
        idle_s: float | None = None,
        stop: threading.Event | None = None,
        *,
        to_end: bool = False,
    ) -> Iterator[VerifiedBundle]:
        """Bundles as they come; stops after ``idle_s`` seconds without one (None: never),
        or once ``stop`` is set (seen within a second while idle). ``to_end``: stops as soon
        as every bundle committed when the reader reached the end of both topics is out
        (`at_end`), or after ``idle_s`` without one (default 60 s: then items or a header
        are missing, or something still writes)."""
        if to_end:
            yield from self._to_end(60.0 if idle_s is None else idle_s)
            return
        wait = idle_s if idle_s is not None else (1.0 if stop is not None else 3600.0)
        while stop is None or not stop.is_set():
            bundle = self.poll(wait)
            if bundle is None:
                if idle_s is not None:
                    return
                continue
            yield bundle

    def _to_end(self, idle_s: float) -> Iterator[VerifiedBundle]:
        idle = Deadline(idle_s)
        while True:
            bundle = self.poll(self.poll_s)
            if bundle is not None:
                idle = Deadline(idle_s)
                yield bundle
            elif self.at_end() or idle.expired:
                return

    def at_end(self) -> bool:
        """Whether every bundle committed so far is out: nothing ready, no header waiting
        for its items, and every partition of both topics read to its end since its last
        record (read_committed: its last stable offset)."""
        if self._ready or self._consumer is None:
            return False
        return all(p.items_end and p.headers_end and not p.headers for p in self._parts.values())

    def commit(self) -> None:
        """Acknowledge the last bundle handed out: commit its positions and header."""
        bundle, self._unacked = self._unacked, None
        if bundle is None or self._consumer is None or self.starts is not None:
            return
        consumer = self._consumer
        mark = BundleMark(bundle.header.seq, bundle.header.gt_last).encode()
        positions = [
            TopicPartition(self.control, bundle.partition, bundle.offset + 1, metadata=mark)
        ]
        if bundle.items_end is not None:
            positions.append(TopicPartition(self.topic, bundle.partition, bundle.items_end))
        kafka_call(
            f"cannot commit the position of {self.group!r}",
            lambda: consumer.commit(offsets=positions, asynchronous=False),
        )

    def _fill(self, timeout: float) -> None:
        if self._consumer is None:
            raise PipelineError("BundleConsumer is not open: call open() or use `with`")
        try:
            # `take`, not consume(1000, timeout): that waits out the whole timeout unless
            # 1 000 messages come, which added ~50 ms to every bundle of the demo's reader.
            for msg in take(self._consumer, 1000, timeout):
                self._take(msg)
            self._check_lost()
        except ProtocolViolation as exc:
            # Bundles verified before the violation are still handed out first.
            self._violation = exc

    def _take(self, msg: Message) -> None:
        topic = msg.topic() or ""
        if is_eof(msg):
            part = self._parts[where(msg)[0]]
            if topic == self.topic:
                part.eof_at = time.monotonic()
                part.items_end = True
            elif topic == self.control:
                part.headers_end = True
        elif not is_record(msg, topic):
            return
        elif topic == self.control:
            self._parts[where(msg)[0]].headers_end = False
            self._header(msg)
        else:
            self._parts[where(msg)[0]].items_end = False
            self._item(msg)

    def _header(self, msg: Message) -> None:
        partition, offset = where(msg)
        part = self._parts[partition]
        try:
            header = read_bundle_header(msg.value())
        except DecodeError as exc:
            raise ProtocolViolation(
                f"{self.control}[{partition}]@{offset}: unreadable bundle header: {exc}"
            ) from exc
        if part.syncing:  # verification starts after the first whole bundle
            part.syncing = False
            part.floor = header.gt_last
            part.verifier = BundleVerifier(part.verifier.where, header.seq + 1, header.gt_last)
            early, part.items = part.items, []
            for item in early:
                self._verify_item(part, item)
            return
        part.headers.append((header, offset, time.monotonic()))
        self._close(partition, part)

    def _item(self, msg: Message) -> None:
        partition, offset = where(msg)
        part = self._parts[partition]
        try:
            meta = read_meta(msg.headers())
        except DecodeError as exc:
            where_ = f"{self.topic}[{partition}]@{offset}"
            raise ProtocolViolation(f"{where_}: unreadable fp.meta header: {exc}") from exc
        if meta is None:
            raise ProtocolViolation(f"{self.topic}[{partition}]@{offset}: no fp.meta header")
        raw = msg.value()
        value = self.serde.loads(raw) if raw is not None else None
        item = OutputItem(value, meta, msg.key(), partition, offset)
        if part.syncing:  # held until the first header says where whole bundles start
            part.items.append(item)
            return
        self._verify_item(part, item)
        self._close(partition, part)

    @staticmethod
    def _verify_item(part: _Partition, item: OutputItem) -> None:
        if part.floor is not None and item.meta.gt <= part.floor:
            return  # an item of a bundle retention cut: never handed out
        part.floor = None
        part.verifier.take_item(item.meta, item.offset)
        part.items.append(item)

    def _close(self, partition: int, part: _Partition) -> None:
        """Hand out every bundle of ``partition`` whose items have all arrived."""
        while part.headers:
            header, offset, _ = part.headers[0]
            taken = part.verifier.header(header, offset)
            if taken is None:
                return
            part.headers.popleft()
            items, part.items = part.items[:taken], part.items[taken:]
            end = max(item.offset for item in items) + 1 if items else None
            items.sort(key=_meta_of)  # a bundle's wire order is no contract
            self._ready.append(VerifiedBundle(partition, header, tuple(items), offset, end))

    def _check_lost(self) -> None:
        """A header waiting for items that the output partition, read to its end well
        after the header arrived, does not have: an item is lost."""
        for part in self._parts.values():
            if part.headers:
                header, offset, arrived = part.headers[0]
                if part.eof_at > arrived + _LOST_AFTER_S:
                    part.verifier.check_complete(header, offset)

    def close(self) -> None:
        """Acknowledge the last bundle handed out and disconnect."""
        try:
            self.commit()
        finally:
            consumer, self._consumer = self._consumer, None
            close_quietly(consumer)

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, _kind: object, exc: BaseException | None, _tb: object) -> None:
        if exc is None:
            self.close()
        else:  # a failed caller did not receive the last bundle: do not acknowledge it
            self._unacked = None
            self.close()
