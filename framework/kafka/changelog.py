"""Catch-up reads of a compacted changelog partition, as of its committed end.

A stateful task keeps its state per partition in the Python worker, with the changelog
offset it reflects; before a batch it reads only what was committed since (read_committed:
aborted writes of fenced attempts never show).

Why the end must *settle*. ``commit_transaction`` returns before the broker has written
the commit markers, so for a few milliseconds the last stable offset (the end a
read_committed reader sees) still stops before the transaction just committed, and a
reader stopping there would miss the previous batch's state. The reader therefore waits
until the stable end reaches the high watermark (no transaction open), at most
``settle_s``; a transaction still open by then belongs to a fenced attempt whose producer
is gone, and its writes will never be committed. (Starting the task's committer first,
`TaskCommitter.start`, aborts such a transaction at once.)

A task's own writes need no reading back: its state already holds them. After a commit,
`skip_own` moves the position past them when that provably skips nothing else.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Sequence
from itertools import pairwise

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import DeadlineExceeded, DecodeError, KafkaClientError
from framework.kafka.cache import ProcessCache
from framework.kafka.clients import authentic_message
from framework.kafka.retry import is_transient
from framework.kafka.security import secured
from framework.kafka.topics import CHANGELOG_DELETE_RETENTION_MS

_SETTLE_S = 5.0


def _close(consumer: Consumer) -> None:
    # Already closed: nothing left to release.
    with contextlib.suppress(KafkaException, RuntimeError):
        consumer.close()


# One reading (read_committed) and one probing (read_uncommitted) consumer per bootstrap,
# shared by every reader: each reader assigns its partition only while it reads.
_consumers: ProcessCache[tuple[str, str], Consumer] = ProcessCache(_close)
_readers: ProcessCache[tuple[str, str, int], ChangelogReader] = ProcessCache(
    lambda reader: None, limit=4096
)
_lock = threading.Lock()


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"flamepipe-changelog-{uuid.uuid4().hex}",  # never commits
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
        # A fetch still waiting for data on the previous assignment would delay the first
        # fetch of the next one by up to this long (default 500 ms per catch-up).
        "fetch.wait.max.ms": 10,
    }
    return _consumers.get((bootstrap, isolation), lambda: Consumer(secured(config)))


def outlived_deletions(read_at: float | None) -> bool:
    """Whether compaction may have removed deletions a reader that last read at
    ``read_at`` (monotonic; None: never) did not read: longer ago than half of
    `CHANGELOG_DELETE_RETENTION_MS`. The record a deletion cancels may then be gone from
    the log while the reader's state still holds it: only a new state read from the start
    is sure."""
    return read_at is not None and time.monotonic() - read_at > CHANGELOG_DELETE_RETENTION_MS / 2000


class ChangelogReader:
    """Reads one changelog partition incrementally: each `catch_up` returns what is new."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        *,
        settle_s: float = _SETTLE_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """A reader of ``topic[partition]`` that has read nothing yet."""
        self.bootstrap = bootstrap
        self.topic = topic
        self.partition = partition
        self.settle_s = settle_s
        self.timeout_s = timeout_s
        self.position: int | None = None
        """Next offset to read; None: from the beginning of the partition."""
        self.read_at: float | None = None
        """When (monotonic) the last `catch_up` began."""

    @classmethod
    def cached(cls, bootstrap: str, topic: str, partition: int) -> ChangelogReader:
        """This process's reader of ``topic[partition]`` (it remembers its position)."""
        key = (bootstrap, topic, partition)
        return _readers.get(key, lambda: cls(bootstrap, topic, partition))

    @property
    def outlived_deletions(self) -> bool:
        """`outlived_deletions` of this reader's last read (never: it read nothing)."""
        return self.position is not None and outlived_deletions(self.read_at)

    @staticmethod
    def close_cached() -> None:
        """Forget every cached reader and close the shared consumers (tests, shutdown)."""
        _readers.clear()
        _consumers.clear()

    def reset(self, position: int | None = None) -> None:
        """Read from ``position`` next (None: from the beginning), e.g. after state loss."""
        self.position = position

    def skip_own(self, offsets: Sequence[int]) -> bool:
        """Read past ``offsets`` next: a committed transaction of the caller wrote them here.

        Only if they start at the position and follow each other without a gap: then every
        offset from the position to the last of them holds one of the caller's records
        (nothing foreign, not even an aborted record or a marker, lies in between), and
        the position's contract (everything committed below it was returned) still holds
        past them. The caller's state already reflects its own records, so reading them
        back would only apply them again. Otherwise nothing changes and `catch_up` reads
        them as any other record. Returns whether the position moved.
        """
        if not offsets or self.position is None:
            return False
        if offsets[0] != self.position:
            return False
        if any(later != earlier + 1 for earlier, later in pairwise(offsets)):
            return False
        self.position = offsets[-1] + 1
        return True

    def catch_up(self) -> list[tuple[bytes, bytes | None]]:
        """Committed ``(key, value)`` records since the last call, oldest first.

        A None value is a deletion (tombstone). Raises `KafkaClientError` if Kafka fails or
        the end is not reached within ``timeout_s``.
        """
        with _lock:
            self.read_at = time.monotonic()
            deadline = Deadline(self.timeout_s)
            while True:
                try:
                    low, end = self._settled_end()
                    start = low if self.position is None else max(self.position, low)
                    records = self._read(start, end) if start < end else []
                    break
                except KafkaException as exc:
                    # A changelog created a moment ago may not have a leader yet.
                    if is_transient(exc) and not deadline.expired:
                        time.sleep(0.1)
                        continue
                    raise KafkaClientError(f"changelog {self._name}: {exc}") from exc
            self.position = max(end, self.position or 0)
            return records

    @property
    def _name(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def _settled_end(self) -> tuple[int, int]:
        """``(low watermark, stable end)`` once no transaction is open, or after settle_s."""
        tp = TopicPartition(self.topic, self.partition)
        committed = _consumer(self.bootstrap, "read_committed")
        uncommitted = _consumer(self.bootstrap, "read_uncommitted")
        deadline = Deadline(self.settle_s)
        while True:
            low, stable = committed.get_watermark_offsets(tp, self.timeout_s, cached=False)
            _, high = uncommitted.get_watermark_offsets(tp, self.timeout_s, cached=False)
            if stable >= high or deadline.expired:
                return low, stable
            time.sleep(0.005)

    def _read(self, start: int, end: int) -> list[tuple[bytes, bytes | None]]:
        consumer = _consumer(self.bootstrap, "read_committed")
        consumer.assign([TopicPartition(self.topic, self.partition, start)])
        try:
            return self._drain(consumer, end)
        finally:
            consumer.unassign()

    def _drain(self, consumer: Consumer, end: int) -> list[tuple[bytes, bytes | None]]:
        """Records below ``end``; stops at ``end`` or at the partition's end (EOF)."""
        records: list[tuple[bytes, bytes | None]] = []
        deadline = Deadline(self.timeout_s)
        while not deadline.expired:
            message = consumer.poll(0.1)
            if message is None or not self._mine(message):
                continue
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if (message.offset() or 0) >= end:
                    return records
                continue
            offset = message.offset() or 0
            if offset >= end:
                return records
            if authentic_message("changelog reader", message):
                records.append((self._key(message), message.value()))
            if offset + 1 >= end:
                return records
        raise DeadlineExceeded(f"changelog {self._name}: end offset {end} not reached in time")

    def _mine(self, message: Message) -> bool:
        # Messages of a previous assignment may still sit in the local queue.
        return bool(message.topic() == self.topic and message.partition() == self.partition)

    def _key(self, message: Message) -> bytes:
        key = message.key()
        if key is None:
            raise DecodeError(f"changelog {self._name}@{message.offset()} has no key")
        return bytes(key)
