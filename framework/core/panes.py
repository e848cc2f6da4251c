"""A combinable time-window aggregate as one reduced value per key and pane.

A ``combinable`` aggregate (`Aggregation`: ``reduce`` associative and commutative) over
`Tumbling` or `Sliding` windows need not keep its items: every window is a run of whole
panes (a pane: a run of slots that lies in the same set of windows), so the aggregate
keeps, per key and pane, the reduced value of the pane's items and the largest of their
metas (a *cell*), reduces each item into its cell on arrival, and folds a window's cells
at its end. Its results are `WindowAggregator`'s exactly: the value is the same reduction
in another order (which ``combinable`` declares immaterial), the meta is the window's
largest item's with the window's index appended. No tombstone can reach it: a combinable
aggregate has no grouping upstream (`framework.core.graph`).

Why: buffering every item (a bisected insert, a hold, a window's due entry each) and
folding at the window's end was as much of a backlog's worker time as the whole source
stage (``docs/latency.md``, "Built-in reducers on columns").

Holds: a cell holds the slot of its largest meta (moved when a larger one arrives). A
window's result takes the largest meta of its cells, so its slot is held until it is
emitted, which is what holds are for; the cell's earlier slots need none.

The changelog and snapshots keep a cell as an item (its largest meta, its value): the
layout of `WindowAggregator`'s buckets, so either reads what the other wrote (a window over
cells reduces to the same value as over their items). A state the buffering aggregate
wrote, with several items in a pane that each hold their slot in the acker, stays buffered
in that pane until the pane is dropped (`PaneAggregator._put_item`).

Protocol on a min time ``m`` of its segment:

1. Pop every window with ``end <= m``.
2. Emit its result: its key's cells in the window's panes, reduced in pane order, with
   the largest of their metas; nothing if it has no cell.
3. Drop the cells no future window needs, releasing their holds.
"""

from __future__ import annotations

import heapq

from framework.core.grouping import meta_from_plain
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed
from framework.core.values import UserValue
from framework.core.windows import (
    Aggregation,
    Sliding,
    Tumbling,
    WindowAggregator,
    WindowResult,
)
from framework.errors import PipelineError, UserFunctionError

_new = tuple.__new__


def reduces_per_pane(aggregation: Aggregation) -> bool:
    """Whether ``aggregation`` runs as a `PaneAggregator`: combinable, over `Tumbling` or
    `Sliding` processing-time windows, not rolling."""
    return (
        aggregation.combinable
        and aggregation.reduce is not None
        and not aggregation.rolling
        and aggregation.event_time is None
        and isinstance(aggregation.window, Tumbling | Sliding)
    )


def _first(item: UserValue) -> Meta:
    return item[0]  # type: ignore[no-any-return]


class PaneAggregator(WindowAggregator):
    """The physical ``aggregate`` operation of a combinable time window: see the module."""

    def __init__(self, op_id: int, aggregation: Aggregation, delta_ms: int) -> None:
        if not reduces_per_pane(aggregation):
            raise PipelineError(f"{aggregation} is not a combinable Tumbling or Sliding window")
        super().__init__(op_id, aggregation, delta_ms)
        reduce = aggregation.reduce
        assert reduce is not None  # reduces_per_pane
        self._reduce = reduce
        self._pane = aggregation.pane_slots(delta_ms)
        # key -> pane -> [largest meta, reduced value] (a buffered cell, `_put_item`: and
        # its items); panes in arrival order.
        self._cells: dict[object, dict[int, list[UserValue]]] = {}
        # Keys whose deletion a changelog writer put off to its next commit (`defer`).
        self._deferred: dict[object, None] = {}

    def push(self, record: Record) -> list[Record]:
        """Reduce an item into its key's cell; results come only on min time."""
        keyed = record.value
        if not isinstance(keyed, Keyed):
            raise UserFunctionError(f"aggregate expects key_by output, got {type(keyed).__name__}")
        meta = record.meta
        if meta.tombstone:  # ruled out by the graph's validation; never reduced away silently
            raise PipelineError("a tombstone reached a combinable aggregate")
        self.add(keyed.key, meta, keyed.value)
        return []

    def add(self, key: object, meta: Meta, value: UserValue) -> None:
        """Reduce ``value`` with ``meta`` into ``key``'s cell of its pane."""
        slot = meta[0][0]
        cells = self._cells.get(key)
        if cells is None:
            cells = self._cells[key] = {}
        self._changed[key] = None
        pane = slot // self._pane
        cell = cells.get(pane)
        if cell is None:
            cells[pane] = [meta, value]
            self._hold(slot)
            self._due_item(key, slot)
            return
        try:
            cell[1] = self._reduce(cell[1], value)
        except Exception as exc:
            raise UserFunctionError(f"reduce failed on {value!r}") from exc
        if len(cell) > 2:  # a buffered cell (`_put_item`): the item holds its own slot
            cell[2].append((meta, value))
            self._hold(slot)
            cell[0] = max(cell[0], meta)
        elif meta > cell[0]:
            old = cell[0][0][0]
            cell[0] = meta
            if slot != old:
                self._hold(slot)
                self._unhold(old)

    def on_min_time(self, slot: int) -> list[Record]:
        """Results of every window that min time ``slot`` completes, in window-end order
        (steps 1-3 of `WindowAggregator`, over cells)."""
        if self._size != self._pane:
            return super().on_min_time(slot)
        self._min_time = max(self._min_time, slot)
        return self._tumbling(slot)

    def _tumbling(self, slot: int) -> list[Record]:
        """Steps 1-3 when a window is one pane: its cell is the result, and is dropped as
        it is emitted. The NamedTuples are built without their Python-level constructors
        (as `framework.wire.frames` does): a result costs 5 instead of 12 us."""
        out: list[Record] = []
        append = out.append
        cells_of, changed, unhold = self._cells, self._changed, self._unhold
        size, delta, op_id = self._size, self.delta_ms, self.op_id
        finish = self.aggregation.finisher()
        # Step 1
        while self._ends and self._ends[0] <= slot:
            end = heapq.heappop(self._ends)
            start = end - size
            pane = start // size
            start_ms, end_ms = start * delta, end * delta
            for key in self._due.pop(end):
                cells = cells_of.get(key)
                cell = None if cells is None else cells.pop(pane, None)
                if cell is None:
                    continue
                # Step 2
                gt, ids, trace, _ = cell[0]
                meta = _new(Meta, (gt, (*ids, pane), trace ^ op_id, False))  # Meta.child
                value = cell[1] if finish is None else finish(cell[1])
                append(_new(Record, (meta, _new(WindowResult, (key, start_ms, end_ms, value)))))
                # Step 3
                changed[key] = None
                if len(cell) > 2:
                    self._unhold_cell(cell)
                else:
                    unhold(gt[0])
                if not cells:
                    del cells_of[key]
                elif min(cells) < pane:  # restored below min time (put_bucket)
                    self._drop_below(key, start)
        return out

    def _time_result(self, key: object, end: int) -> Record | None:
        cells = self._cells.get(key)
        if cells is None:
            return None
        start = end - self._size
        first, last = start // self._pane, end // self._pane
        if last - first == 1:  # a tumbling window is one pane
            inside = [first] if first in cells else []
        else:
            inside = sorted(p for p in cells if first <= p < last)
        if not inside:
            return None
        first_cell = cells[inside[0]]
        meta, value = first_cell[0], first_cell[1]  # a buffered cell has its items too
        reduce = self._reduce
        try:
            for pane in inside[1:]:
                cell = cells[pane]
                value = reduce(value, cell[1])
                meta = max(meta, cell[0])
        except Exception as exc:
            raise UserFunctionError(f"reduce failed in a window of {key!r}") from exc
        meta = meta.child(self.op_id, start // self._step)
        return Record(meta, self._window_payload(key, start, end, [value]))

    def _drop_below(self, key: object, cutoff: int) -> None:
        """Step 3: drop ``key``'s cells of panes before slot ``cutoff``."""
        cells = self._cells.get(key)
        if cells is None:
            return
        below = cutoff // self._pane
        gone = [pane for pane in cells if pane < below]
        if not gone:
            return
        self._changed[key] = None
        for pane in gone:
            self._unhold_cell(cells.pop(pane))
        if not cells:
            del self._cells[key]

    def _unhold_cell(self, cell: list[UserValue], *, silent: bool = False) -> None:
        """Release what ``cell`` holds: its largest meta's slot, or a buffered cell's
        slot of each item."""
        if len(cell) > 2:
            for meta, _ in cell[2]:
                self._unhold(meta[0][0], silent=silent)
        else:
            self._unhold(cell[0][0][0], silent=silent)

    def bucket_state(self, key: object) -> tuple[UserValue, ...] | None:
        """One key's cells as a bucket's plain lists (metas, values, no early tombstones),
        in meta order, or None."""
        cells = self._cells.get(key)
        if not cells:
            return None
        items = [pair for cell in cells.values() for pair in (cell[2] if len(cell) > 2 else [cell])]
        if len(items) > 1:
            items.sort(key=_first)
        return ([item[0] for item in items], [item[1] for item in items], [])

    def put_bucket(self, key: object, state: tuple[UserValue, ...] | None) -> None:
        """Replace ``key``'s cells by a changelog state (a `WindowAggregator`'s items, too,
        reduced per pane). Holds change silently: the state was written with their acks."""
        for cell in self._cells.pop(key, {}).values():
            self._unhold_cell(cell, silent=True)
        if state is None:
            return
        metas, values, early = state[:3]
        if early:
            raise PipelineError(f"a combinable aggregate's state for {key!r} has tombstones")
        for plain, value in zip(metas, values, strict=True):
            self._put_item(key, meta_from_plain(plain), value)

    def _put_item(self, key: object, meta: Meta, value: UserValue) -> None:
        """One item of a changelog state into its cell, holding its slot silently.

        A state this aggregate wrote has one item per pane. More than one came from the
        buffering aggregate (an earlier flamepipe), whose every item holds its slot in the
        acker: the cell then stays *buffered* (its items kept, each holding its own slot,
        and written back as they are) until it is dropped, so every hold is released
        exactly once whenever the state is replayed again.
        """
        cells = self._cells.setdefault(key, {})
        slot = meta[0][0]
        pane = slot // self._pane
        cell = cells.get(pane)
        if cell is None:
            cells[pane] = [meta, value]
            self._hold(slot, silent=True)
            self._due_item(key, slot)
            return
        try:
            reduced = self._reduce(cell[1], value)
        except Exception as exc:
            raise UserFunctionError(f"reduce failed on {value!r} replaying {key!r}") from exc
        if len(cell) == 2:
            cell.append([(cell[0], cell[1])])
        cell[1] = reduced
        cell[2].append((meta, value))
        cell[0] = max(cell[0], meta)
        self._hold(slot, silent=True)

    def defer(self, keys: list[object]) -> None:
        """Keys gone from the state whose changelog deletion waits for the next commit:
        `take_deferred` hands them back then. An emission's commit then carries its
        results without a deletion record per emitted key (~1 200 a window in the peer
        benchmark's count: half that commit's time, docs/latency.md)."""
        self._deferred.update(dict.fromkeys(keys))

    def take_deferred(self) -> list[object]:
        """The keys `defer` put off, now due."""
        keys = list(self._deferred)
        self._deferred.clear()
        return keys

    @property
    def deferred(self) -> int:
        """How many deletions wait for the next commit."""
        return len(self._deferred)

    def settle(self) -> None:
        """After a replay of the changelog: drop, silently, every cell whose last window
        ended by the min time it recorded, and mark its key changed.

        Such a cell was emitted and dropped, its hold released, in the commit that
        recorded that min time; only its deletion was put off to the next commit
        (`defer`), and the task stopped before that one. Kept, it would hold its slot here
        but not in the acker, and release it a second time when dropped."""
        done = self._min_time
        for key in list(self._cells):
            cells = self._cells[key]
            ended = [pane for pane in cells if self._last_end(pane) <= done]
            if not ended:
                continue
            for pane in ended:
                self._unhold_cell(cells.pop(pane), silent=True)
            if not cells:
                del self._cells[key]
            self._changed[key] = None

    def _last_end(self, pane: int) -> int:
        """The end slot of the last window holding ``pane`` (windows start at multiples of
        the step, which a pane divides)."""
        return (pane * self._pane) // self._step * self._step + self._size

    def snapshot(self) -> dict[str, UserValue]:
        """The state as plain data: each key's cells as items, and the last min time."""
        buckets: list[tuple[object, list[tuple[Meta, UserValue]], list[UserValue]]] = []
        for key in self._cells:
            state = self.bucket_state(key)
            assert state is not None
            buckets.append((key, list(zip(state[0], state[1], strict=True)), []))
        return {"min_time": self._min_time, "buckets": buckets}
