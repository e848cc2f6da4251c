"""The FlameStream grouping (FlameStream runtime): speculative windows repaired by tombstones.

Per key, a bucket holds the received items sorted by meta. Every item emits the window (a
tuple of payloads) of the last ``N`` items of its bucket ending at it, with the item's meta
passed `Meta.through` the grouping's op id. Items may arrive out of order; the grouping
never waits: it repairs what it emitted too early, so the live (not yet cancelled)
outputs always equal the windows of the bucket as it stands. Once every item and
tombstone has arrived, that is the in-order result, whatever the arrival order was.

The min time of the grouping's segment prunes state: an item below it can no longer move,
so only the last ``N - 1`` of those are kept, as the start of future windows.
"""

from __future__ import annotations

import functools
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

from framework.core.meta import Meta, Record
from framework.core.ops import Keyed
from framework.core.time import GlobalTime
from framework.errors import PipelineError, UserFunctionError


@functools.lru_cache(maxsize=4096)
def slot_floor(slot: int) -> Meta:
    """A meta smaller than every meta in ``slot`` and larger than every meta before it.

    Cached: a window's end asks for the same few floors once per key (a window's emission
    of 1 500 keys spent a quarter of its aggregator time making them).
    """
    return Meta(GlobalTime.slot_start(slot))


@dataclass(slots=True)
class Bucket:
    """One key's items sorted by meta (a multiset), plus tombstones that overtook their item.

    ``metas`` and ``values`` are parallel lists so `bisect` runs on metas alone.
    """

    metas: list[Meta] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    early: list[tuple[Meta, Any]] = field(default_factory=list)

    def insert(self, meta: Meta, value: object) -> int | None:
        """Insert an item; its position, or None if it cancels an early tombstone."""
        if self.early and self._cancel_early(meta, value):
            return None
        pos = bisect_right(self.metas, meta)
        self.metas.insert(pos, meta)
        self.values.insert(pos, value)
        return pos

    def find(self, meta: Meta, value: object) -> int | None:
        """The position of the item ``(meta, value)``, or None if it is not here."""
        metas = self.metas
        pos = bisect_left(metas, meta)
        while pos < len(metas) and metas[pos] == meta:
            if self.values[pos] == value:
                return pos
            pos += 1
        return None

    def remove(self, meta: Meta, value: object) -> int | None:
        """Remove the item ``(meta, value)``; its former position, or None if not there yet."""
        pos = self.find(meta, value)
        if pos is None:
            # The tombstone overtook its item: remember it so the item cancels on arrival.
            self.early.append((meta, value))
            return None
        del self.metas[pos]
        del self.values[pos]
        return pos

    def _cancel_early(self, meta: Meta, value: object) -> bool:
        for i, (early_meta, early_value) in enumerate(self.early):
            if early_meta == meta and early_value == value:
                del self.early[i]
                return True
        return False

    def appends(self, meta: Meta) -> bool:
        """Whether an item at ``meta`` goes last with no early tombstone to check: in
        order, so nothing it follows needs a repair."""
        return not self.early and (not self.metas or self.metas[-1] <= meta)

    def below(self, slot: int) -> int:
        """How many items have a global time in a slot before ``slot``."""
        return bisect_left(self.metas, slot_floor(slot))

    def __len__(self) -> int:
        return len(self.metas)


@dataclass(slots=True)
class _Marked:
    """A key repaired once at the end of a batch (`Grouping.push_batch`): its bucket, the
    bucket as it was, the lowest and highest meta the batch touched, and which record of
    the batch each meta came from (else the first)."""

    bucket: Bucket
    metas: list[Meta]
    values: list[Any]
    low: Meta
    high: Meta
    first: int
    cause: dict[Meta, int]


def keyed_of(record: Record) -> Keyed:
    """The `Keyed` value a grouping takes; `PipelineError` for anything else."""
    keyed = record.value
    if not isinstance(keyed, Keyed):
        raise UserFunctionError(f"grouping expects key_by output, got {type(keyed).__name__}")
    return keyed


class Grouping:
    """A grouping physical operation with window ``window`` over `Keyed` records.

    Protocol on an item ``x`` landing at position ``i`` of its bucket (``N`` = window):

    1. Find the bucket of ``x``'s key.
    2. Remember the windows of the items that will follow ``x`` closely enough to see it
       (the next ``N - 1``): they were emitted, and ``x`` invalidates them.
    3. Insert ``x`` at its sorted position ``i``, unless a tombstone for ``x`` overtook it:
       then both vanish and nothing is emitted.
    4. Emit the window ending at ``x``.
    5. For each remembered follower whose window changed, emit the tombstone of its old
       window and its corrected window.

    A tombstone for ``x`` runs the mirror protocol: remember the windows of ``x`` and its
    ``N - 1`` followers, remove ``x``, emit the tombstone of ``x``'s window, then
    tombstone + correction for each follower whose window changed.
    """

    __slots__ = ("_buckets", "_dirty", "_touched", "op_id", "window")

    def __init__(self, op_id: int, window: int) -> None:
        if window < 1:
            raise PipelineError(f"grouping window must be >= 1, got {window}")
        self.op_id = op_id
        self.window = window
        self._buckets: dict[object, Bucket] = {}
        # Keys whose buckets may hold items a future min time can prune.
        self._dirty: dict[object, None] = {}
        # Items (key, meta) added, removed or cancelled since the last `take_changed`:
        # a changelog writes them, not their buckets.
        self._touched: dict[tuple[object, Meta], None] = {}

    def push(self, record: Record) -> list[Record]:
        """Process one item or tombstone; the outputs, in emission order."""
        keyed = keyed_of(record)
        # Step 1
        bucket = self._buckets.get(keyed.key)
        if bucket is None:
            bucket = self._buckets[keyed.key] = Bucket()
        self._dirty[keyed.key] = None
        if record.meta.tombstone:
            meta = record.meta.as_item()
            self._touched[(keyed.key, meta)] = None
            return self._retract(bucket, meta, keyed.value)
        self._touched[(keyed.key, record.meta)] = None
        return self._insert(bucket, record.meta, keyed.value)

    def push_batch(self, records: list[Record]) -> list[tuple[int, Record]]:
        """Process a batch; its net outputs, each with the index of the record it is due to.

        The live outputs afterwards are those of `push` on each record in turn, but a key
        that needs repairs is repaired once per batch, not once per record:

        1. A record of a key not yet repaired in this batch that arrives in order (an
           item, no early tombstones, nothing after it) is pushed as by `push`.
        2. Any other record of a key marks the key: the bucket as it stands is remembered
           (its windows are the key's live outputs), and this and every later record of
           the key in the batch only change the bucket, emitting nothing.
        3. At the end, per marked key, the windows of the old and the new bucket are
           compared where they can differ (from the lowest changed meta to ``N - 1``
           items past the highest): a window only in the old bucket is retracted by its
           tombstone, one only in the new bucket is emitted.

        Records ``k`` items out of order ahead of ``s`` followers cost ``s`` repairs, not
        ``k * s``: an output emitted and retracted within the batch never leaves it.
        """
        out: list[tuple[int, Record]] = []
        marked: dict[object, _Marked] = {}
        for index, record in enumerate(records):
            keyed = keyed_of(record)
            meta = record.meta.as_item() if record.meta.tombstone else record.meta
            mark = marked.get(keyed.key)
            if mark is None:
                bucket = self._buckets.get(keyed.key)
                in_order = bucket is None or bucket.appends(meta)
                if in_order and not record.meta.tombstone:
                    # Step 1
                    out.extend((index, o) for o in self.push(record))
                    continue
                # Step 2
                mark = marked[keyed.key] = self._mark(keyed.key, meta, index)
            mark.low, mark.high = min(mark.low, meta), max(mark.high, meta)
            mark.cause.setdefault(meta, index)
            self._touched[(keyed.key, meta)] = None
            if record.meta.tombstone:
                mark.bucket.remove(meta, keyed.value)
            else:
                mark.bucket.insert(meta, keyed.value)
        # Step 3
        for mark in marked.values():
            self._diff(mark, out)
        return out

    def _mark(self, key: object, meta: Meta, index: int) -> _Marked:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket()
        self._dirty[key] = None
        return _Marked(bucket, list(bucket.metas), list(bucket.values), meta, meta, index, {})

    def _diff(self, mark: _Marked, out: list[tuple[int, Record]]) -> None:
        """Step 3 of `push_batch` for one key: tombstones and windows, in meta order."""
        reach = self.window - 1
        old = self._windows(mark.metas, mark.values, mark.low, mark.high, reach)
        new = self._windows(mark.bucket.metas, mark.bucket.values, mark.low, mark.high, reach)
        for meta in sorted(old.keys() | new.keys()):
            before, after = list(old.get(meta, ())), list(new.get(meta, ()))
            for window in list(before):
                if window in after:
                    before.remove(window)
                    after.remove(window)
            cause = mark.cause.get(meta, mark.first)
            through = meta.through(self.op_id)
            out.extend((cause, Record(through.as_tombstone(), w)) for w in before)
            out.extend((cause, Record(through, w)) for w in after)

    def _windows(
        self, metas: list[Meta], values: list[Any], low: Meta, high: Meta, reach: int
    ) -> dict[Meta, list[tuple[Any, ...]]]:
        """Windows by meta at the positions a change within ``[low, high]`` can affect."""
        first = bisect_left(metas, low)
        end = min(len(metas), bisect_right(metas, high) + reach)
        found: dict[Meta, list[tuple[Any, ...]]] = {}
        for pos in range(first, end):
            found.setdefault(metas[pos], []).append(self._window_at(values, pos))
        return found

    def _insert(self, bucket: Bucket, meta: Meta, value: object) -> list[Record]:
        n = self.window
        metas, values = bucket.metas, bucket.values
        if bucket.appends(meta):
            # In-order arrival, the common case: nothing follows, nothing to repair.
            metas.append(meta)
            values.append(value)
            start = max(0, len(values) - n)
            return [Record(meta.through(self.op_id), tuple(values[start:]))]
        # Step 2
        pos = bisect_right(metas, meta)
        old = [self._window_at(values, p) for p in range(pos, min(pos + n - 1, len(values)))]
        # Step 3
        if bucket.insert(meta, value) is None:
            return []
        # Step 4
        out = [Record(meta.through(self.op_id), self._window_at(values, pos))]
        # Step 5
        self._repair(metas, values, pos + 1, old, out)
        return out

    def _retract(self, bucket: Bucket, meta: Meta, value: object) -> list[Record]:
        n = self.window
        values = bucket.values
        pos = bucket.find(meta, value)
        if pos is None:
            bucket.remove(meta, value)
            return []
        before = [self._window_at(values, p) for p in range(pos, min(pos + n, len(values)))]
        del bucket.metas[pos]
        del values[pos]
        out = [Record(meta.as_tombstone().through(self.op_id), before[0])]
        self._repair(bucket.metas, values, pos, before[1:], out)
        return out

    def _repair(
        self,
        metas: list[Meta],
        values: list[Any],
        first: int,
        old: list[tuple[Any, ...]],
        out: list[Record],
    ) -> None:
        """Emit tombstone + correction for followers ``first, first+1, ...`` (old windows)."""
        for offset, old_window in enumerate(old):
            pos = first + offset
            new_window = self._window_at(values, pos)
            if new_window == old_window:
                continue
            follower = metas[pos].through(self.op_id)
            out.append(Record(follower.as_tombstone(), old_window))
            out.append(Record(follower, new_window))

    def _window_at(self, values: list[Any], pos: int) -> tuple[Any, ...]:
        return tuple(values[max(0, pos - self.window + 1) : pos + 1])

    def on_min_time(self, slot: int) -> None:
        """Prune: below ``slot`` keep only the last ``N - 1`` items of each bucket."""
        keep = self.window - 1
        for key in list(self._dirty):
            bucket = self._buckets[key]
            below = bucket.below(slot)
            if below > keep:
                touched = self._touched
                for meta in bucket.metas[: below - keep]:
                    touched[(key, meta)] = None
                del bucket.metas[: below - keep]
                del bucket.values[: below - keep]
            if below >= len(bucket):
                # Nothing at or above min time: no later min time can prune more here.
                del self._dirty[key]
                if not bucket.metas and not bucket.early:
                    del self._buckets[key]

    def take_changed(self) -> list[tuple[object, Meta]]:
        """Items ``(key, meta)`` pushed, retracted or pruned since the last call: what a
        changelog writes (`item_state` of each)."""
        touched = list(self._touched)
        self._touched.clear()
        return touched

    def item_state(self, key: object, meta: Meta) -> tuple[list[Any], list[Any]]:
        """The payloads of ``key``'s items at ``meta`` and of its early tombstones there
        (both empty once gone)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return [], []
        metas = bucket.metas
        start, end = bisect_left(metas, meta), bisect_right(metas, meta)
        early = [v for m, v in bucket.early if m == meta] if bucket.early else []
        return bucket.values[start:end], early

    def put_item(self, key: object, meta: Meta, values: list[Any], early: list[Any]) -> None:
        """Set ``key``'s items at ``meta`` and its early tombstones there, as `item_state`
        gave them (both empty: none are left)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            if not values and not early:
                return
            bucket = self._buckets[key] = Bucket()
        metas = bucket.metas
        start, end = bisect_left(metas, meta), bisect_right(metas, meta)
        metas[start:end] = [meta] * len(values)
        bucket.values[start:end] = values
        if bucket.early or early:
            bucket.early = [(m, v) for m, v in bucket.early if m != meta]
            bucket.early.extend((meta, v) for v in early)
        if not metas and not bucket.early:
            del self._buckets[key]
            self._dirty.pop(key, None)
        else:
            self._dirty[key] = None

    def kept_below(self, key: object, below: int) -> list[Any]:
        """The payloads of ``key`` that `snapshot` (``below``) keeps: its last ``N - 1``
        items before slot ``below``, oldest first (the start of its next window)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return []
        end = bucket.below(below)
        return list(bucket.values[max(0, end - (self.window - 1)) : end])

    def bucket_state(self, key: object) -> tuple[list[Meta], list[Any], list[Any]] | None:
        """One key's bucket as plain lists (metas, values, early tombstones), or None."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        return (list(bucket.metas), list(bucket.values), list(bucket.early))

    def keys(self) -> int:
        """How many keys hold state."""
        return len(self._buckets)

    def size(self) -> int:
        """How many items all buckets hold."""
        return sum(len(b) for b in self._buckets.values())

    def snapshot(self, below: int | None = None) -> dict[str, Any]:
        """The state as plain data; with ``below``, only what items before that slot leave.

        With ``below`` = a min time, this is the state reached after consuming every item
        with a slot before it (FlameStream fault tolerance): the immutable part of each
        bucket, trimmed to its last ``N - 1`` items.
        """
        buckets = []
        for key, bucket in self._buckets.items():
            end = len(bucket) if below is None else bucket.below(below)
            start = 0 if below is None else max(0, end - (self.window - 1))
            items = list(zip(bucket.metas[start:end], bucket.values[start:end], strict=True))
            early = list(bucket.early) if below is None else []
            if items or early:
                buckets.append((key, items, early))
        return {"window": self.window, "buckets": buckets}

    @classmethod
    def restore(cls, op_id: int, state: dict[str, Any]) -> Grouping:
        """A grouping holding the state a `snapshot` returned."""
        grouping = cls(op_id, int(state["window"]))
        for key, items, early in state["buckets"]:
            bucket = Bucket(
                [meta_from_plain(m) for m, _ in items],
                [v for _, v in items],
                [(meta_from_plain(m), v) for m, v in early],
            )
            grouping._buckets[key] = bucket
            grouping._dirty[key] = None
        return grouping


def meta_from_plain(data: Any) -> Meta:
    """A `Meta` from its plain-tuple form (as a codec may hand it back)."""
    gt, child_ids, trace, tombstone = data
    return Meta(GlobalTime(*gt), tuple(child_ids), int(trace), bool(tombstone))
