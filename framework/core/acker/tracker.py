"""The tracker (the tracker paper, Algorithm 1): XOR checksums per segment and slot, min times.

Every operation acks each item it sends and each item it receives with the item's slot
and a random 64-bit value; the XOR of a slot is zero exactly when every item with that
slot has been both sent and received. Fronts heartbeat: ``heartbeat(front, s)`` promises
no more items with a slot below ``s``. A segment's min time ``m`` means that no item with
a slot below ``m`` is in flight in the segment or in any segment upstream of it.

Contract for senders: both acks of an item go to one segment (the one it is sent into);
an item's outputs are acked before the receive-ack of the item itself; a front acks an
item before the heartbeat that passes it; each sender's messages arrive in order. Then
the tracker always holds a prefix of every sender's messages, a zero slot below every
heartbeat really is finished, and no ack can arrive below a min time it has published:
such an ack is reported as a `ProtocolViolation`.

The loop of Algorithm 1 steps one slot at a time; here each segment keeps a heap of its
non-zero slots instead, so a heartbeat that jumps a million slots costs nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence

from framework.core.messages import MinTimeNotification
from framework.errors import PipelineError, ProtocolViolation

MinTimeCallback = Callable[[MinTimeNotification], None]


def topological_order(segments: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Segment names, each after all of its inbound segments (Kahn, ties by name).

    Raises `PipelineError` on an empty mapping, an unknown inbound name or a cycle.
    """
    if not segments:
        raise PipelineError("an acker needs at least one segment")
    await_count: dict[str, int] = {}
    for name, inbound in segments.items():
        for source in inbound:
            if source not in segments:
                raise PipelineError(f"segment {name!r} has unknown inbound {source!r}")
        await_count[name] = len(set(inbound))
    downstream: dict[str, list[str]] = {name: [] for name in segments}
    for name, inbound in segments.items():
        for source in set(inbound):
            downstream[source].append(name)
    ready = sorted(name for name, count in await_count.items() if count == 0)
    order: list[str] = []
    while ready:
        name = ready.pop(0)
        order.append(name)
        for target in sorted(downstream[name]):
            await_count[target] -= 1
            if await_count[target] == 0:
                ready.append(target)
        ready.sort()
    if len(order) != len(segments):
        raise PipelineError(f"segments form a cycle: {sorted(set(segments) - set(order))}")
    return tuple(order)


class Acker:
    """Single-node tracker: acks and heartbeats in, monotone min-time notifications out.

    CheckMinTime, per segment in topological order:

    1. Bound the new time by the lowest heartbeat of all fronts.
    2. Bound it by the min time of every inbound segment.
    3. Bound it by the lowest slot of the segment whose XOR is non-zero.
    4. If it exceeds the segment's min time, store it and notify ``(segment, time)``.

    Then the global min time (the least over all segments) is notified if it grew.
    """

    def __init__(
        self,
        segments: Mapping[str, Sequence[str]],
        fronts: Iterable[int] = (),
        *,
        snapshot_interval: int = 0,
    ) -> None:
        """``segments`` maps each segment to its inbound segments; fronts start at slot 0.

        With ``snapshot_interval > 0`` a global notification asks for a snapshot whenever
        the global min time is at least that many slots past the last requested one.
        """
        self._order = topological_order(segments)
        self._inbound = {name: tuple(set(segments[name])) for name in self._order}
        has_downstream = {source for inbound in self._inbound.values() for source in inbound}
        self._sinks = tuple(name for name in self._order if name not in has_downstream)
        self._xor: dict[str, dict[int, int]] = {name: {} for name in self._order}
        self._heaps: dict[str, list[int]] = {name: [] for name in self._order}
        self._mt: dict[str, int] = dict.fromkeys(self._order, 0)
        # CheckMinTime's loop, resolved once: (segment, inbound, heap, table).
        self._plan = [
            (name, self._inbound[name], self._heaps[name], self._xor[name]) for name in self._order
        ]
        self._global = 0
        self._fronts: dict[int, int] = dict.fromkeys(fronts, 0)
        self._hb_min: int | None = 0 if self._fronts else None
        self._hb_at_min = len(self._fronts)
        self._subscribers: list[MinTimeCallback] = []
        self._snapshot_interval = snapshot_interval
        self._last_snapshot = 0

    # -- subscriptions -----------------------------------------------------------------

    def subscribe(self, callback: MinTimeCallback) -> None:
        """Call ``callback`` with every future min-time notification."""
        self._subscribers.append(callback)

    def unsubscribe(self, callback: MinTimeCallback) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        if callback in self._subscribers:
            self._subscribers.remove(callback)

    # -- queries -----------------------------------------------------------------------

    @property
    def segments(self) -> tuple[str, ...]:
        """Segment names in topological order."""
        return self._order

    def min_time(self, segment: str | None = None) -> int:
        """Min time of ``segment``, or the global min time for None."""
        if segment is None:
            return self._global
        try:
            return self._mt[segment]
        except KeyError:
            raise ProtocolViolation(f"unknown segment {segment!r}") from None

    def pending(self, segment: str | None = None) -> int:
        """Number of slots with a non-zero XOR in ``segment`` (None: all segments)."""
        if segment is None:
            return sum(len(table) for table in self._xor.values())
        return len(self._xor[segment])

    def fronts(self) -> dict[int, int]:
        """Latest heartbeat (or registered slot) of every front."""
        return dict(self._fronts)

    # -- fronts ------------------------------------------------------------------------

    def register_front(self, front: int, slot: int = 0) -> None:
        """Start tracking ``front``; it holds min time at ``slot`` until it heartbeats.

        A known front is heartbeated instead. Registering below the global min time is a
        `ProtocolViolation`: the front could emit items the tracker already declared done.
        """
        if front in self._fronts:
            self.heartbeat(front, slot)
            return
        if self._hb_min is not None and slot < self._global:
            raise ProtocolViolation(
                f"front {front} registered at slot {slot} below min time {self._global}"
            )
        self._fronts[front] = slot
        self._recount_heartbeats()
        self._check_min_time()

    def heartbeat(self, front: int, slot: int) -> None:
        """Front ``front`` emits no more items below ``slot``; older heartbeats are ignored."""
        old = self._fronts.get(front)
        if old is None:
            self.register_front(front, slot)
            return
        if slot <= old:
            return
        self._fronts[front] = slot
        if old == self._hb_min:
            self._hb_at_min -= 1
            if self._hb_at_min == 0:
                self._recount_heartbeats()
                self._check_min_time()

    def _recount_heartbeats(self) -> None:
        low = min(self._fronts.values())
        self._hb_min = low
        self._hb_at_min = sum(1 for slot in self._fronts.values() if slot == low)

    # -- acks --------------------------------------------------------------------------

    def ack(self, segment: str, slot: int, value: int) -> None:
        """XOR ``value`` into ``(segment, slot)`` and run CheckMinTime if that cleared it."""
        if self._apply(segment, slot, value):
            self._check_min_time()

    def ack_many(self, acks: Iterable[tuple[str, int, int]]) -> None:
        """Apply ``(segment, slot, value)`` acks in order, then run CheckMinTime once."""
        # `_apply` inlined: 255-307 ns per ack against 311-338 ns through the method (400 000
        # acks of one segment, three runs each way), on the acker's hottest loop.
        xor = self._xor
        heaps = self._heaps
        mt = self._mt
        cleared = False
        for segment, slot, value in acks:
            try:
                table = xor[segment]
            except KeyError:
                raise ProtocolViolation(f"ack for unknown segment {segment!r}") from None
            if slot < mt[segment]:
                self._late_ack(segment, slot)
            old = table.get(slot)
            if old is None:
                if value:
                    table[slot] = value
                    heapq.heappush(heaps[segment], slot)
            elif old != value:
                table[slot] = old ^ value
            else:
                del table[slot]
                # Only clearing the lowest live slot can move this segment's min time.
                cleared = cleared or slot == heaps[segment][0]
        if cleared:
            self._check_min_time()

    def _apply(self, segment: str, slot: int, value: int) -> bool:
        """XOR one ack in; True when it cleared the segment's lowest non-zero slot."""
        try:
            table = self._xor[segment]
        except KeyError:
            raise ProtocolViolation(f"ack for unknown segment {segment!r}") from None
        if slot < self._mt[segment]:
            self._late_ack(segment, slot)
        old = table.get(slot)
        if old is None:
            if value:
                table[slot] = value
                heapq.heappush(self._heaps[segment], slot)
            return False
        if old != value:
            table[slot] = old ^ value
            return False
        del table[slot]
        return slot == self._heaps[segment][0]

    def _late_ack(self, segment: str, slot: int) -> None:
        raise ProtocolViolation(
            f"ack for slot {slot} in segment {segment!r} below its min time "
            f"{self._mt[segment]}: an item was acked out of order or after it was done"
        )

    # -- CheckMinTime ------------------------------------------------------------------

    def _check_min_time(self) -> None:
        """CheckMinTime over all segments, then the global time; notify after updating."""
        if self._hb_min is None:
            return  # No front yet: nothing bounds time from above.
        notes: list[MinTimeNotification] = []
        mt = self._mt
        for segment, inbound, heap, table in self._plan:
            # Step 1
            time = self._hb_min
            # Step 2
            for source in inbound:
                time = min(time, mt[source])
            # Step 3
            while heap and heap[0] not in table:
                heapq.heappop(heap)  # lazily drop slots that cleared
            if heap and heap[0] < time:
                time = heap[0]
            # Step 4
            if time > mt[segment]:
                mt[segment] = time
                notes.append(MinTimeNotification(segment, time))
        self._update_global(notes)
        for note in notes:
            for callback in list(self._subscribers):
                callback(note)

    def _update_global(self, notes: list[MinTimeNotification]) -> None:
        mt = self._mt
        time = (
            min([mt[sink] for sink in self._sinks]) if len(self._sinks) > 1 else mt[self._sinks[0]]
        )
        if time <= self._global:
            return
        self._global = time
        snapshot = False
        interval = self._snapshot_interval
        if interval > 0 and time - self._last_snapshot >= interval:
            snapshot = True
            self._last_snapshot = time
        notes.append(MinTimeNotification(None, time, snapshot=snapshot))
