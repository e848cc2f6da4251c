"""A live view of an application's min times, for the barrier and the Spark driver.

It reads ``<app>.mintime``, feeds every shard report to a core `MinTimeListener` and keeps
what the listener publishes: per segment (and globally) a min time that only grows.
Thread-safe: read it, wait for it, or subscribe to it from any thread.

Where it starts. Not at the beginning: a partition is read from the latest offset after
which every report key (``<shard>:<segment>``, ``*`` global) of its shards has a report,
found by reading keys backwards in growing windows (`suffix_start`). What it skips is what
compaction may remove (every record whose key has a later one), so it reads a log compaction
could have left, which is safe (below). The acker reports every slot's change, and the
topic's active segment is never compacted: a view started ten minutes into a run read
every report of those minutes before its first min time.

Compaction. The topic is compacted by ``<shard>:<segment>``, which keeps a suffix of every
key's reports, and a listener fed any suffix is safe (docs/decisions/sharded-listener.md).
A hole inside the reports a listener has already taken is not: a gap in a partition's
offsets (the producer writes no transaction markers, so only compaction makes gaps) starts
a fresh listener from that record on. Min times already published stay published.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, Message, TopicPartition

from framework.core.acker.sharded import MinTimeListener
from framework.core.messages import MinTimeNotification
from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import ProtocolViolation
from framework.kafka.admin import ensure_topics, partition_count
from framework.kafka.clients import (
    QUICK_END,
    assign,
    authentic_message,
    close_quietly,
    is_eof,
    is_record,
    kafka_retry,
    new_consumer,
    take,
    where,
)
from framework.kafka.topics import mintime_topic_spec
from framework.service import Service
from framework.wire.avro import decode_min_time
from framework.wire.topics import Topics

MinTimeCallback = Callable[[MinTimeNotification], None]

_WINDOW = 4096
"""Records of the first window `suffix_start` reads back; each next one is four times as
long."""

_MARGIN = 1024
"""Records `suffix_start` keeps before the oldest key's last report: reports of each shard
from before the latest vectors all shards share, so the listener publishes without waiting
for the acker's next reports (it may need a report of a shard from before the others'
latest to accept one)."""


def report_keys(shards: int, segments: Iterable[str]) -> list[tuple[bytes, int]]:
    """Every key the acker's reports take (``framework.acker.service.report_key``), with
    its shard."""
    names = [*segments, "*"]
    return [(f"{shard}:{name}".encode(), shard) for shard in range(shards) for name in names]


def suffix_start(bootstrap: str, topic: str, partition: int, keys: set[bytes]) -> int | None:
    """The latest offset of ``topic[partition]`` from which every one of ``keys`` that has
    a report has one (None: its first record).

    1. Read the keys (nothing decoded) of the last `_WINDOW` records; four times as many
       while some of ``keys`` has none there and records before the window remain.
    2. The start is the least offset of the last report of each key found, `_MARGIN`
       records earlier.

    Every record before the start has a later record of its key: compaction could have
    removed them all, and a view fed any log compaction leaves publishes no false min time
    (docs/decisions/sharded-listener.md). A key with no report in the whole partition
    scans it to its first record, as a view started at the beginning would read it.
    """
    consumer = new_consumer(bootstrap, config=QUICK_END)
    try:
        tp = TopicPartition(topic, partition)
        low, high = kafka_retry(
            f"cannot read the offsets of {topic}[{partition}]",
            lambda: consumer.get_watermark_offsets(tp, timeout=DEFAULT_TIMEOUT_S),
        )
        window = _WINDOW
        while True:
            # Step 1
            start = max(low, high - window)
            last = _last_offsets(consumer, topic, partition, start, high)
            if keys <= last.keys() or start <= low:
                break
            window *= 4
    finally:
        close_quietly(consumer)
    # Step 2
    found = [last[k] for k in keys if k in last]
    if not found or start <= low:
        return None
    first = min(found) - _MARGIN
    return first if first > low else None


def _last_offsets(
    consumer: Consumer, topic: str, partition: int, start: int, end: int
) -> dict[bytes, int]:
    """Each key's last offset in ``[start, end)`` of ``topic[partition]``."""
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = Deadline(DEFAULT_TIMEOUT_S, f"reading the report keys of {topic}[{partition}]")
    last: dict[bytes, int] = {}
    while True:
        deadline.check()
        for msg in take(consumer, 1000, deadline.remaining(0.1)):
            if is_eof(msg):
                return last
            if is_record(msg, topic):
                _, offset = where(msg)
                if offset >= end:
                    return last
                last[msg.key() or b""] = offset


class MinTimeView(Service):
    """Min times of ``app`` as its sharded acker publishes them (see the module docstring).

    ``reports`` counts the shard reports read, ``resets`` the fresh starts after gaps.
    """

    def __init__(
        self,
        bootstrap: str,
        app: str,
        shards: int,
        segments: Iterable[str],
        *,
        epoch: int = 0,
        poll_s: float = 0.05,
    ) -> None:
        """A view of ``shards`` acker shards tracking ``segments`` in ``epoch``; `start` it."""
        super().__init__(f"flamepipe-mintime-{app}")
        self.bootstrap = bootstrap
        self.app = app
        self.epoch = epoch
        self.topic = Topics(app, epoch).mintime
        self.shards = shards
        self.segments = tuple(segments)
        self.poll_s = poll_s
        self.resets = 0
        self.reports = 0
        self._listener = MinTimeListener(shards, self.segments)
        self._cond = threading.Condition()
        self._published: dict[str | None, int] = dict.fromkeys((*self.segments, None), 0)
        self._subscribers: list[MinTimeCallback] = []
        self._next: dict[int, int] = {}
        self._behind: set[int] = set()
        self._consumer: Consumer | None = None

    # -- reading ---------------------------------------------------------------------------

    def min_time(self, segment: str | None = None) -> int:
        """The min time of ``segment`` (None: global): no slot below it is in flight."""
        with self._cond:
            return self._value(segment)

    def _value(self, segment: str | None) -> int:
        try:
            return self._published[segment]
        except KeyError:
            raise ProtocolViolation(f"unknown segment {segment!r}") from None

    def wait_for(self, segment: str | None, slot: int, timeout: float) -> bool:
        """Wait until the min time of ``segment`` reaches ``slot``; False on timeout."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._value(segment) >= slot or self.error is not None or self.stopping,
                timeout,
            )
            self.check()
            return self._value(segment) >= slot

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until every report that existed at start has been read; False on timeout."""
        with self._cond:
            self._cond.wait_for(
                lambda: (self._ready.is_set() and not self._behind) or self.error is not None,
                timeout,
            )
            self.check()
            return self._ready.is_set() and not self._behind

    def subscribe(self, callback: MinTimeCallback) -> None:
        """Call ``callback`` (in the view's thread) with every min time that grows."""
        with self._cond:
            self._subscribers.append(callback)

    def unsubscribe(self, callback: MinTimeCallback) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        with self._cond:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

    # -- the loop --------------------------------------------------------------------------

    def _open(self) -> None:
        ensure_topics(self.bootstrap, [mintime_topic_spec(self.app, epoch=self.epoch)])
        partitions = partition_count(self.bootstrap, self.topic)
        keys = report_keys(self.shards, self.segments)
        starts = {
            p: suffix_start(
                self.bootstrap, self.topic, p, {k for k, shard in keys if shard % partitions == p}
            )
            for p in range(partitions)
        }
        self._consumer = consumer = new_consumer(self.bootstrap)
        assign(consumer, self.topic, starts)
        with self._cond:
            self._behind = set(range(partitions))

    def _step(self) -> None:
        assert self._consumer is not None
        for msg in take(self._consumer, 1000, self.poll_s):
            if is_eof(msg):
                self._caught_up(where(msg)[0])
            elif is_record(msg, self.topic):
                self._take(msg)

    def _caught_up(self, partition: int) -> None:
        with self._cond:
            if partition in self._behind:
                self._behind.discard(partition)
                self._cond.notify_all()

    def _take(self, msg: Message) -> None:
        partition, offset = where(msg)
        expected = self._next.get(partition)
        if expected is not None and offset > expected:
            # Compaction removed reports between two this listener took: start afresh.
            self._listener = MinTimeListener(self.shards, self.segments)
            self.resets += 1
        self._next[partition] = offset + 1
        value = msg.value()
        if not authentic_message("min-time view", msg):
            return  # never decoded: a forged report cannot move min time
        if value is None:
            raise ProtocolViolation(f"{self.topic}[{partition}]@{offset} has no value")
        published = self._listener.receive(decode_min_time(value))
        self.reports += 1
        self._publish(published)

    def _publish(self, notes: list[MinTimeNotification]) -> None:
        grown: list[MinTimeNotification] = []
        with self._cond:
            for note in notes:
                if note.slot > self._published[note.segment]:
                    self._published[note.segment] = note.slot
                    grown.append(note)
            if grown:
                self._cond.notify_all()
            callbacks = list(self._subscribers)
        for note in grown:
            for callback in callbacks:
                callback(note)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop reading; waiters wake up."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        super().stop(timeout)

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        close_quietly(consumer)
        with self._cond:
            self._cond.notify_all()
