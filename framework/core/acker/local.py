"""Local tracker (the tracker paper): per-worker pre-aggregation of acks and heartbeats.

A worker XORs its acks per ``(segment, slot)`` and keeps only the latest heartbeat per
front, then flushes periodically. The flush order keeps the tracker's ordering rules:

* acks before heartbeats, so a front's item is acked before the heartbeat passing it;
* acks by decreasing slot, and inside one slot downstream segments first, so the acks of
  an item's outputs (same or later slot, same or later segment) precede the receive-ack
  of the item itself.

An aggregate that XORs to zero (an item sent and received inside one flush window) is
dropped: that is the traffic the local tracker saves.

Across a loop (segments that feed each other) no order inside a slot follows every item's
path: one item may go from A to B while another goes from B to A. So a flush is applied
as a whole: `flush_to` hands its acks to one `ack_many`, and a shard applies a sender's
batch at its `NodeTime` (`framework.core.acker.sharded`); the acks of one slot always
go to one shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from framework.core.acker.tracker import topological_order
from framework.core.messages import Ack, Heartbeat


class AckSink(Protocol):
    """Anything that takes acks in batches and heartbeats (`Acker`, a shard router)."""

    def ack_many(self, acks: Iterable[tuple[str, int, int]]) -> None:
        """Apply acks in the given order."""

    def heartbeat(self, front: int, slot: int) -> None:
        """Record a front's heartbeat."""


class LocalAcker:
    """Buffers one worker's acks (XOR per segment and slot) and heartbeats (max per front)."""

    def __init__(self, segments: Mapping[str, Sequence[str]] | Sequence[str] = ()) -> None:
        """``segments`` (a DAG mapping or names in topological order) ranks equal slots.

        Unknown segments rank before all known ones, i.e. they are flushed last in a slot.
        """
        if isinstance(segments, Mapping):
            order: Sequence[str] = topological_order(segments) if segments else ()
        else:
            order = segments
        self._rank = {name: rank for rank, name in enumerate(order)}
        self._acks: dict[tuple[str, int], int] = {}
        self._heartbeats: dict[int, int] = {}

    @property
    def pending(self) -> int:
        """Buffered aggregates: non-zero or not, acks plus heartbeats."""
        return len(self._acks) + len(self._heartbeats)

    def ack(self, segment: str, slot: int, value: int) -> None:
        """XOR ``value`` into the buffered aggregate of ``(segment, slot)``."""
        key = (segment, slot)
        acks = self._acks
        acks[key] = acks.get(key, 0) ^ value

    def ack_many(self, acks: Iterable[tuple[str, int, int]]) -> None:
        """`ack` each ``(segment, slot, value)``."""
        buffered = self._acks
        get = buffered.get
        for segment, slot, value in acks:
            key = (segment, slot)
            buffered[key] = get(key, 0) ^ value

    def heartbeat(self, front: int, slot: int) -> None:
        """Keep the highest heartbeat of ``front``."""
        if slot > self._heartbeats.get(front, slot - 1):
            self._heartbeats[front] = slot

    def flush(self) -> list[Ack | Heartbeat]:
        """Empty the buffer: non-zero acks (decreasing slot, downstream first), heartbeats."""
        acks, heartbeats = self._take()
        out: list[Ack | Heartbeat] = [Ack(seg, slot, value) for seg, slot, value in acks]
        out.extend(Heartbeat(front, slot) for front, slot in heartbeats)
        return out

    def flush_to(self, sink: AckSink) -> int:
        """Empty the buffer into ``sink`` in flush order; returns the messages sent."""
        acks, heartbeats = self._take()
        if acks:
            sink.ack_many(acks)
        for front, slot in heartbeats:
            sink.heartbeat(front, slot)
        return len(acks) + len(heartbeats)

    def _take(self) -> tuple[list[tuple[str, int, int]], list[tuple[int, int]]]:
        rank = self._rank
        live = [(seg, slot, value) for (seg, slot), value in self._acks.items() if value]
        # Decreasing slot; inside a slot decreasing topological rank (downstream first).
        live.sort(key=lambda ack: (ack[1], rank.get(ack[0], -1)), reverse=True)
        heartbeats = sorted(self._heartbeats.items())
        self._acks = {}
        self._heartbeats = {}
        return live, heartbeats
