"""Exactly-once task commits: outputs, acks and a marker in one Kafka transaction.

A stage task's transactional.id is stable across attempts (``<app>.<stage>.p<partition>``),
so a retried attempt fences the earlier one, and the marker (its input position committed
for the consumer group of the task) tells a re-executed batch that it is already done::

    committer = TaskCommitter.cached(bootstrap, "app.s1.p0")
    if committer.is_committed(group, topic, partition, end):
        ...  # skip: outputs and acks of [first, end) are already visible
    offsets = committer.commit(records, group, {(topic, partition): end})

Committers, group consumers and changelog readers are cached per process (Spark reuses its
Python workers). Workers of one pool take turns with a partition, so a cached producer is
often fenced by a sibling: `TaskCommitter.commit` then starts a new one (fencing all
others) and commits again unless the marker shows the batch committed meanwhile. That
retry is safe because after the restart no other producer can commit, and markers only
grow. Most fencings are seen coming: `is_committed` reads the marker, and a marker this
committer did not write means a sibling committed since, so its producer is dropped
before an attempt is wasted on it. Only flamepipe's errors escape: `KafkaClientError` for a
failed commit.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import KafkaClientError
from framework.kafka.cache import ProcessCache
from framework.kafka.changelog import ChangelogReader
from framework.kafka.retry import is_transient

__all__ = ["ChangelogReader", "OutRecordLike", "TaskCommitter", "close_cached", "group_consumer"]

_PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "enable.idempotence": True,
    "linger.ms": 5,
    # A task's outputs are produced in one burst before the commit; a full queue only
    # means "poll and retry", but a larger one makes that rare.
    "queue.buffering.max.messages": 1_000_000,
    # A grouping bucket is one changelog record; it may outgrow Kafka's 1 MB default
    # while min time lags (changelog topics allow the same, see MAX_RECORD_BYTES).
    "message.max.bytes": 16 * 1024 * 1024,
}


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


def _close_consumer(consumer: Consumer) -> None:
    # Already closed or broken: nothing left to release.
    with contextlib.suppress(KafkaException, RuntimeError):
        consumer.close()


def _close_committer(committer: TaskCommitter) -> None:
    committer.close()


_consumers: ProcessCache[tuple[str, str], Consumer] = ProcessCache(_close_consumer)
_committers: ProcessCache[tuple[str, str], TaskCommitter] = ProcessCache(_close_committer)


def group_consumer(bootstrap: str, group: str) -> Consumer:
    """This process's consumer of ``group``; it never subscribes.

    It reads committed offsets (read_committed, so the broker answers only once pending
    transactional offsets are settled) and provides the group metadata for
    ``send_offsets_to_transaction``.
    """
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    return _consumers.get((bootstrap, group), lambda: Consumer(config))


def close_cached() -> None:
    """Close every cached committer, consumer and changelog reader of this process."""
    _committers.clear()
    _consumers.clear()
    ChangelogReader.close_cached()


def _error(exc: KafkaException) -> KafkaError | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None


def _must_restart(exc: KafkaException) -> bool:
    """Whether the producer is unusable after ``exc`` (fenced or fatal)."""
    error = _error(exc)
    if error is None:
        return True
    # produce() on a producer already in a fatal state raises a plain _FATAL error whose
    # own fatal() flag is not set: it must restart all the same.
    return error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError._FATAL,
    )


class TaskCommitter:
    """The transactional producer of one transactional.id, initialised once, reused.

    Not thread-safe: one task at a time uses it, as a Python worker runs one at a time.
    """

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        *,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """A committer; its producer starts (and fences older ones) on first use."""
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.timeout_s = timeout_s
        self._config = {
            **_PRODUCER_DEFAULTS,
            **(config or {}),
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
        }
        self._producer: Producer | None = None
        # The marker this committer's producer wrote last, per (group, topic, partition).
        self._marked: dict[tuple[str, str, int], int] = {}
        self.fenced_attempts = 0
        """Attempts wasted on a producer that turned out fenced (`commit` step 5)."""

    @classmethod
    def cached(cls, bootstrap: str, transactional_id: str) -> TaskCommitter:
        """This process's committer of ``transactional_id`` (created on first use)."""
        return _committers.get(
            (bootstrap, transactional_id), lambda: cls(bootstrap, transactional_id)
        )

    def start(self) -> None:
        """Start the producer now if it is not running (commit does it on first use).

        Its init_transactions fences every older producer of the transactional.id and
        aborts their open transaction; a task that reads a changelog first should start
        its committer before, so no fenced attempt's transaction holds the changelog open.
        """
        self._ready()

    def committed_position(self, group: str, topic: str, partition: int) -> int | None:
        """The offset ``group`` committed for ``topic[partition]``, None if none.

        Sees every committed transaction: the consumer reads with read_committed, so the
        broker holds the answer until pending transactional offsets are settled.
        """
        deadline = Deadline(self.timeout_s)
        while True:
            try:
                (tp,) = group_consumer(self.bootstrap, group).committed(
                    [TopicPartition(topic, partition)], timeout=self.timeout_s
                )
                break
            except KafkaException as exc:
                # A group never used before has no coordinator loaded yet: ask again.
                if is_transient(exc) and not deadline.expired:
                    time.sleep(0.1)
                    continue
                raise KafkaClientError(
                    f"cannot read the committed offset of group {group!r} on "
                    f"{topic}[{partition}]: {exc}"
                ) from exc
        if tp.error is not None:
            raise KafkaClientError(f"offset of {group!r} on {topic}[{partition}]: {tp.error}")
        offset: int = tp.offset
        return offset if offset >= 0 else None

    def is_committed(self, group: str, topic: str, partition: int, end: int) -> bool:
        """Whether the task that ends its input at ``end`` (exclusive) already committed."""
        position = self.committed_position(group, topic, partition)
        key = (group, topic, partition)
        if self._producer is not None and position != self._marked.get(key, position):
            # A sibling committed since our producer's last commit, so it fenced ours.
            self._drop(self._producer)
        return position is not None and position >= end

    def commit(
        self,
        records: Sequence[OutRecordLike],
        group: str,
        positions: Mapping[tuple[str, int], int],
    ) -> list[int] | None:
        """Write ``records`` and commit ``positions`` for ``group``, all or nothing.

        Returns the offset each record was written at, in order (-1 where no delivery
        report named one), or None if another attempt had committed the batch instead.

        1. Begin a transaction (starting the producer first if needed: its
           init_transactions fences every older producer of the transactional.id and
           aborts their open transaction).
        2. Produce every record, polling while the local queue is full.
        3. Add ``positions`` ((topic, partition) -> next offset) for ``group``: the marker.
        4. Commit, retrying while the error is retriable.
        5. If the producer was fenced (another worker or attempt used the transactional.id
           since) or broke, start a new one, which fences all others. If the marker now
           covers ``positions``, another attempt committed this batch: done. Else steps
           1-4 once more.

        Any other failure aborts the transaction and raises `KafkaClientError`, and so does
        a second fencing.
        """
        offsets = [-1] * len(records)
        fenced = self._attempt(records, group, positions, offsets)
        if fenced is None:
            self._mark(group, positions)
            return offsets
        # Step 5
        self.fenced_attempts += 1
        self._ready()
        if positions and self._covered(group, positions):
            return None
        offsets = [-1] * len(records)  # the aborted attempt's offsets are not the records'
        again = self._attempt(records, group, positions, offsets)
        if again is not None:
            raise self._failed(len(records), group, again) from again
        self._mark(group, positions)
        return offsets

    def _mark(self, group: str, positions: Mapping[tuple[str, int], int]) -> None:
        for (topic, partition), offset in positions.items():
            self._marked[(group, topic, partition)] = offset

    def _attempt(
        self,
        records: Sequence[OutRecordLike],
        group: str,
        positions: Mapping[tuple[str, int], int],
        offsets: list[int],
    ) -> KafkaException | None:
        """Steps 1-4, noting delivered offsets; the error if the producer must restart,
        None if committed."""
        producer = self._ready()
        try:
            # Step 1
            producer.begin_transaction()
            # Step 2
            for index, record in enumerate(records):
                self._produce(producer, record, partial(_delivered, offsets, index))
            # Step 3
            marker = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
            metadata = group_consumer(self.bootstrap, group).consumer_group_metadata()
            producer.send_offsets_to_transaction(marker, metadata, self.timeout_s)
            # Step 4
            self._commit_transaction(producer)
        except KafkaException as exc:
            if _must_restart(exc):
                self._drop(producer)
                # Without its traceback: the frame would keep the dropped producer alive.
                return exc.with_traceback(None)
            self._abort(producer)
            raise self._failed(len(records), group, exc) from exc
        except Exception as exc:  # a malformed record, a queue full for too long
            self._abort(producer)
            raise self._failed(len(records), group, exc) from exc
        return None

    def _covered(self, group: str, positions: Mapping[tuple[str, int], int]) -> bool:
        """Whether ``group``'s committed offsets reach every one of ``positions``."""
        return all(
            (self.committed_position(group, topic, partition) or -1) >= offset
            for (topic, partition), offset in positions.items()
        )

    def _failed(self, count: int, group: str, exc: BaseException) -> KafkaClientError:
        return KafkaClientError(
            f"transaction of {self.transactional_id!r} failed ({count} records, "
            f"group {group!r}): {exc}"
        )

    def close(self) -> None:
        """Release the producer; an open transaction is aborted by the broker in time."""
        producer, self._producer = self._producer, None
        if producer is not None:
            _close_producer(producer)

    # -- internals ------------------------------------------------------------------------

    def _ready(self) -> Producer:
        """The producer, started if needed; a fenced or fatal init is retried once."""
        if self._producer is not None:
            return self._producer
        for attempt in (1, 2):
            producer = Producer(self._config)
            try:
                producer.init_transactions(self.timeout_s)
            except KafkaException as exc:
                _close_producer(producer)
                if attempt == 2 or not _must_restart(exc):
                    raise KafkaClientError(
                        f"cannot start the transactional producer {self.transactional_id!r} "
                        f"at {self.bootstrap}: {exc}"
                    ) from exc
                continue
            self._producer = producer
            return producer
        raise AssertionError("unreachable")  # pragma: no cover

    def _produce(self, producer: Producer, record: OutRecordLike, on_delivery: Any = None) -> None:
        kwargs: dict[str, Any] = {"key": record.key, "value": record.value}
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        if record.partition is not None:
            kwargs["partition"] = record.partition
        if record.headers:
            kwargs["headers"] = list(record.headers)
        deadline = Deadline(self.timeout_s)
        while True:
            try:
                producer.produce(record.topic, **kwargs)
                return
            except BufferError:
                if deadline.expired:
                    raise
                producer.poll(0.05)

    def _commit_transaction(self, producer: Producer) -> None:
        deadline = Deadline(self.timeout_s)
        while True:
            try:
                producer.commit_transaction(self.timeout_s)
                return
            except KafkaException as exc:
                error = _error(exc)
                if error is None or not error.retriable() or deadline.expired:
                    raise

    def _abort(self, producer: Producer) -> None:
        """Abort the open transaction; a producer that cannot is dropped for a fresh one."""
        try:
            producer.abort_transaction(self.timeout_s)
        except KafkaException:
            self._drop(producer)

    def _drop(self, producer: Producer) -> None:
        if self._producer is producer:
            self._producer = None
            self._marked.clear()  # a new producer has written no marker yet
        _close_producer(producer)


def _delivered(offsets: list[int], index: int, error: KafkaError | None, message: Any) -> None:
    # Served by the flush inside commit_transaction, so complete once it returns.
    if error is None:
        offsets[index] = message.offset()


def _close_producer(producer: Producer) -> None:
    # A fenced producer refuses to close cleanly; its handle is freed with the object.
    # Closing one with a fatal error pending runs the delivery callbacks of its unsent
    # records with that error still set, which confluent-kafka reports as a SystemError
    # (seen under kill -9 chaos: the task failed instead of taking the fencing path).
    with contextlib.suppress(KafkaException, RuntimeError, SystemError):
        producer.close()
