"""The barrier: holds output until min time passes it, then bundles it.

From the FlameStream runtime (release past min time) and its fault-tolerance section
(bundles with ``GT_last``).

Items and tombstones are buffered per slot and per item meta. An item and a tombstone
cancel when their metas agree (ignoring the flag) and their payloads are equal; payloads
may be unhashable, so each meta keeps a short list of ``[payload, count]`` pairs. A count
can legitimately reach 2 (after repeated grouping repairs the same output is emitted
twice and cancelled once) or go negative for a while (a tombstone overtook its item),
but a negative count when the slot is released means a tombstone without an item.

``GT_last`` makes the barrier idempotent under replay: a record at or before it was
already released in an earlier bundle and is dropped on arrival.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation

# Per item meta: flat [record_0, count_0, record_1, count_1, ...] where record_i is the item
# (never the tombstone) with that payload, released as is. Flat and untyped because it is
# allocated once per buffered item: a list of two is the cheapest container.
_Entries = list[Any]


def check_replay(gt: GlobalTime, gt_last: GlobalTime, restored: GlobalTime | None) -> None:
    """An item at ``gt``, at or before ``gt_last``, came to a barrier that started from
    ``restored``: a replay of what was out before it started, or (`ProtocolViolation`) an
    item that arrived after min time passed its slot, which dropping would lose in
    silence."""
    if restored is None or gt > restored:
        raise ProtocolViolation(
            f"an item at {gt} arrived after min time released {gt_last}: a min time "
            "was false (a source record later than front_lag_ms, or a lost ack); "
            "its output would be lost, so the barrier stops"
        )


@dataclass(frozen=True, slots=True)
class Bundle:
    """Records released together, atomically with the barrier's new ``gt_last``."""

    seq: int
    gt_last: GlobalTime
    records: tuple[Record, ...]


class Barrier:
    """Buffers records and releases them in meta order as min time passes them."""

    def __init__(
        self, gt_last: GlobalTime | None = None, next_seq: int = 0, *, strict: bool = False
    ) -> None:
        """Resume after the bundle that ended at ``gt_last``; the next bundle is ``next_seq``.

        ``strict``: a record at or before ``gt_last`` but after the ``gt_last`` it started
        from was not released before this barrier started (no restart explains it): it
        came after min time passed it, so `push` raises `ProtocolViolation` rather than
        drop it. The barrier service is strict; a barrier fed the same records twice on
        purpose (tests of replays) is not.
        """
        self._strict = strict
        self._gt_last = gt_last
        self._next_seq = next_seq
        self._slots: dict[int, dict[Meta, _Entries]] = {}
        self._heap: list[int] = []
        self._pending = 0
        self.replays_dropped = 0
        """Records dropped as at or before ``gt_last``: after a restart, replays; in a steady
        run there are none, so a count that grows then means a min time was false."""
        self._restored = gt_last  # what a restart's re-read may legitimately repeat

    @property
    def gt_last(self) -> GlobalTime | None:
        """Global time of the last release; everything at or before it is done."""
        return self._gt_last

    @property
    def next_seq(self) -> int:
        """Sequence number of the next non-empty bundle."""
        return self._next_seq

    @property
    def pending(self) -> int:
        """Buffered records not cancelled (items and unmatched tombstones)."""
        return self._pending

    def push(self, record: Record) -> int:
        """Buffer an item or tombstone; records at or before ``gt_last`` are replays.

        Returns the change in items to release: 1 for an item that adds one, -1 for a
        tombstone that cancels one, 0 otherwise (a replay, a tombstone ahead of its item, an
        item meeting its tombstone).
        """
        meta = record.meta
        gt = meta.gt
        gt_last = self._gt_last
        if gt_last is not None and gt <= gt_last:
            self.replays_dropped += 1
            if self._strict:
                check_replay(gt, gt_last, self._restored)
            return 0
        tombstone = meta.tombstone
        key = Meta(gt, meta.child_ids, meta.trace, False) if tombstone else meta
        bucket = self._slots.get(gt.slot)
        if bucket is None:
            bucket = self._slots[gt.slot] = {}
            heapq.heappush(self._heap, gt.slot)
        if tombstone:
            record = Record(key, record.value)
        entries = bucket.get(key)
        if entries is None:
            bucket[key] = [record, -1 if tombstone else 1]
            self._pending += 1
            return 0 if tombstone else 1
        return self._count(entries, record, -1 if tombstone else 1)

    def push_many(self, records: list[Record]) -> None:
        """`push` each record in order."""
        push = self.push
        for record in records:
            push(record)

    def _count(self, entries: _Entries, record: Record, delta: int) -> int:
        value = record.value
        for i in range(0, len(entries), 2):
            if entries[i].value == value:
                count: int = entries[i + 1]
                # A push cancels one record of the opposite sign or adds to the backlog.
                self._pending += 1 if count == 0 or (count > 0) == (delta > 0) else -1
                entries[i + 1] = count + delta
                return max(count + delta, 0) - max(count, 0)
        entries.append(record)
        entries.append(delta)
        self._pending += 1
        return max(delta, 0)

    def live(self, start: int, end: int) -> list[Record]:
        """The items buffered in slots ``[start, end)`` that a release would emit now
        (each as often as it would be), slot by slot."""
        if end - start <= 4:
            slots = [slot for slot in range(start, end) if slot in self._slots]
        else:
            slots = sorted(slot for slot in self._slots if start <= slot < end)
        out: list[Record] = []
        for slot in slots:
            for entries in self._slots[slot].values():
                for i in range(0, len(entries), 2):
                    count: int = entries[i + 1]
                    if count > 0:
                        out.extend([entries[i]] * count)
        return out

    def releasable(self, slot: int) -> bool:
        """Whether `on_min_time` at ``slot`` would look at any buffered slot."""
        return bool(self._heap) and self._heap[0] < slot

    def on_min_time(self, slot: int) -> Bundle | None:
        """Release every item with a slot below ``slot``; a Bundle if there is any.

        ``gt_last`` advances to the end of slot ``slot - 1`` even without a bundle.
        """
        gt_last = GlobalTime.slot_end(slot - 1)
        if self._gt_last is not None and gt_last <= self._gt_last:
            return None
        records: list[Record] = []
        heap = self._heap
        while heap and heap[0] < slot:
            self._release(self._slots.pop(heapq.heappop(heap)), records)
        self._gt_last = gt_last
        if not records:
            return None
        bundle = Bundle(self._next_seq, gt_last, tuple(records))
        self._next_seq += 1
        return bundle

    def _release(self, bucket: dict[Meta, _Entries], out: list[Record]) -> None:
        """Append the bucket's surviving items to ``out`` in meta order."""
        append = out.append
        before = len(out)
        for key in sorted(bucket):
            entries = bucket[key]
            if len(entries) == 2 and entries[1] == 1:  # the common case: one live item
                append(entries[0])
                continue
            for i in range(0, len(entries), 2):
                count: int = entries[i + 1]
                if count == 0:
                    continue
                if count < 0:
                    raise ProtocolViolation(
                        f"{-count} tombstone(s) without an item at release: {key}"
                    )
                out.extend([entries[i]] * count)
        self._pending -= len(out) - before
