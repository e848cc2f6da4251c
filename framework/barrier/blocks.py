"""The barrier of a sink no tombstone can reach: items per slot, written ahead in blocks.

Tombstones come from a grouping's repairs only (`framework.core.graph.Graph.retracts`); a
sink with no grouping upstream receives final items alone, so nothing its barrier buffers
is ever cancelled. Such a barrier needs none of the per-item matching of
`framework.core.barrier.Barrier` (a dictionary per slot keyed by meta, a count per
payload, a sort at release) nor the per-item ledger of what the open transaction holds
(`framework.barrier.speculation.Speculation.held`). `SlotBuffer` keeps each slot's items
as the output records they become, in arrival order, and per slot how many of them the
open transaction holds: always a prefix, since items are written in arrival order. A
frame's rows become output records in one loop, without a `Meta` or a `Record` per item.

Which items go ahead follows `framework.barrier.speculation` with slots for items: none
while fewer than ``min_pending`` items are buffered; then every item before the frontier
(the latest slot taken), the frontier's own once a later slot arrives; a sealed
transaction takes items up to its latest slot only, and a release waits for it, or aborts
it, by the same `Speculation.hold`.

Release protocol (`BlockWriter.release`, a bundle released at min time ``M``):

1. With nothing open, begin a transaction.
2. Produce the released slots' items the transaction does not hold yet (it holds no item
   at or after ``M``: `SlotBuffer.on_min_time` raises `ProtocolViolation` before anything is
   written otherwise), then the headers, then the records and offsets the barrier adds
   (its positions, when due).
3. Commit; the next transaction starts with every buffered item before the frontier.

No item is ever cancelled, so no transaction is poisoned: the first step of the general
release protocol (abort a transaction holding a cancelled item) never applies.
"""

from __future__ import annotations

import heapq
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from framework.barrier.speculation import AheadWriter, Speculation
from framework.core.barrier import check_replay
from framework.core.time import GlobalTime
from framework.errors import KafkaClientError, PipelineError, ProtocolViolation
from framework.kafka.clients import OutRecordLike, SignedItem
from framework.kafka.transactions import TransactionalProducer
from framework.wire.auth import MAC_HEADER
from framework.wire.bundles import META_HEADER

_GT = itemgetter(0, 1, 2)  # slot, front, offset of a frame row


@dataclass(frozen=True, slots=True)
class SlotBundle:
    """A release of a `SlotBuffer`: bundle ``seq`` up to ``gt_last``.

    ``unwritten``: its items the open transaction does not hold yet, in slot order;
    ``items``: all its items; ``slots``: (slot, item count) of each slot it releases.
    """

    seq: int
    gt_last: GlobalTime
    unwritten: list[SignedItem]
    items: int
    slots: tuple[tuple[int, int], ...]


class SlotBuffer:
    """The buffered output of one sink no tombstone reaches, per slot, until min time passes
    it (see the module docstring)."""

    def __init__(
        self,
        partitions: int,
        gt_last: GlobalTime | None = None,
        next_seq: int = 0,
        *,
        strict: bool = False,
    ) -> None:
        """Output on ``partitions`` partitions; resume after the bundle that ended at
        ``gt_last``, the next bundle is ``next_seq``. ``strict``: an item at or before
        ``gt_last`` that no restart explains raises (`framework.core.barrier.Barrier`)."""
        self.partitions = partitions
        self._gt_last = gt_last
        self._restored = gt_last
        self._next_seq = next_seq
        self._strict = strict
        self._slots: dict[int, list[SignedItem]] = {}
        self._heap: list[int] = []
        self._written: dict[int, int] = {}  # slot -> items the open transaction holds
        self._dirty: set[int] = set()  # slots that may hold items not written yet
        self.pending = 0
        """Items buffered."""
        self.frontier = -1
        """The latest slot taken."""
        self.replays_dropped = 0
        """Items dropped as at or before ``gt_last`` (replays after a restart)."""

    @property
    def gt_last(self) -> GlobalTime | None:
        """Global time of the last release; everything at or before it is done."""
        return self._gt_last

    @property
    def next_seq(self) -> int:
        """Sequence number of the next non-empty bundle."""
        return self._next_seq

    def take(self, rows: Sequence[Any], where: str) -> GlobalTime:
        """Buffer the rows of a pre-barrier frame (`framework.wire.frames`, not keyed),
        each an output record signed by the last stage. Returns the latest
        item's time. `ProtocolViolation` for a tombstone, a payload that is no signed
        output record, or (strict) an item after a release passed its slot."""
        if not rows:
            raise ProtocolViolation(f"{where}: a pre-barrier frame without items")
        slots, heap, partitions = self._slots, self._heap, self.partitions
        floor = -1 if self._gt_last is None else self._gt_last.slot
        crc32 = zlib.crc32
        taken = 0
        try:
            for s, f, o, _c, _t, b, _a, (key, value, meta_bytes, mac) in rows:
                if s <= floor and self._replayed(GlobalTime(s, f, o)):
                    continue
                if b or type(value) is not bytes:
                    raise ProtocolViolation(
                        f"{where}: {'a tombstone' if b else 'an item that is no output record'}"
                        f" at slot {s} reached the barrier of a sink no grouping precedes"
                    )
                bucket = slots.get(s)
                if bucket is None:
                    bucket = slots[s] = []
                    heapq.heappush(heap, s)
                p = f % partitions if key is None else crc32(key) % partitions
                bucket.append((p, key, value, [(META_HEADER, meta_bytes), (MAC_HEADER, mac)]))
                taken += 1
        except (TypeError, ValueError) as exc:  # a row or payload of another shape
            raise ProtocolViolation(f"{where}: malformed pre-barrier item ({exc})") from exc
        latest = GlobalTime(*max(map(_GT, rows)))
        self.pending += taken
        self.frontier = max(self.frontier, latest.slot)
        self._dirty.update(map(itemgetter(0), rows))
        return latest

    def _replayed(self, gt: GlobalTime) -> bool:
        """Whether an item at ``gt`` is at or before ``gt_last``: counted and dropped, or
        `ProtocolViolation` if strict and no restart explains it (`check_replay`)."""
        gt_last = self._gt_last
        if gt_last is None or gt > gt_last:
            return False
        self.replays_dropped += 1
        if self._strict:
            check_replay(gt, gt_last, self._restored)
        return True

    def releasable(self, slot: int) -> bool:
        """Whether `release` at ``slot`` would release any item."""
        return bool(self._heap) and self._heap[0] < slot

    def unwritten(self, below: int) -> tuple[list[SignedItem], int]:
        """The buffered items of slots below ``below`` the open transaction does not hold
        yet, in slot order, and the latest of their slots; from now on it holds them."""
        ready = sorted(s for s in self._dirty if s < below)
        out: list[SignedItem] = []
        top = -1
        slots, written = self._slots, self._written
        for s in ready:
            self._dirty.discard(s)
            bucket = slots.get(s)
            done = written.get(s, 0)
            if bucket is not None and done < len(bucket):
                out.extend(bucket[done:] if done else bucket)
                written[s] = len(bucket)
                top = s
        return out, top

    def forget_written(self) -> None:
        """The open transaction ended: it holds nothing (every item is unwritten again)."""
        self._written.clear()
        self._dirty = set(self._slots)

    def on_min_time(self, slot: int) -> SlotBundle | None:
        """Release every item of a slot below ``slot``: a `SlotBundle` if there is any.

        ``gt_last`` advances to the end of slot ``slot - 1`` even without one.
        `ProtocolViolation` if the open transaction holds an item at or after ``slot``
        and there is a bundle to commit with it (a release must wait for it: `BlockWriter.
        holds`).
        """
        gt_last = GlobalTime.slot_end(slot - 1)
        if self._gt_last is not None and gt_last <= self._gt_last:
            return None
        heap = self._heap
        if heap and heap[0] < slot:
            later = [s for s, n in self._written.items() if n and s >= slot]
            if later:
                raise ProtocolViolation(
                    f"the open bundle transaction holds items of slot {min(later)}, which a "
                    f"release at {slot} does not cover"
                )
        slots, written = self._slots, self._written
        unwritten: list[SignedItem] = []
        counts: list[tuple[int, int]] = []
        items = 0
        while heap and heap[0] < slot:
            s = heapq.heappop(heap)
            bucket = slots.pop(s)
            done = written.pop(s, 0)
            unwritten.extend(bucket[done:] if done else bucket)
            counts.append((s, len(bucket)))
            items += len(bucket)
            self._dirty.discard(s)
        self._gt_last = gt_last
        if not items:
            return None
        self.pending -= items
        bundle = SlotBundle(self._next_seq, gt_last, unwritten, items, tuple(counts))
        self._next_seq += 1
        return bundle


def admit(spec: Speculation, buffer: SlotBuffer, now: float) -> list[SignedItem]:
    """What goes into the open transaction now, by the rules of the module docstring
    (taken as held by ``buffer`` and ``spec``)."""
    if not spec.enabled or spec.paused or (not spec.size and buffer.pending < spec.min_pending):
        return []
    sealed = spec.sealed_at is not None
    items, top = buffer.unwritten(
        min(buffer.frontier, spec.max_slot + 1) if sealed else buffer.frontier
    )
    if items:
        spec.took_count(len(items), top, now)
    return items


class BlockWriter(AheadWriter):
    """Bundles of one output topic from its `SlotBuffer` (``buffer``, attached once the
    start-up knows where to resume), each in a transaction opened ahead of its release (the
    module docstring)."""

    buffer: SlotBuffer | None = None

    def _buffer(self) -> SlotBuffer:
        if self.buffer is None:
            raise PipelineError(f"{self.transactional_id}: no buffer attached")
        return self.buffer

    def write_ahead(self) -> None:
        """Write what the rules of the module docstring admit now into the open
        transaction (beginning one if none is open)."""
        items = admit(self.speculation, self._buffer(), time.monotonic())
        if not items:
            return
        txn = self._require()
        try:
            self._write(txn, items)
        except (KafkaException, BufferError) as exc:
            self._abandon(txn)
            raise KafkaClientError(
                f"{self.transactional_id!r}: writing {len(items)} items ahead failed: {exc}"
            ) from exc
        self.stats.ahead += len(items)

    def _write(self, txn: TransactionalProducer, items: list[SignedItem]) -> None:
        """Produce ``items`` into the open transaction, beginning one if none is open."""
        self._begin(txn)
        txn.produce_signed(self.topic, items)
        counts = self._counts
        for item in items:
            counts[item[0]] += 1

    def holds(self, slot: int) -> bool:
        """Whether a release at min time ``slot`` must wait (`Speculation.hold`)."""
        return self._holds(slot, self._buffer().releasable(slot))

    def release(
        self,
        bundle: SlotBundle,
        failpoint: str | None = None,
        records: Sequence[OutRecordLike] = (),
        positions: Sequence[TopicPartition] = (),
    ) -> None:
        """Make ``bundle``, just taken from the buffer, visible, with ``records`` and the
        consumer's ``positions`` in the same transaction: the release protocol of the
        module docstring."""
        # Steps 1-3
        self._release(
            bundle.seq,
            bundle.gt_last,
            lambda txn: self._write(txn, bundle.unwritten),
            records=records,
            positions=positions,
            failpoint=failpoint,
        )
        self.write_ahead()

    def _forget(self) -> None:
        if self.buffer is not None:
            self.buffer.forget_written()
