"""Rolling aggregations: per key, the value so far, one value of state per key.

`RollingAggregator` is the windowed aggregate's machinery (`framework.core.windows`) with a
value carried per key from window to window: per item it is a count window of one, per
pane of ``every_ms`` a tumbling window. Items wait in the key's bucket, holding their
slots, until min time passes them; then they are folded into the carried value in
global-time order, so the output equals in-order processing whatever the arrival order.
What it emits (a `KeyValue` per item or per key and pane; with a `Step`, what the step
returns: `First` for dedup, `framework.core.joins` for table lookups) depends on the input
alone: a replay writes the same.

Protocol on a min time ``m``:

1. Pop the due items (per item: below ``m``) or panes (end at or below ``m``).
2. Fold them into their key's carried value and emit (see above).
3. Drop the folded items, releasing their holds; the carried value stays.
4. With ``ttl_ms``: a key's value is gone for an item (pane) ``ttl_ms`` or more after the
   key's last one, decided at the item's own slot, so the step of min time does not
   matter; the value of a key without items waiting is dropped from memory once min time
   is that far past its last item (counted in ``expired``).

A changelog state of a key is its bucket plus ``(value, slot of its last item)``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from framework.core.meta import Record
from framework.core.values import UserValue
from framework.core.windows import NO_VALUE, Aggregation, KeyValue, WindowAggregator, slots_of


class First:
    """The `Step` of ``dedup``: a key's first payload passes, the others do not."""

    def __call__(
        self, key: object, acc: UserValue, payload: UserValue
    ) -> tuple[UserValue, Sequence[UserValue]]:
        """``payload`` alone if ``acc`` is `NO_VALUE`; the value is then True."""
        return True, (payload,) if acc is NO_VALUE else ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, First)

    def __hash__(self) -> int:
        return hash(First)


class RollingAggregator(WindowAggregator):
    """The physical ``reduce`` / ``fold`` / ``dedup``: see the module docstring."""

    def __init__(self, op_id: int, aggregation: Aggregation, delta_ms: int) -> None:
        super().__init__(op_id, aggregation, delta_ms)
        self._values: dict[object, UserValue] = {}  # key -> its value so far
        self._last: dict[object, int] = {}  # key -> slot of its last folded item
        ttl = aggregation.ttl_ms
        self._ttl = slots_of(ttl, delta_ms, "ttl_ms") if ttl is not None else 0
        self._expiries: list[tuple[int, int, object]] = []  # heap: (slot, tiebreak, key)
        self._tiebreak = itertools.count()
        self.expired = 0  # keys forgotten by their TTL
        # Items a step passed without output, by design (a dedup's repeats, an inner
        # join's stream items without a table value): counted, never silent.
        self.without_output = 0

    def on_min_time(self, slot: int) -> list[Record]:
        """Updates of every item (pane) min time ``slot`` passes; then TTL expiry."""
        out = super().on_min_time(slot)
        if self._ttl:
            self._expire(slot)
        return out

    def _emit_counts(self, slot: int) -> list[Record]:
        """Per item below min time ``slot``, in meta order per key: its update."""
        out: list[Record] = []
        keys = self._due.get(0, {})
        op_id, append, step = self.op_id, out.append, self.aggregation.step
        finish = self.aggregation.finisher()
        for key in list(keys):
            bucket = self._buckets[key]
            # Step 1
            ready = bucket.below(slot)
            if not ready:
                continue
            # Step 2
            acc = self._values.get(key, NO_VALUE)
            last = self._last.get(key)
            for meta, value in zip(bucket.metas[:ready], bucket.values[:ready], strict=True):
                at = meta.gt.slot
                if self._ttl and last is not None and last + self._ttl <= at:
                    acc = NO_VALUE  # Step 4, at the item's own time
                    self.expired += 1
                if step is not None:
                    acc, outputs = step(key, acc, value)
                    for index, output in enumerate(outputs):
                        append(Record(meta.child(op_id, index), output))
                    if not outputs:
                        self.without_output += 1
                else:
                    acc = self.aggregation.carry(acc, (value,))
                    shown = acc if finish is None else finish(acc)
                    append(Record(meta.child(op_id, 0), KeyValue(key, shown)))
                last = at
            assert last is not None
            if acc is NO_VALUE:  # a step deleted the key's value (a table's None)
                self._values.pop(key, None)
                self._last.pop(key, None)
            else:
                self._values[key] = acc
                self._touch(key, last)
            # Step 3: every item left is at or above min time, so it keeps its hold
            self._prune(key, ready)
            if key not in self._buckets or not bucket.metas:
                del keys[key]
        return out

    def _window_payload(self, key: object, start: int, end: int, values: list[UserValue]) -> object:
        # Step 2 for a pane: the key's value after the pane's last item.
        acc, last = self._values.get(key, NO_VALUE), self._last.get(key)
        if self._ttl and last is not None and last + self._ttl <= start:
            acc = NO_VALUE  # Step 4, at the pane's time
            self.expired += 1
        value = self.aggregation.carry(acc, values)
        self._values[key] = value
        self._touch(key, end - 1)
        return KeyValue(key, self.aggregation.finish(value))

    def _touch(self, key: object, slot: int) -> None:
        self._last[key] = slot
        if self._ttl:
            heapq.heappush(self._expiries, (slot + self._ttl, next(self._tiebreak), key))

    def _expire(self, slot: int) -> None:
        # Step 4: an entry is stale if the key had a later item since (or is gone).
        waiting: list[object] = []
        while self._expiries and self._expiries[0][0] <= slot:
            _, _, key = heapq.heappop(self._expiries)
            last = self._last.get(key)
            if last is None or last + self._ttl > slot:
                continue
            if key in self._buckets:  # items wait (or only early tombstones): ask again
                waiting.append(key)
                continue
            del self._values[key], self._last[key]
            self._changed[key] = None
            self.expired += 1
        for key in waiting:
            heapq.heappush(self._expiries, (slot + 1, next(self._tiebreak), key))

    def value_of(self, key: object) -> tuple[bool, UserValue]:
        """``(True, value)`` of ``key``: every item of it below `min_time` folded in global-time
        order, none at or after it; ``(False, None)`` for a key without a value (none yet,
        or forgotten by its TTL)."""
        if key in self._values:
            return True, self.aggregation.finish(self._values[key])
        return False, None

    def bucket_state(self, key: object) -> tuple[UserValue, ...] | None:
        """``(metas, values, early, (value, last slot))``; None once the key has neither
        items nor a value."""
        bucket = super().bucket_state(key)
        if key not in self._values:
            return bucket
        carried = (self._values[key], self._last[key])
        return (*(bucket or ([], [], [])), carried)

    def put_bucket(self, key: object, state: tuple[UserValue, ...] | None) -> None:
        """Replace ``key``'s bucket and value by a changelog state."""
        self._values.pop(key, None)
        self._last.pop(key, None)
        if state is not None and len(state) == 4:
            metas, values, early, (value, last) = state
            self._values[key] = value
            self._touch(key, last)
            state = (metas, values, early) if metas or early else None
        super().put_bucket(key, state)

    def snapshot(self) -> dict[str, UserValue]:
        """`WindowAggregator.snapshot` plus every key's value and last slot."""
        state = super().snapshot()
        state["values"] = [(key, value, self._last[key]) for key, value in self._values.items()]
        return state

    @classmethod
    def restore(
        cls, op_id: int, aggregation: Aggregation, delta_ms: int, state: dict[str, UserValue]
    ) -> WindowAggregator:
        """A rolling aggregator holding a `snapshot`'s state."""
        agg = super().restore(op_id, aggregation, delta_ms, state)
        assert isinstance(agg, RollingAggregator)
        for key, value, last in state.get("values", ()):
            agg._values[key] = value
            agg._touch(key, last)
        return agg
