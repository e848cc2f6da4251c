"""Event-time windows: windows over a timestamp in the payload, final by min time.

Global time (ingestion order, exact) decides when a window is done; the payload's own
timestamp (``event_time``, ms) decides which window an item belongs to. A window ``[s, e)``
of event time is final once min time reaches ``e + lateness``, in ingestion slots. The
lateness bound assumes an item is ingested less than ``lateness`` after the end of its
window; what is exact is the rule itself:

* an item belongs to a window covering its event time iff it was *ingested* before that
  window's ``e + lateness`` (its global time's slot is below it). This depends on the
  item alone, never on when a task happened to see it: every such item arrives before min
  time passes ``e + lateness``, and every later one is excluded, on every replay alike;
* an item that no window takes is *late*: it raises `LateItem`, and the task sends it to
  the dead-letter topic with reason ``late`` (never dropped silently). An extractor that
  raises or returns something other than ms since the epoch sends the item there too.

Results carry the event-time bounds of their window and fold its items in global-time
order; their meta is the window's greatest item meta with the window's index as child id,
so a result is never below a held slot (every buffered item holds its ingestion slot).

Protocol on a min time ``m``:

1. Pop every window whose ``e + lateness`` is at or below ``m``.
2. Emit its result from the items that belong to it.
3. Drop the items no window still open needs, releasing their holds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from framework.core.grouping import Bucket
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed
from framework.core.windows import Aggregation, WindowAggregator, WindowResult, _slots
from framework.errors import UserFunctionError

__all__ = ["EventTimeAggregator", "LateItem"]


class LateItem(UserFunctionError):  # noqa: N818 - a state of a record, like DecodeError
    """An item whose windows were all final before it was ingested (a dead letter)."""


class EventTimeAggregator(WindowAggregator):
    """The physical ``aggregate(..., event_time=...)``: see the module docstring."""

    def __init__(self, op_id: int, aggregation: Aggregation, delta_ms: int) -> None:
        super().__init__(op_id, aggregation, delta_ms)
        extractor = aggregation.event_time
        assert extractor is not None
        self._extract: Callable[[Any], Any] = extractor
        self._lateness = (
            _slots(aggregation.lateness_ms, delta_ms, "lateness")
            if (aggregation.lateness_ms)
            else 0
        )

    def _event_slot(self, payload: Any) -> int:
        try:
            ms = self._extract(payload)
        except Exception as exc:
            raise UserFunctionError(f"event_time failed on {payload!r}: {exc!r}") from exc
        if type(ms) is not int or ms < 0:
            raise UserFunctionError(
                f"event_time returned {ms!r} for {payload!r}: it must return an int of "
                "ms since the epoch"
            )
        return ms // self.delta_ms

    def _windows(self, event_slot: int) -> range:
        """Indexes of the windows covering an event slot."""
        return range((event_slot - self._size) // self._step + 1, event_slot // self._step + 1)

    def _final_at(self, index: int) -> int:
        """The min time that makes window ``index`` final: its end plus the lateness."""
        return index * self._step + self._size + self._lateness

    def push(self, record: Record) -> list[Record]:
        """Buffer an item in the windows it belongs to; `LateItem` if it belongs to none."""
        keyed = record.value
        if not isinstance(keyed, Keyed):
            raise UserFunctionError(f"aggregate expects key_by output, got {type(keyed).__name__}")
        meta, key = record.meta, keyed.key
        event_slot = self._event_slot(keyed.value)
        value = (event_slot, keyed.value)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket()
        self._changed[key] = None
        if meta.tombstone:
            if bucket.remove(meta.as_item(), value) is not None:
                self._unhold(meta.gt.slot)
            return []
        dues = [self._final_at(i) for i in self._windows(event_slot)]
        if not any(meta.gt.slot < due for due in dues):
            if not bucket.metas and not bucket.early:
                del self._buckets[key]
            raise LateItem(
                f"late: event time {event_slot * self.delta_ms} ms, ingested at "
                f"{meta.gt.slot * self.delta_ms} ms, after its windows were final "
                f"(end + lateness {self.aggregation.lateness_ms} ms)"
            )
        if bucket.insert(meta, value) is None:
            return []
        self._hold(meta.gt.slot)
        self._due_windows(key, meta, event_slot)
        return []

    def _due_windows(self, key: object, meta: Meta, event_slot: int) -> None:
        for index in self._windows(event_slot):
            due = self._final_at(index)
            if meta.gt.slot < due and due > self._min_time:
                self._due_at(due, key)

    def _due_item(self, key: object, slot: int) -> None:
        """Unused: windows come from event time (`put_bucket` is overridden below)."""

    def on_min_time(self, slot: int) -> list[Record]:
        """Results of every window min time ``slot`` makes final, in due order."""
        self._min_time = max(self._min_time, slot)
        out: list[Record] = []
        touched: dict[object, None] = {}
        # Step 1
        while self._ends and self._ends[0] <= slot:
            due = heapq.heappop(self._ends)
            for key in self._due.pop(due):
                touched[key] = None
                # Step 2
                result = self._event_result(key, due)
                if result is not None:
                    out.append(result)
        # Step 3
        for key in touched:
            self._drop_done(key, slot)
        return out

    def _event_result(self, key: object, due: int) -> Record | None:
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        end = due - self._lateness
        start = end - self._size
        members = [
            (meta, value[1])
            for meta, value in zip(bucket.metas, bucket.values, strict=True)
            if start <= value[0] < end and meta.gt.slot < due
        ]
        if not members:
            return None  # its items were all retracted
        value = self.aggregation.combine([payload for _, payload in members])
        meta = members[-1][0].child(self.op_id, start // self._step)
        delta = self.delta_ms
        return Record(meta, WindowResult(key, start * delta, end * delta, value))

    def _drop_done(self, key: object, slot: int) -> None:
        """Items whose every window is final at min time ``slot`` leave, with their holds."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        keep_metas, keep_values = [], []
        for meta, value in zip(bucket.metas, bucket.values, strict=True):
            if any(slot < self._final_at(i) for i in self._windows(value[0])):
                keep_metas.append(meta)
                keep_values.append(value)
            else:
                self._unhold(meta.gt.slot)
        if len(keep_metas) == len(bucket.metas):
            return
        self._changed[key] = None
        bucket.metas[:], bucket.values[:] = keep_metas, keep_values
        if not bucket.metas and not bucket.early:
            del self._buckets[key]

    def put_bucket(self, key: object, state: tuple[Any, ...] | None) -> None:
        """Replace ``key``'s bucket by a changelog state (values are (event slot, payload))."""
        super().put_bucket(key, state)
        bucket = self._buckets.get(key)
        if bucket is not None:
            for meta, value in zip(bucket.metas, bucket.values, strict=True):
                self._due_windows(key, meta, value[0])

    @classmethod
    def restore(
        cls, op_id: int, aggregation: Aggregation, delta_ms: int, state: dict[str, Any]
    ) -> WindowAggregator:
        """An aggregator holding a `snapshot`'s state (its values already carry slots)."""
        agg = cls(op_id, aggregation, delta_ms)
        agg.put_min_time(int(state["min_time"]))
        for key, items, early in state["buckets"]:
            metas = [meta for meta, _ in items]
            agg.put_bucket(key, (metas, [value for _, value in items], early))
        agg._acquired = sorted(agg._holds)  # re-hold what the snapshot held
        return agg
