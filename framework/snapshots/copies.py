"""Step 2 of a snapshot: per hash unit, a copy of the grouping state read from its changelog.

The copies are kept between snapshots and read incrementally (read_committed), so a
snapshot costs what the changelogs gained since the last one.

When is a read complete? Min time ``M`` tells that every item below ``M`` was received,
its receipt ack committed in one transaction with the changelog records. Those records
are therefore below the high watermark of any moment after ``M`` was seen (a producer
sends every record before it commits), but the transaction's commit marker may not be
written to the changelog yet: ``commit_transaction`` returns, and the acks become
visible, before the broker has written the markers of every partition. So:

1. `mark` the high watermarks (read_uncommitted) after ``M`` was seen.
2. `settled` tells when every partition's last stable offset has passed its mark: no
   transaction holding records below the mark is still open, so the ones ``M`` needs are
   committed and readable. Until then the caller tries again later (an open transaction
   is a task's batch in progress, or a fenced one that the next attempt aborts).
3. `catch_up` reads each partition from its position to its last stable offset.

No timing assumption is involved, unlike waiting a fixed time for markers.

An aggregate's copy is an image of its changelog (`ChangelogImage`), cut at a slot ``S``:
every batch writes its min time first, so the image is applied up to the first batch whose
min time is past ``S`` and the records after it wait in memory for the next cut. Before
that batch every item below ``S`` was received (its min time says so), and nothing of it
was folded or emitted by a min time past ``S``. Compaction could remove a record before
the cut that a record after it supersedes; the cleaner leaves records younger than the
topic's ``min.compaction.lag.ms`` alone, so a cut is exact when the batch it stops at was
younger than that when read (`UnitCopy.stop_age_ms`, checked by the caller).
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from framework.core.grouping import Grouping
from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import DeadlineExceeded
from framework.kafka.changelog import outlived_deletions
from framework.kafka.clients import (
    QUICK_END,
    authentic_message,
    close_quietly,
    is_eof,
    is_record,
    kafka_retry,
    new_consumer,
    where,
)
from framework.plan.stage_state import ChangelogImage, Replayable, apply_changelog, apply_record
from framework.wire.changelog import FLOOR_KEY, MIN_TIME, MIN_TIME_KEY, read_record

Part = tuple[str, int]
Read = tuple[bytes | None, bytes | None, int]  # key, value, age in ms when read
_MARKS = (MIN_TIME_KEY, FLOOR_KEY)  # an image's records that are no key's bucket


@dataclass(slots=True)
class UnitCopy:
    """The state of one hash unit as its changelog holds it up to ``position`` (an image:
    but for ``pending``, the records after its last cut)."""

    state: Replayable
    fresh: Callable[[], Replayable]
    position: int = 0
    pending: deque[Read] = field(default_factory=deque)  # an image's records past its cut
    stop_age_ms: int | None = None  # the last cut stopped at a batch this old when read
    read_at: float | None = None  # when (monotonic) the last catch-up read it

    def start_over_if_outlived(self) -> None:
        """A fresh state read from the start if the last read `outlived_deletions` (a
        grouping's item gone, with the record its deletion cancels)."""
        if outlived_deletions(self.read_at):
            self.state, self.position, self.read_at = self.fresh(), 0, None
            self.pending.clear()

    @property
    def grouping(self) -> Grouping:
        """The state of a grouping's unit."""
        assert isinstance(self.state, Grouping), "not a grouping's copy"
        return self.state


class ChangelogCopies:
    """Copies of every partition of some changelog topics (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Mapping[str, tuple[int, int, int]],
        states: Mapping[str, tuple[int, Callable[[], Replayable]]] | None = None,
        images: Mapping[str, int] | None = None,
    ) -> None:
        """``topics``: changelog topic -> (partitions, grouping op id, window); ``states``:
        changelog topic -> (partitions, a fresh state of any stage); ``images``: an
        aggregate's changelog topic -> partitions, copied as cuttable images; `close` it."""
        self.bootstrap = bootstrap
        self.copies: dict[Part, UnitCopy] = {}
        for topic, (partitions, op_id, window) in topics.items():
            self._add(topic, partitions, functools.partial(Grouping, op_id, window))
        for topic, (partitions, fresh) in (states or {}).items():
            self._add(topic, partitions, fresh)
        for topic, partitions in (images or {}).items():
            self._add(topic, partitions, ChangelogImage)
        self.records = 0
        self._committed: Consumer = new_consumer(bootstrap, config=QUICK_END)
        self._uncommitted: Consumer = new_consumer(
            bootstrap, config={"isolation.level": "read_uncommitted"}
        )

    def _add(self, topic: str, partitions: int, fresh: Callable[[], Replayable]) -> None:
        self.copies.update({(topic, p): UnitCopy(fresh(), fresh) for p in range(partitions)})

    def mark(self) -> dict[Part, int]:
        """Step 1: every partition's high watermark now."""
        return {part: self._ends(self._uncommitted, part)[1] for part in self.copies}

    def settled(self, marks: Mapping[Part, int]) -> bool:
        """Step 2: whether every partition's last stable offset reached its mark."""
        return all(self._ends(self._committed, part)[1] >= mark for part, mark in marks.items())

    def catch_up(self, cut: int | None = None) -> int:
        """Step 3: apply what every changelog committed since the last call; records read.

        ``cut``: an image stops before the first batch whose min time is past it (module
        docstring); None applies everything.
        """
        ends: dict[Part, int] = {}
        for part, copy in self.copies.items():
            copy.start_over_if_outlived()
            copy.read_at = time.monotonic()
            low, stable = self._ends(self._committed, part)
            # Compaction or retention may have removed the start: read from what is left.
            copy.position = max(copy.position, low)
            if copy.position < stable:
                ends[part] = stable
        values = self._read(ends) if ends else {}
        for part, end in ends.items():
            copy = self.copies[part]
            if isinstance(copy.state, ChangelogImage):
                copy.pending.extend(r for r in values.get(part, []) if r[1] is not None)
            else:
                apply_changelog(copy.state, ((k, v) for k, v, _ in values.get(part, [])))
                copy.state.take_changed()  # a copy writes no changelog of its own
            copy.position = end
        for copy in self.copies.values():
            if isinstance(copy.state, ChangelogImage):
                _apply_until(copy, cut)
        count = sum(len(v) for v in values.values())
        self.records += count
        return count

    def inexact(self, max_age_ms: int) -> list[Part]:
        """Images whose last cut stopped at a batch older than ``max_age_ms`` when read:
        compaction may have removed records the cut needs."""
        return [
            part
            for part, copy in self.copies.items()
            if copy.stop_age_ms is not None and copy.stop_age_ms > max_age_ms
        ]

    def cut_short(self) -> int:
        """Images whose last cut stopped before a batch they had read (not at the end)."""
        return sum(1 for copy in self.copies.values() if copy.stop_age_ms is not None)

    def image(self, topic: str, partition: int) -> ChangelogImage:
        """An aggregate unit's image, as cut by the last `catch_up`."""
        state = self.copies[(topic, partition)].state
        assert isinstance(state, ChangelogImage), "not an aggregate's copy"
        return state

    def snapshot(self, topic: str, partition: int, below: int) -> dict[str, Any]:
        """`Grouping.snapshot` of one unit's copy: the state after every item below ``below``."""
        return self.copies[(topic, partition)].grouping.snapshot(below=below)

    def close(self) -> None:
        """Close the consumers."""
        close_quietly(self._committed)
        close_quietly(self._uncommitted)

    def _ends(self, consumer: Consumer, part: Part) -> tuple[int, int]:
        # A read_committed consumer is told the last stable offset, a read_uncommitted one
        # the high watermark.
        tp = TopicPartition(*part)
        low, high = kafka_retry(
            f"cannot read the offsets of {part[0]}[{part[1]}]",
            lambda: consumer.get_watermark_offsets(tp, DEFAULT_TIMEOUT_S, cached=False),
        )
        return int(low), int(high)

    def _read(self, ends: Mapping[Part, int]) -> dict[Part, list[Read]]:
        """Committed records of each partition from its position to its end, oldest first
        (the key tells an aggregate's min time from a bucket), with their age when read."""
        consumer = self._committed
        start = [TopicPartition(t, p, self.copies[(t, p)].position) for t, p in ends]
        kafka_retry("cannot read the changelogs", lambda: consumer.assign(start))
        values: dict[Part, list[Read]] = {part: [] for part in ends}
        waiting = set(ends)
        deadline = Deadline(DEFAULT_TIMEOUT_S)
        try:
            while waiting:
                if deadline.expired:
                    raise DeadlineExceeded(f"changelogs {sorted(waiting)} not read to their end")
                for msg in consumer.consume(1000, 0.1):
                    topic = str(msg.topic())
                    if not is_eof(msg) and not is_record(msg, topic):
                        continue
                    partition, offset = where(msg)
                    part = (topic, partition)
                    if part not in waiting:
                        continue  # past its end, or left of an earlier assignment
                    if is_eof(msg):
                        # The stable end only grows; an end-of-partition below ours is stale.
                        if offset >= ends[part]:
                            waiting.discard(part)
                        continue
                    if offset < ends[part] and authentic_message("snapshot copies", msg):
                        age = int(time.time() * 1000) - msg.timestamp()[1]
                        values[part].append((msg.key(), msg.value(), age))
                    if offset + 1 >= ends[part]:
                        waiting.discard(part)
        finally:
            kafka_retry("cannot stop reading the changelogs", consumer.unassign)
        return values


def _apply_until(copy: UnitCopy, cut: int | None) -> None:
    """Apply an image's pending records up to the first min time past ``cut``.

    A bucket record is its key's whole bucket, so of a key's records up to there only the
    last is decoded and applied, keys in the order of their last records: the buckets are
    what applying every record in turn leaves. Min times and floors only grow, so their
    order among the buckets does not matter. A backlog's aggregate rewrites every key it
    holds at every commit, and the copies run in the driver beside the barrier.
    """
    pending, state = copy.pending, copy.state
    copy.stop_age_ms = None
    latest: dict[bytes, bytes] = {}
    taken = 0
    for kafka_key, value, age in pending:
        assert value is not None  # `catch_up` keeps records with a value only
        if kafka_key is None or kafka_key in _MARKS:
            kind, key, payload = read_record(kafka_key, value)
            if cut is not None and kind == MIN_TIME and payload > cut:
                copy.stop_age_ms = age
                break
            apply_record(state, kind, key, payload)
        else:
            latest.pop(kafka_key, None)  # moved to the end: the order of last records
            latest[kafka_key] = value
        taken += 1
    for kafka_key, value in latest.items():
        apply_record(state, *read_record(kafka_key, value))
    # Taken only once applied: a record that cannot be decoded leaves them all pending,
    # and applying them again gives the same image (a bucket replaces, min times grow).
    for _ in range(taken):
        pending.popleft()
