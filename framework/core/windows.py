"""Windowed aggregations: per key, per window, one final result released by min time.

Time windows (`Tumbling`, `Sliding`) cover slots ``[start, end)`` of global time; a window
is emitted exactly when the min time of the aggregate's segment reaches ``end`` (no item
with a slot below it can still arrive, nor a tombstone for one), never earlier. `Count`
windows are consecutive runs of ``size`` items of one key in meta order; a run is emitted
once min time passes the slot of its last item. Items are kept sorted by meta in the
grouping's `Bucket`, so a late item is simply inserted: it arrived before min time passed
it, by definition of min time, and is never dropped. Tombstones remove their item.

A result is emitted after its inputs were received, so the operation must stop the
downstream segment's min time from running ahead meanwhile: it *holds* every slot for
which it buffers an item (the runtime acks a hold into the downstream segment when it
appears and acks it again when it goes, exactly like an item in flight). A result's slot is
the slot of the last item of its window, so it is never below a held slot.

The result's meta is the last item's meta with a child id appended: the window's index
for time windows (sliding windows can share their last item), 0 for count windows.

A *rolling* aggregation (``KeyedStream.reduce`` / ``fold`` / ``dedup``) is this machinery
with a value carried per key: `framework.core.rolling`.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from framework.core.grouping import Bucket, meta_from_plain
from framework.core.meta import Record
from framework.core.ops import Keyed
from framework.core.reducers import Reducer
from framework.core.values import UserValue
from framework.errors import PipelineError, UserFunctionError


def slots_of(ms: int, delta_ms: int, what: str) -> int:
    """``ms`` in slots of ``delta_ms``; `PipelineError` naming ``what`` unless a positive
    multiple."""
    if ms <= 0 or ms % delta_ms:
        raise PipelineError(f"{what} must be a positive multiple of delta ({delta_ms} ms): {ms}")
    return ms // delta_ms


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Back-to-back windows of ``size_ms``, aligned to multiples of it since the epoch."""

    size_ms: int


@dataclass(frozen=True, slots=True)
class Sliding:
    """Windows of ``size_ms`` starting every ``step_ms``; an item is in size/step of them."""

    size_ms: int
    step_ms: int


@dataclass(frozen=True, slots=True)
class Count:
    """Consecutive runs of ``size`` items of one key; a last partial run is never emitted."""

    size: int


@dataclass(frozen=True, slots=True)
class Session:
    """Per key, maximal runs of items less than ``gap_ms`` apart; a session ends ``gap_ms``
    after its last item (`framework.core.sessions`)."""

    gap_ms: int


WindowSpec = Tumbling | Sliding | Count | Session


class WindowResult(NamedTuple):
    """The payload of a window's result.

    For time windows ``start_ms``/``end_ms`` bound the window; for count windows they
    bound the slots of its first and last item.
    """

    key: object
    start_ms: int
    end_ms: int
    value: object


class KeyValue(NamedTuple):
    """The payload of a rolling aggregation's update: ``key``'s value after an item (or a
    pane of items), as a table keyed by ``key`` would hold it."""

    key: object
    value: object


NO_VALUE: UserValue = object()
"""A rolling aggregation's value of a key that has none yet (None is a value)."""


class Step(Protocol):
    """A per-item rolling operation: ``(key, value so far or NO_VALUE, payload)`` -> the
    key's new value and the outputs (payloads), in order. Deterministic and picklable."""

    def __call__(
        self, key: object, acc: UserValue, payload: UserValue
    ) -> tuple[UserValue, Sequence[UserValue]]: ...


@dataclass(frozen=True, slots=True)
class Aggregation:
    """How a window's payloads (in meta order) become its result value.

    ``reduce(a, b)`` folds them pairwise; ``fold(acc, v)`` from ``initial``; with neither,
    the result is the tuple of payloads. ``combinable``: ``reduce`` is associative and
    commutative (exactly: a float sum is not), so a runner may pre-reduce the payloads of
    one key and window pane before the shuffle (map-side combining).

    ``rolling``: the value carries over from window to window of a key
    (`framework.core.rolling`); the window is ``Count(1)`` (an update per item) or
    ``Tumbling`` (an update per key and pane). ``ttl_ms``: a rolling key's value is
    forgotten once min time is ``ttl_ms`` past its last item. ``step``: per item, a `Step`
    instead of ``reduce``/``fold``: it gives the key's new value and the outputs (dedup,
    a table lookup). ``event_time``: windows over the payload's timestamp (ms), final
    ``lateness_ms`` after their end, updated by items up to ``updates_ms`` later
    (`framework.core.eventtime`).
    """

    window: WindowSpec
    reduce: Callable[[UserValue, UserValue], UserValue] | None = None
    fold: Callable[[UserValue, UserValue], UserValue] | None = None
    initial: UserValue = None
    combinable: bool = False
    rolling: bool = False
    ttl_ms: int | None = None
    step: Step | None = None
    event_time: Callable[[UserValue], int] | None = None
    lateness_ms: int = 0
    updates_ms: int = 0

    def __post_init__(self) -> None:
        if self.reduce is not None and self.fold is not None:
            raise PipelineError("aggregate takes reduce or fold, not both")
        if self.rolling and self.reduce is None and self.fold is None and self.step is None:
            raise PipelineError("a rolling aggregation needs reduce= or fold=")
        if (self.ttl_ms is not None or self.step is not None) and not self.rolling:
            raise PipelineError("ttl_ms and step are for rolling aggregations")
        if self.event_time is not None and (
            not isinstance(self.window, Tumbling | Sliding) or self.rolling or self.combinable
        ):
            raise PipelineError(
                "event_time windows are Tumbling or Sliding, without combinable= (panes of "
                "event time are not known before the shuffle)"
            )
        for name, ms in (("lateness_ms", self.lateness_ms), ("updates_ms", self.updates_ms)):
            if ms < 0 or (ms and self.event_time is None):
                raise PipelineError(f"{name} is a non-negative number of ms, with event_time=")
        if self.step is not None and (self.window != Count(1) or self.reduce or self.fold):
            raise PipelineError("a step works per item: no window, reduce or fold")
        if self.ttl_ms is not None and self.ttl_ms <= 0:
            raise PipelineError(f"ttl_ms must be a positive number of ms, got {self.ttl_ms}")
        if self.rolling and not isinstance(self.window, Tumbling) and self.window != Count(1):
            raise PipelineError("a rolling aggregation updates per item or per Tumbling pane")
        if self.combinable and (self.reduce is None or isinstance(self.window, Count | Session)):
            raise PipelineError(
                "combinable=True needs reduce= (associative and commutative) and a Tumbling "
                "or Sliding window: a fold, a tuple of payloads or a count cannot be pre-reduced"
            )
        if isinstance(self.window, Count) and self.window.size < 1:
            raise PipelineError(f"count window size must be >= 1, got {self.window.size}")
        if isinstance(self.window, Sliding) and self.window.step_ms > self.window.size_ms:
            raise PipelineError("sliding window step must not exceed its size")

    def combine(self, values: Sequence[UserValue]) -> UserValue:
        """The result value of a non-empty window."""
        if self.fold is not None:
            acc = self.initial
            for value in values:
                acc = self.fold(acc, value)
            return acc
        if self.reduce is not None:
            return self.finish(functools.reduce(self.reduce, values))
        return tuple(values)

    def finish(self, value: UserValue) -> UserValue:
        """The value a result shows for a reduced ``value`` (a built-in `Count` or `Mean`
        reduces to a tally and shows its count or mean; any other reduce shows it as is)."""
        reduce = self.reduce
        return reduce.finish(value) if isinstance(reduce, Reducer) else value

    def finisher(self) -> Callable[[UserValue], UserValue] | None:
        """`finish` where it changes the value, else None (a hot loop skips the call)."""
        reduce = self.reduce
        if isinstance(reduce, Reducer) and type(reduce).finish is not Reducer.finish:
            return reduce.finish
        return None

    def carry(self, acc: UserValue, values: Sequence[UserValue]) -> UserValue:
        """A rolling value: ``acc`` (`NO_VALUE`: none yet) updated by ``values`` in order."""
        if self.fold is not None:
            if acc is NO_VALUE:
                acc = self.initial
            for value in values:
                acc = self.fold(acc, value)
            return acc
        assert self.reduce is not None  # __post_init__: rolling needs reduce or fold
        if acc is NO_VALUE:
            return functools.reduce(self.reduce, values)
        return functools.reduce(self.reduce, values, acc)

    def pane_slots(self, delta_ms: int) -> int:
        """Slots of a pane: a run of slots that lies in the same set of windows (0: count)."""
        window = self.window
        if isinstance(window, Tumbling):
            return slots_of(window.size_ms, delta_ms, "window size")
        if isinstance(window, Sliding):
            size = slots_of(window.size_ms, delta_ms, "window size")
            return math.gcd(size, slots_of(window.step_ms, delta_ms, "window step"))
        return 0


class WindowAggregator:
    """The physical ``aggregate`` operation over `Keyed` records.

    Protocol on a min time ``m`` of its segment:

    1. Pop every due window (time: ``end <= m``; count: last item below ``m``).
    2. Emit its result, computed from the bucket in meta order; skip empty windows.
    3. Drop the items no future window needs, releasing their held slots.
    """

    def __init__(self, op_id: int, aggregation: Aggregation, delta_ms: int) -> None:
        self.op_id = op_id
        self.aggregation = aggregation
        self.delta_ms = delta_ms
        window = aggregation.window
        self._count = window.size if isinstance(window, Count) else 0
        self._size = self._step = 0
        if isinstance(window, Tumbling):
            self._size = self._step = slots_of(window.size_ms, delta_ms, "window size")
        elif isinstance(window, Sliding):
            self._size = slots_of(window.size_ms, delta_ms, "window size")
            self._step = slots_of(window.step_ms, delta_ms, "window step")
        self._buckets: dict[object, Bucket] = {}
        self._due: dict[int, dict[object, None]] = {}  # window end -> keys with items in it
        self._ends: list[int] = []  # heap of the ends in _due
        self._holds: dict[int, int] = {}  # slot -> buffered items in it
        self._free: dict[object, int] = {}  # count windows: leading items without a hold
        self._acquired: list[int] = []
        self._released: list[int] = []
        self._changed: dict[object, None] = {}  # keys whose bucket changed since take_changed
        self._min_time = 0
        self._floor = 0  # restored from a snapshot at this slot (`put_floor`)
        # Results below the floor, released by the epoch the snapshot was taken in: not
        # emitted again, counted.
        self.replayed = 0

    def _keyed_bucket(self, record: Record) -> tuple[Keyed, Bucket]:
        """The item's `Keyed` payload and its key's bucket (made if missing, marked changed)."""
        keyed = record.value
        if not isinstance(keyed, Keyed):
            raise UserFunctionError(f"aggregate expects key_by output, got {type(keyed).__name__}")
        bucket = self._buckets.get(keyed.key)
        if bucket is None:
            bucket = self._buckets[keyed.key] = Bucket()
        self._changed[keyed.key] = None
        return keyed, bucket

    def push(self, record: Record) -> list[Record]:
        """Buffer an item or remove a tombstone's item; results come only on min time."""
        keyed, bucket = self._keyed_bucket(record)
        meta = record.meta
        slot = meta.gt.slot
        if meta.tombstone:
            if bucket.remove(meta.as_item(), keyed.value) is not None:
                self._unhold(slot)
            return []
        if bucket.insert(meta, keyed.value) is None:
            return []
        self._hold(slot)
        if self._count:
            self._due_at(0, keyed.key)
        else:
            self._due_item(keyed.key, slot)
        return []

    def _due_item(self, key: object, slot: int) -> None:
        first = (slot - self._size) // self._step + 1
        for index in range(first, slot // self._step + 1):
            end = index * self._step + self._size
            if end > self._min_time:  # after a restore, earlier windows are done
                self._due_at(end, key)

    def on_min_time(self, slot: int) -> list[Record]:
        """Results of every window that min time ``slot`` completes, in window-end order."""
        self._min_time = max(self._min_time, slot)
        if self._count:
            return self._emit_counts(slot)
        out: list[Record] = []
        touched: dict[object, None] = {}
        # Step 1
        while self._ends and self._ends[0] <= slot:
            end = heapq.heappop(self._ends)
            for key in self._due.pop(end):
                touched[key] = None
                # Step 2
                result = self._time_result(key, end)
                if result is not None:
                    out.append(result)
        # Step 3
        cutoff = ((slot - self._size) // self._step + 1) * self._step
        for key in touched:
            self._drop_below(key, cutoff)
        return out

    def _drop_below(self, key: object, cutoff: int) -> None:
        """Step 3: drop ``key``'s items before slot ``cutoff``, releasing their holds."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            self._prune(key, bucket.below(cutoff))

    def advance(self, slot: int) -> list[Record]:
        """`on_min_time`, without the results below the restore floor (`put_floor`)."""
        out = self.on_min_time(slot)
        floor = self._floor
        if not floor or not out:
            return out
        kept = [record for record in out if record.meta.gt.slot >= floor]
        self.replayed += len(out) - len(kept)
        return kept

    def take_holds(self) -> tuple[list[int], list[int]]:
        """Slots newly held and newly released since the last call, in that order."""
        acquired, released = self._acquired, self._released
        self._acquired, self._released = [], []
        return acquired, released

    @property
    def held(self) -> frozenset[int]:
        """Slots currently held."""
        return frozenset(self._holds)

    @property
    def hold_counts(self) -> dict[int, int]:
        """Per held slot, how many buffered items hold it."""
        return dict(self._holds)

    @property
    def min_time(self) -> int:
        """The highest min time seen: every window ending at or before it was emitted."""
        return self._min_time

    def next_due(self) -> int | None:
        """The min time that emits the next window (None: no window can complete yet).

        Time windows: the earliest pending end. Count windows: one past the slot of the
        last item of the earliest full run among the keys that have one.
        """
        if not self._count:
            return self._ends[0] if self._ends else None
        size = self._count
        ends = [
            self._buckets[key].metas[size - 1].gt.slot + 1
            for key in self._due.get(0, {})
            if len(self._buckets[key].metas) >= size
        ]
        return min(ends, default=None)

    # A changelog (one record per changed key, plus the min time) keeps the state of a
    # time-window aggregator outside the process; holds and due windows are derived from it.

    def take_changed(self) -> list[object]:
        """Keys whose bucket changed since the last call."""
        changed = list(self._changed)
        self._changed.clear()
        return changed

    def bucket_state(self, key: object) -> tuple[UserValue, ...] | None:
        """One key's bucket as plain lists (metas, values, early tombstones), or None."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        return (list(bucket.metas), list(bucket.values), list(bucket.early))

    def put_bucket(self, key: object, state: tuple[UserValue, ...] | None) -> None:
        """Replace ``key``'s bucket by a changelog state.

        Holds change silently: the state was written with the acks of its holds.
        """
        old = self._buckets.pop(key, None)
        if old is not None:
            for meta in old.metas[self._free.pop(key, 0) :]:
                self._unhold(meta.gt.slot, silent=True)
        self._due.get(0, {}).pop(key, None)
        if state is None:
            return
        metas, values, early = state
        bucket = Bucket(
            [meta_from_plain(m) for m in metas],
            list(values),
            [(meta_from_plain(m), v) for m, v in early],
        )
        self._buckets[key] = bucket
        if self._count:
            self._put_count_bucket(key, bucket)
            return
        for meta in bucket.metas:
            slot = meta.gt.slot
            self._hold(slot, silent=True)
            self._due_item(key, slot)

    def _put_count_bucket(self, key: object, bucket: Bucket) -> None:
        # After on_min_time(m), exactly the items below m are free of holds (fewer than a
        # run: a full one would have been emitted), so min time alone says which are held.
        free = bucket.below(self._min_time)
        if free:
            self._free[key] = free
        for meta in bucket.metas[free:]:
            self._hold(meta.gt.slot, silent=True)
        if free < len(bucket.metas):
            self._due_at(0, key)

    @property
    def floor(self) -> int:
        """The slot of the snapshot this state was restored from (0: none)."""
        return self._floor

    def put_floor(self, slot: int) -> None:
        """Set the slot of the snapshot a new epoch's state was restored from.

        Every item of the new epoch has a slot at or after it (sources replay from the
        snapshot's offsets), so an item below it was restored. The snapshot was taken once
        min time had passed its slot: by then no slot below it was held, so every result
        with a slot below it had been emitted, and released or folded into a later
        snapshot's state downstream. Below the floor, then, items hold nothing (no ack of
        their hold exists in this epoch) and results are not emitted again (`advance`).
        """
        if slot <= self._floor:
            return
        self._floor = slot
        for held in [held for held in self._holds if held < slot]:
            del self._holds[held]

    def put_min_time(self, slot: int) -> None:
        """Set the min time a changelog recorded: windows ending by then were emitted."""
        if slot <= self._min_time:
            return
        self._min_time = slot
        while self._ends and self._ends[0] <= slot:
            del self._due[heapq.heappop(self._ends)]
        if self._count:  # buckets replayed before this record free what min time frees
            for key in list(self._buckets):
                bucket = self._buckets[key]
                self._put_count_bucket_again(key, bucket)

    def _put_count_bucket_again(self, key: object, bucket: Bucket) -> None:
        for meta in bucket.metas[self._free.pop(key, 0) :]:
            self._unhold(meta.gt.slot, silent=True)
        self._due.get(0, {}).pop(key, None)
        self._put_count_bucket(key, bucket)

    def _time_result(self, key: object, end: int) -> Record | None:
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        start = end - self._size
        lo, hi = bucket.below(start), bucket.below(end)
        if lo == hi:
            return None  # its items were all retracted
        meta = bucket.metas[hi - 1].child(self.op_id, start // self._step)
        return Record(meta, self._window_payload(key, start, end, bucket.values[lo:hi]))

    def _window_payload(self, key: object, start: int, end: int, values: list[UserValue]) -> object:
        """The payload of a time window's result (the rolling subclass carries instead)."""
        value = self.aggregation.combine(values)
        return WindowResult(key, start * self.delta_ms, end * self.delta_ms, value)

    def _emit_counts(self, slot: int) -> list[Record]:
        out: list[Record] = []
        size, delta = self._count, self.delta_ms
        keys = self._due.get(0, {})
        for key in list(keys):
            bucket = self._buckets[key]
            # Step 1
            while bucket.below(slot) >= size:
                # Step 2
                metas = bucket.metas
                first, last = metas[0].gt.slot, metas[size - 1].gt.slot
                value = self.aggregation.combine(bucket.values[:size])
                result = WindowResult(key, first * delta, (last + 1) * delta, value)
                out.append(Record(metas[size - 1].child(self.op_id, 0), result))
                # Step 3
                self._prune(key, size)
            if key in self._buckets:
                self._free_below(key, bucket, slot)
            if key not in self._buckets or self._free.get(key, 0) == len(bucket):
                del keys[key]
        return out

    def _free_below(self, key: object, bucket: Bucket, slot: int) -> None:
        """Release the holds of a count window's items below min time.

        Fewer than ``size`` of them are left, so every future run ends with an item not yet
        received, whose slot is at least min time: they need no hold.
        """
        free, below = self._free.get(key, 0), bucket.below(slot)
        for meta in bucket.metas[free:below]:
            self._unhold(meta.gt.slot)
        self._free[key] = max(free, below)

    def _due_at(self, end: int, key: object) -> None:
        keys = self._due.get(end)
        if keys is None:
            keys = self._due[end] = {}
            if end:  # count windows keep their keys at end 0, outside the heap
                heapq.heappush(self._ends, end)
        keys[key] = None

    def _prune(self, key: object, count: int) -> None:
        bucket = self._buckets[key]
        if count:
            self._changed[key] = None
        free = self._free.pop(key, 0)
        for meta in bucket.metas[free:count]:
            self._unhold(meta.gt.slot)
        if free > count:
            self._free[key] = free - count
        del bucket.metas[:count]
        del bucket.values[:count]
        if not bucket.metas and not bucket.early:
            del self._buckets[key]

    def _hold(self, slot: int, *, silent: bool = False) -> None:
        if slot < self._floor:
            return  # restored: see put_floor
        count = self._holds.get(slot, 0)
        if not count and not silent:
            self._acquired.append(slot)
        self._holds[slot] = count + 1

    def _unhold(self, slot: int, *, silent: bool = False) -> None:
        if slot < self._floor:
            return  # restored: see put_floor
        count = self._holds[slot] - 1
        if count:
            self._holds[slot] = count
        else:
            del self._holds[slot]
            if not silent:
                self._released.append(slot)

    def snapshot(self) -> dict[str, UserValue]:
        """The state as plain data: buffered items per key and the last min time."""
        buckets = [
            (key, list(zip(b.metas, b.values, strict=True)), list(b.early))
            for key, b in self._buckets.items()
        ]
        return {"min_time": self._min_time, "buckets": buckets}

    @classmethod
    def restore(
        cls, op_id: int, aggregation: Aggregation, delta_ms: int, state: dict[str, UserValue]
    ) -> WindowAggregator:
        """An aggregator holding a `snapshot`'s state; `take_holds` lists slots to re-hold."""
        agg = cls(op_id, aggregation, delta_ms)
        agg._min_time = int(state["min_time"])
        for key, items, early in state["buckets"]:
            for meta, value in early:
                agg.push(Record(meta_from_plain(meta).as_tombstone(), Keyed(key, 0, value)))
            for meta, value in items:
                agg.push(Record(meta_from_plain(meta), Keyed(key, 0, value)))
        return agg
