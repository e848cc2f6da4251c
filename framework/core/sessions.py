"""Session windows: per key, runs of items less than a gap apart, final by min time.

A session of a key is a maximal run of its items (in global-time order) each less than
``gap`` slots after the one before; it ends ``gap`` slots after its last item. It is final
once min time reaches that end: every item still to come has a slot at or above min time,
so none can fall inside the session or bridge it to the next one. Late items (below the
end, before min time passes it) simply join the run they fall into and may merge two runs:
the buffered items are the truth, runs are recomputed from them.

Protocol on a min time ``m``, per key with buffered items:

1. Cut the key's items into runs, oldest first, while a run's end is at or below ``m``.
2. Emit each such run's `WindowResult` (start: its first item's slot; end: its last
   item's slot + gap; value: the aggregation of its payloads in global-time order), with
   the last item's meta and child id 0.
3. Drop the emitted items, releasing their holds (every buffered item holds its slot: a
   result's slot is its last item's, so it is never below a held slot).
"""

from __future__ import annotations

from collections.abc import Sequence

from framework.core.meta import Meta, Record
from framework.core.windows import Aggregation, Session, WindowAggregator, WindowResult, slots_of


class SessionAggregator(WindowAggregator):
    """The physical ``aggregate(Session(gap_ms))``: see the module docstring."""

    def __init__(self, op_id: int, aggregation: Aggregation, delta_ms: int) -> None:
        super().__init__(op_id, aggregation, delta_ms)
        window = aggregation.window
        assert isinstance(window, Session)
        self._gap = slots_of(window.gap_ms, delta_ms, "session gap")

    def _due_item(self, key: object, slot: int) -> None:
        # A key with items is due for a look at every min time (as for count windows).
        self._due_at(0, key)

    def on_min_time(self, slot: int) -> list[Record]:
        """Results of every session min time ``slot`` completes."""
        self._min_time = max(self._min_time, slot)
        out: list[Record] = []
        keys = self._due.get(0, {})
        delta, gap = self.delta_ms, self._gap
        for key in list(keys):
            bucket = self._buckets[key]
            metas, emitted = bucket.metas, 0
            # Step 1
            for first, last in self._runs(metas):
                end = metas[last].gt.slot + gap
                if end > slot:
                    break
                # Step 2
                value = self.aggregation.combine(bucket.values[first : last + 1])
                start = metas[first].gt.slot
                result = WindowResult(key, start * delta, end * delta, value)
                out.append(Record(metas[last].child(self.op_id, 0), result))
                emitted = last + 1
            # Step 3
            if emitted:
                self._prune(key, emitted)
            if key not in self._buckets or not bucket.metas:
                del keys[key]
        return out

    def _runs(self, metas: Sequence[Meta]) -> list[tuple[int, int]]:
        """``(first, last)`` indexes of each run of items less than a gap apart."""
        runs: list[tuple[int, int]] = []
        first = 0
        slots = [m.gt.slot for m in metas]
        for i in range(1, len(slots)):
            if slots[i] - slots[i - 1] >= self._gap:
                runs.append((first, i - 1))
                first = i
        if slots:
            runs.append((first, len(slots) - 1))
        return runs

    def next_due(self) -> int | None:
        """The end of the earliest first session among the keys with items."""
        ends = []
        for key in self._due.get(0, {}):
            metas = self._buckets[key].metas
            runs = self._runs(metas)
            if runs:
                ends.append(metas[runs[0][1]].gt.slot + self._gap)
        return min(ends, default=None)
