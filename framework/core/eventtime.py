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
* with ``updates_ms``, an item ingested after its window's ``e + lateness`` but before
  ``e + lateness + updates_ms`` *updates* it: once min time passes the item, the window is
  released again, its value now including every update up to this one (in global-time
  order). Results are then upserts keyed by (key, window start): a compacted topic keyed
  so ends with the final value. The window's items are kept that long, without holding
  the output back (a retained item no longer holds its slot once its windows are out);
* an item that no window takes is *late*: it raises `LateItem`, and the task sends it to
  the dead-letter topic with reason ``late`` (never dropped silently). An extractor that
  raises or returns something other than ms since the epoch sends the item there too.

Results carry the event-time bounds of their window and fold its items in global-time
order; their meta is the window's greatest item meta with the window's index as child id,
so a result is never below a held slot (every buffered item holds its ingestion slot).

Protocol on a min time ``m`` (``due`` = a window's ``e + lateness``, ``horizon`` = ``due +
updates``):

1. Pop every due point at or below ``m``: a window's due, an update item's slot + 1, a
   window's horizon.
2. Emit a window's result at its due, from its members (ingested before the due); emit an
   update's result once ``m`` passes the update item, from the members and the updates up
   to it.
3. Release the hold of every item whose results are all out; drop the items no window
   needs any more (every horizon at or below ``m``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from framework.core.meta import Meta, Record
from framework.core.ops import Keyed
from framework.core.windows import Aggregation, WindowAggregator, WindowResult, slots_of
from framework.errors import UserFunctionError


class LateItem(UserFunctionError):  # noqa: N818 - a state of a record, like DecodeError
    """An item whose windows were all final before it was ingested (a dead letter)."""


class EventTimeAggregator(WindowAggregator):
    """The physical ``aggregate(..., event_time=...)``: see the module docstring."""

    def __init__(self, op_id: int, aggregation: Aggregation, delta_ms: int) -> None:
        super().__init__(op_id, aggregation, delta_ms)
        extractor = aggregation.event_time
        assert extractor is not None
        self._extract: Callable[[Any], Any] = extractor
        lateness, updates = aggregation.lateness_ms, aggregation.updates_ms
        self._lateness = slots_of(lateness, delta_ms, "lateness") if lateness else 0
        self._updates = slots_of(updates, delta_ms, "updates_ms") if updates else 0

    def _event_slot(self, payload: object) -> int:
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

    def _roles(self, event_slot: int, slot: int) -> tuple[list[int], list[int]]:
        """Windows an item ingested at ``slot`` is a member of, and those it updates."""
        members, updates = [], []
        for index in self._windows(event_slot):
            due = self._final_at(index)
            if slot < due:
                members.append(index)
            elif slot < due + self._updates:
                updates.append(index)
        return members, updates

    def _holds_at(self, value: tuple[int, Any], slot: int, m: int) -> bool:
        """Whether an item still holds its slot at min time ``m``: a result it is due in
        (a member window's, its own update's) is still to come."""
        members, updates = self._roles(value[0], slot)
        return any(self._final_at(i) > m for i in members) or bool(updates and slot >= m)

    def _needed_at(self, value: tuple[int, Any], slot: int, m: int) -> bool:
        members, updates = self._roles(value[0], slot)
        return any(self._final_at(i) + self._updates > m for i in members + updates)

    def push(self, record: Record) -> list[Record]:
        """Buffer an item for the windows it belongs to or updates; `LateItem` if none."""
        keyed = record.value
        event_slot = self._event_slot(keyed.value if isinstance(keyed, Keyed) else keyed)
        keyed, bucket = self._keyed_bucket(record)
        meta, key = record.meta, keyed.key
        value = (event_slot, keyed.value)
        if meta.tombstone:
            if bucket.remove(meta.as_item(), value) is not None:
                self._unhold(meta.gt.slot)
            return []
        if not any(self._roles(event_slot, meta.gt.slot)):
            if not bucket.metas and not bucket.early:
                del self._buckets[key]
            raise LateItem(
                f"late: event time {event_slot * self.delta_ms} ms, ingested at "
                f"{meta.gt.slot * self.delta_ms} ms, after its windows were final "
                f"(end + lateness {self.aggregation.lateness_ms} ms"
                f" + updates {self.aggregation.updates_ms} ms)"
            )
        if bucket.insert(meta, value) is None:
            return []
        self._hold(meta.gt.slot)
        self._due_points(key, meta.gt.slot, event_slot)
        return []

    def _due_points(self, key: object, slot: int, event_slot: int) -> None:
        """Step 1's points for one item, those still ahead of min time."""
        members, updates = self._roles(event_slot, slot)
        points = [self._final_at(i) for i in members]
        if updates:
            points.append(slot + 1)
        if self._updates:
            points += [self._final_at(i) + self._updates for i in members + updates]
        for point in points:
            if point > self._min_time:
                self._due_at(point, key)

    def _due_item(self, key: object, slot: int) -> None:
        """Unused: windows come from event time (`put_bucket` is overridden below)."""

    def on_min_time(self, slot: int) -> list[Record]:
        """Results of every window min time ``slot`` makes final or updates, in due order."""
        before = self._min_time
        self._min_time = max(before, slot)
        out: list[Record] = []
        touched: dict[object, None] = {}
        # Step 1
        while self._ends and self._ends[0] <= slot:
            point = heapq.heappop(self._ends)
            for key in self._due.pop(point):
                touched[key] = None
                # Step 2
                out += self._results(key, point)
        # Step 3
        for key in touched:
            self._release(key, before, self._min_time)
        return out

    def _results(self, key: object, point: int) -> list[Record]:
        bucket = self._buckets.get(key)
        if bucket is None:
            return []
        items = list(zip(bucket.metas, bucket.values, strict=True))
        out = []
        # A window final at this point: its first release.
        first = point - self._lateness - self._size
        if first % self._step == 0:
            result = self._window_result(key, first // self._step, items, None)
            if result is not None:
                out.append(result)
        # Update items ingested at point - 1: a release of each window they update.
        for meta, value in items:
            if meta.gt.slot == point - 1:
                for index in self._roles(value[0], meta.gt.slot)[1]:
                    result = self._window_result(key, index, items, meta)
                    if result is not None:
                        out.append(result)
        return out

    def _window_result(
        self, key: object, index: int, items: list[tuple[Meta, Any]], update: Meta | None
    ) -> Record | None:
        """Window ``index``'s result from its members and, for an update, the updates up
        to ``update`` (which gives the result its meta)."""
        start = index * self._step
        end, due = start + self._size, self._final_at(index)
        chosen = [
            (meta, value[1])
            for meta, value in items
            if start <= value[0] < end
            and (meta.gt.slot < due or (update is not None and meta <= update))
        ]
        if not chosen:
            return None  # its items were all retracted
        last = chosen[-1][0] if update is None else update
        value = self.aggregation.combine([payload for _, payload in chosen])
        meta = last.child(self.op_id, index)
        delta = self.delta_ms
        return Record(meta, WindowResult(key, start * delta, end * delta, value))

    def _release(self, key: object, before: int, m: int) -> None:
        """Step 3 for one key, min time having moved from ``before`` to ``m``."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        keep_metas, keep_values = [], []
        for meta, value in zip(bucket.metas, bucket.values, strict=True):
            slot = meta.gt.slot
            if self._holds_at(value, slot, before) and not self._holds_at(value, slot, m):
                self._unhold(slot)
            if self._needed_at(value, slot, m):
                keep_metas.append(meta)
                keep_values.append(value)
        if len(keep_metas) == len(bucket.metas):
            return
        self._changed[key] = None
        bucket.metas[:], bucket.values[:] = keep_metas, keep_values
        if not bucket.metas and not bucket.early:
            del self._buckets[key]

    def put_bucket(self, key: object, state: tuple[Any, ...] | None) -> None:
        """Replace ``key``'s bucket by a changelog state (values are (event slot, payload)):
        holds are what the items hold at the recorded min time."""
        old = self._buckets.pop(key, None)
        if old is not None:  # the parent would release every item's hold: only some hold
            for meta, value in zip(old.metas, old.values, strict=True):
                if self._holds_at(value, meta.gt.slot, self._min_time):
                    self._unhold(meta.gt.slot, silent=True)
        super().put_bucket(key, state)  # holds every item, silently
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        for meta, value in zip(bucket.metas, bucket.values, strict=True):
            if not self._holds_at(value, meta.gt.slot, self._min_time):
                self._unhold(meta.gt.slot, silent=True)
            self._due_points(key, meta.gt.slot, value[0])

    def put_min_time(self, slot: int) -> None:
        """The recorded min time; buckets replayed before it shed the holds it ends."""
        before = self._min_time
        super().put_min_time(slot)
        if self._min_time == before:
            return
        for bucket in self._buckets.values():
            for meta, value in zip(bucket.metas, bucket.values, strict=True):
                held = self._holds_at(value, meta.gt.slot, before)
                if held and not self._holds_at(value, meta.gt.slot, self._min_time):
                    self._unhold(meta.gt.slot, silent=True)

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
