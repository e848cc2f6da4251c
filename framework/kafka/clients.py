"""The one place Kafka clients are made, and the helpers every reader of a topic shares.

Consumers read committed records only and never auto-commit; producers are idempotent.
A failed client call raises `KafkaClientError` naming what was being done
(`kafka_call`), or is retried while its error is one that passes by itself
(`kafka_retry`, `framework.kafka.retry`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import KafkaClientError, ProtocolViolation
from framework.kafka.retry import TRANSIENT, retry
from framework.kafka.security import secured
from framework.wire.auth import MAC_HEADER, authentic, current, signed
from framework.wire.records import OutRecord

T = TypeVar("T")
# How long the broker holds a fetch with no new records. It adds no latency: the broker
# answers a waiting fetch as soon as records (or, read_committed, commit markers) land. But
# every fetch costs the broker CPU (measured on the embedded broker: four idle consumers
# took 0.08 cores at 50 ms, 0.30 cores at 5 ms), so long-lived consumers wait long. A
# reader that stops at the end learns of the end only when a fetch comes back empty, so
# it waits briefly (`QUICK_END`); a service's first end-of-partition event takes this long.
_FETCH_MS = 500
QUICK_END: Mapping[str, Any] = {"fetch.wait.max.ms": 10}
"""Consumer settings of a reader that stops at the end: it learns of the end sooner."""


class OutRecordLike(Protocol):
    """A record to produce; ``partition`` None lets the producer's partitioner choose."""

    @property
    def topic(self) -> str:
        """Topic to write to."""

    @property
    def partition(self) -> int | None:
        """Partition to write to, or None."""

    @property
    def key(self) -> bytes | None:
        """Record key."""

    @property
    def value(self) -> bytes | None:
        """Record value."""

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]:
        """Record headers, in order."""


def kafka_call(what: str, call: Callable[[], T]) -> T:
    """``call()``, with a Kafka failure raised as `KafkaClientError` saying ``what`` failed."""
    try:
        return call()
    except KafkaException as exc:
        raise KafkaClientError(f"{what}: {exc}") from exc


def kafka_retry(what: str, call: Callable[[], T], timeout: float = DEFAULT_TIMEOUT_S) -> T:
    """Like `kafka_call`, retrying errors that pass (`framework.kafka.retry`)."""
    return retry(what, call, timeout)


def new_consumer(
    bootstrap: str, group: str | None = None, config: Mapping[str, Any] | None = None
) -> Consumer:
    """A read_committed consumer that never auto-commits (group None: a throwaway id)."""
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group or f"flamepipe-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "fetch.wait.max.ms": _FETCH_MS,
        **(config or {}),
    }
    return kafka_call(
        f"cannot create a consumer for {bootstrap}", lambda: Consumer(secured(settings))
    )


OnDelivery = Callable[[KafkaError | None, Message], None]
"""What librdkafka calls once per produced record: its error (None: delivered), the record."""


def produce_record(
    producer: Producer,
    record: OutRecordLike,
    on_delivery: OnDelivery | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Produce ``record`` with its ``fp.mac`` (`framework.wire.auth`: every record flamepipe
    writes is signed with the process's keyring); a full local queue is waited out
    (polling, so deliveries drain it) for at most ``timeout_s``, then ``BufferError``
    escapes."""
    headers = list(signed(record.topic, record.key, record.value, record.headers))
    kwargs: dict[str, Any] = {"key": record.key, "value": record.value, "headers": headers}
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    if record.partition is not None:
        kwargs["partition"] = record.partition
    deadline = Deadline(timeout_s)
    while True:
        try:
            producer.produce(record.topic, **kwargs)
            return
        except BufferError:
            if deadline.expired:
                raise
            producer.poll(0.05)


def produce_records(
    producer: Producer, records: Iterable[OutRecord], timeout_s: float = DEFAULT_TIMEOUT_S
) -> None:
    """`produce_record` for each of ``records`` (no delivery callbacks), in a loop that
    costs the client call alone unless the local queue is full: the barrier produces one
    record per output item (the client takes ~3.4 us of a record with two headers, the
    generic path added ~2 us)."""
    produce = producer.produce
    for record in records:
        topic, partition, key, value, headers = record
        try:
            produce(
                topic,
                value,
                key,
                -1 if partition is None else partition,
                headers=list(signed(topic, key, value, headers)),
            )
        except BufferError:
            produce_record(producer, record, None, timeout_s)  # waits the queue out


SignedItem = tuple[int, bytes | None, bytes, list[tuple[str, str | bytes | None]]]
"""An output record ready to produce: partition, key, value and its headers, ``fp.mac``
last (signed where it was made)."""


def produce_signed(
    producer: Producer,
    topic: str,
    items: Iterable[SignedItem],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Produce ``items`` to ``topic`` as they are: the loop of `produce_records` without
    a record's tuple, signature check and headers list per item (the barrier of a sink
    no tombstone reaches keeps its items in this form; `framework.barrier.blocks`). A
    full local queue is waited out as `produce_record` does."""
    produce = producer.produce
    for partition, key, value, headers in items:
        try:
            produce(topic, value, key, partition, headers=headers)
        except BufferError:
            deadline = Deadline(timeout_s)
            while True:
                producer.poll(0.05)
                try:
                    produce(topic, value, key, partition, headers=headers)
                    break
                except BufferError:
                    if deadline.expired:
                        raise


def take(consumer: Consumer, most: int, wait_s: float) -> list[Message]:
    """Up to ``most`` messages: waits at most ``wait_s`` for the first, then takes only
    what is already there.

    ``Consumer.consume(most, wait_s)`` waits out ``wait_s`` unless ``most`` messages come
    (measured: a lone message returned after the whole timeout), which would add up to
    ``wait_s`` to every hop through a service.
    """
    first: list[Message] = consumer.consume(1, wait_s)
    if not first or most <= 1:
        return first
    return first + consumer.consume(most - 1, 0)


def new_producer(bootstrap: str, config: Mapping[str, Any] | None = None) -> Producer:
    """An idempotent producer; ``config`` adds to or overrides its settings."""
    settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, **(config or {})}
    return kafka_call(
        f"cannot create a producer for {bootstrap}", lambda: Producer(secured(settings))
    )


def _first_offset(consumer: Consumer, topic: str, partition: int) -> int:
    tp = TopicPartition(topic, partition)
    low, _ = kafka_retry(
        f"cannot read the offsets of {topic}[{partition}]",
        lambda: consumer.get_watermark_offsets(tp, DEFAULT_TIMEOUT_S, cached=False),
    )
    return int(low)


def assign(consumer: Consumer, topic: str, starts: Mapping[int, int | None]) -> None:
    """Read ``topic`` from ``starts`` (partition -> offset, None: its first kept record).

    Offsets are resolved here rather than passed as ``OFFSET_BEGINNING``: librdkafka
    resolves a logical offset given before it knows the partition's leader only on a
    500 ms retry timer.
    """
    assign_topics(consumer, {topic: starts})


def assign_topics(consumer: Consumer, starts: Mapping[str, Mapping[int, int | None]]) -> None:
    """`assign` for several topics at once (an assignment replaces the previous one)."""
    tps = [
        TopicPartition(topic, p, _first_offset(consumer, topic, p) if start is None else start)
        for topic, by_partition in starts.items()
        for p, start in by_partition.items()
    ]
    kafka_call(f"cannot read {', '.join(starts)}", lambda: consumer.assign(tps))


def read_to_end(
    bootstrap: str,
    topic: str,
    partitions: int | None = None,
    *,
    committed: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Message]:
    """Every record of ``topic`` now, partition by partition in offset order.

    ``partitions`` None: all the topic has. The end is where the broker reports the end of
    each partition: its last stable offset with ``committed`` (read_committed), its high
    watermark without. Partitions are assigned, not subscribed: no group join to wait for.
    """
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = new_consumer(bootstrap, config={**QUICK_END, "isolation.level": isolation})
    try:
        if partitions is None:
            partitions = _partition_count(consumer, topic)
        assign(consumer, topic, dict.fromkeys(range(partitions)))
        deadline = Deadline(timeout_s, f"reading {topic} to its end")
        return _drain(consumer, topic, set(range(partitions)), deadline)
    finally:
        close_quietly(consumer)


def read_back(
    consumer: Consumer,
    topic: str,
    partition: int,
    enough: Callable[[list[Message]], bool],
    *,
    window: int = 64,
) -> list[Message]:
    """The last records of ``topic[partition]``, in offset order: those of the last
    ``window`` offsets, then of eight times as many, and so on until ``enough(records)``
    holds or the window reaches the partition's first offset.

    For what a writer puts last and a reader needs the latest of (a bundle header, a
    report per key): on a topic that only grows until compaction, reading it whole made
    a restart slower the longer the run (measured on the acker: 1.9 s after 2 minutes).
    ``consumer``: with `QUICK_END`; its isolation level decides which records count.
    ``enough`` is called on each window's records, the last time on those returned, so
    it can keep what it found (and check each record's signature once per window).
    """
    tp = TopicPartition(topic, partition)
    low, end = kafka_retry(
        f"cannot read the offsets of {topic}[{partition}]",
        lambda: consumer.get_watermark_offsets(tp, DEFAULT_TIMEOUT_S, cached=False),
    )
    while True:
        start = max(low, end - window)
        found = _read_range(consumer, topic, partition, start, end) if end > start else []
        if enough(found) or start == low:
            return found
        window *= 8


def _read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int
) -> list[Message]:
    """The records ``consumer`` sees of ``topic[partition]`` in ``[start, end)``."""
    kafka_call(
        f"cannot read {topic}", lambda: consumer.assign([TopicPartition(topic, partition, start)])
    )
    deadline = Deadline(DEFAULT_TIMEOUT_S, f"reading the tail of {topic}[{partition}]")
    return _drain(consumer, topic, {partition}, deadline, {partition: end})


def _drain(
    consumer: Consumer,
    topic: str,
    waiting: set[int],
    deadline: Deadline,
    ends: Mapping[int, int] | None = None,
) -> list[Message]:
    """What the assigned ``consumer`` reads of ``topic`` until each partition in
    ``waiting`` is at its end: the end of the partition, or the record before
    ``ends[partition]`` (records after a partition's end are not taken)."""
    out: list[Message] = []
    while waiting:
        deadline.check()
        for msg in consumer.consume(1000, deadline.remaining(0.1)):
            if is_eof(msg):
                waiting.discard(where(msg)[0])
                continue
            if not is_record(msg, topic):
                continue  # an event the client gets over by itself
            partition, offset = where(msg)
            if partition in waiting:
                out.append(msg)
                if ends is not None and offset >= ends[partition] - 1:
                    waiting.discard(partition)
    return out


def _partition_count(consumer: Consumer, topic: str) -> int:
    meta = kafka_retry(
        f"cannot describe {topic}", lambda: consumer.list_topics(topic, DEFAULT_TIMEOUT_S)
    )
    found = meta.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise KafkaClientError(f"cannot read {topic}: {found.error if found else 'no such topic'}")
    return len(found.partitions)


def where(msg: Message) -> tuple[int, int]:
    """``(partition, offset)`` of a consumed record."""
    partition, offset = msg.partition(), msg.offset()
    if partition is None or offset is None:  # only produced-but-unsent messages lack them
        raise KafkaClientError(f"a consumed record of {msg.topic()} has no partition or offset")
    return partition, offset


def is_eof(msg: Message) -> bool:
    """Whether ``msg`` is the end-of-partition event, not a record."""
    error = msg.error()
    return error is not None and error.code() == KafkaError._PARTITION_EOF


def is_record(msg: Message, topic: str) -> bool:
    """Whether ``msg`` is a record: False for events (end of partition, errors the client
    retries by itself); `KafkaClientError` for an error it cannot get over."""
    error = msg.error()
    if error is None:
        return True
    code = error.code()
    if error.fatal() or not (
        code == KafkaError._PARTITION_EOF or error.retriable() or code in TRANSIENT
    ):
        raise KafkaClientError(f"cannot read {topic}: {error}")
    return False


def close_quietly(client: Consumer | Producer | None) -> None:
    """Close a client that may be broken already; nothing is left to report."""
    if client is None:
        return
    # SystemError: confluent-kafka's report of a delivery callback run during close with
    # the client's fatal error still set (see `framework.kafka.transactions`).
    with contextlib.suppress(KafkaException, RuntimeError, AttributeError, SystemError):
        client.close()


def authentic_message(reader: str, msg: Message) -> bool:
    """`framework.wire.auth.authentic` for a consumed message."""
    partition, offset = msg.partition(), msg.offset()
    at = f"{msg.topic()}[{partition}]@{offset}"
    headers = cast("list[tuple[str, bytes | None]] | None", msg.headers())
    return authentic(reader, msg.topic() or "", msg.key(), msg.value(), headers, where=at)


_POSITION_MAC = " mac="


def _position_fields(
    group: str, topic: str, partition: int, offset: int, metadata: str
) -> tuple[str, bytes, bytes]:
    """What a position's MAC covers, as the topic, key and value of a record would be."""
    return f"position:{group}", f"{topic}:{partition}".encode(), f"{offset} {metadata}".encode()


def signed_positions(group: str, positions: Sequence[TopicPartition]) -> list[TopicPartition]:
    """``positions`` for ``group`` with a MAC appended to each one's metadata: a committed
    position moves where a task or a barrier resumes, so it is authenticated like a record
    (`verified_metadata`)."""
    out = []
    for tp in positions:
        metadata = tp.metadata or ""
        fields = _position_fields(group, tp.topic, tp.partition, tp.offset, metadata)
        text = metadata + _POSITION_MAC + current().sign(*fields).hex()
        out.append(TopicPartition(tp.topic, tp.partition, tp.offset, metadata=text))
    return out


def verified_metadata(group: str, tp: TopicPartition) -> str:
    """The metadata of a committed position `signed_positions` wrote, without its MAC;
    `ProtocolViolation` for one this pipeline did not commit (never trusted: it would move
    where reading resumes, skipping or repeating input)."""
    text = tp.metadata or ""
    metadata, sep, mac = text.rpartition(_POSITION_MAC)
    fields = _position_fields(group, tp.topic, tp.partition, tp.offset, metadata)
    try:
        mac_bytes = bytes.fromhex(mac)
    except ValueError:
        mac_bytes = b""
    if sep and current().verify(*fields, [(MAC_HEADER, mac_bytes)]):
        return metadata
    raise ProtocolViolation(
        f"group {group!r} on {tp.topic}[{tp.partition}]: committed position {tp.offset} "
        "carries no valid MAC of this pipeline (committed by someone else, or with another "
        "key); refusing to resume from it. Reset the group only together with the pipeline "
        "(docs/security.md)"
    )
