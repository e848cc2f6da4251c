"""A live view of an application's min times, for the barrier and the Spark driver.

It reads ``<app>.mintime`` from the beginning, feeds every shard report to a core
`MinTimeListener` and keeps what the listener publishes: per segment (and globally) a min
time that only grows. Thread-safe: read it, wait for it, or subscribe to it from any thread.

Compaction. The topic is compacted by ``<shard>:<segment>``, which keeps a suffix of every
key's reports, and a listener fed any suffix is safe (docs/decisions/sharded-listener.md).
A hole inside the reports a listener has already taken is not: a gap in a partition's
offsets (the producer writes no transaction markers, so only compaction makes gaps) starts
a fresh listener from that record on. Min times already published stay published.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, Message

from framework.core.acker.sharded import MinTimeListener
from framework.core.messages import MinTimeNotification
from framework.errors import ProtocolViolation
from framework.kafka.admin import ensure_topics, partition_count
from framework.kafka.clients import (
    assign,
    authentic_message,
    close_quietly,
    is_eof,
    is_record,
    new_consumer,
    take,
    where,
)
from framework.kafka.topics import mintime_topic_spec
from framework.service import Service
from framework.wire.avro import decode_min_time
from framework.wire.topics import Topics

__all__ = ["MinTimeCallback", "MinTimeView"]

MinTimeCallback = Callable[[MinTimeNotification], None]


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
        self._consumer = consumer = new_consumer(self.bootstrap)
        assign(consumer, self.topic, dict.fromkeys(range(partitions)))
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
