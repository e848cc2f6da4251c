"""Lifts: source records whose global time moved up to a heartbeat they arrived after.

The driver heartbeats a source partition it has read to its end ``front_lag_ms`` behind
the broker's clock (`framework.runners.spark.fronts`). A record that took longer than
that from its LogAppendTime to being readable (a broker starved or crashing between the
two) lies in a slot the partition was already heartbeated past: min time may have passed
it, and the barrier would drop its output. Its source task moves it instead: its slot
becomes the heartbeat's (the *floor*), which min time cannot have passed, and the move is
written in the task's own transaction as a `Lift` to ``<app>.lifts``. A replay in any
later epoch reads the lifts and moves the same records the same way, so global time stays
a function of what Kafka stores: ``max(slot(timestamp), lift.slot)`` for the offsets
``first..last`` of the lift's partition.

Example::

    >>> lift = Lift("lines", 0, 40, 42, 179575793384)
    >>> Lift.decode(lift.encode(), "lines.lifts@0") == lift
    True
    >>> lift.slot_of(41, 179575793382)
    179575793384
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from framework.core.time import slot_of
from framework.errors import DecodeError


@dataclass(frozen=True, slots=True)
class Lift:
    """Records ``first..last`` of ``topic[partition]`` take at least slot ``slot``."""

    topic: str
    partition: int
    first: int
    last: int
    slot: int

    def key(self) -> bytes:
        """One key per range: compaction never removes a lift."""
        return f"{self.topic}\x00{self.partition}\x00{self.first}".encode()

    def encode(self) -> bytes:
        """The record value (JSON)."""
        return json.dumps(
            {
                "topic": self.topic,
                "partition": self.partition,
                "first": self.first,
                "last": self.last,
                "slot": self.slot,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes | None, where: str) -> Lift:
        """A lift from its record value; `DecodeError` naming ``where`` if malformed."""
        try:
            fields = json.loads(data or b"")
            lift = cls(
                str(fields["topic"]),
                int(fields["partition"]),
                int(fields["first"]),
                int(fields["last"]),
                int(fields["slot"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise DecodeError(f"{where}: not a lift: {exc}") from exc
        if lift.first > lift.last or min(lift.partition, lift.first, lift.slot) < 0:
            raise DecodeError(f"{where}: not a lift: {lift}")
        return lift

    def slot_of(self, offset: int, slot: int) -> int:
        """The slot of the record at ``offset`` whose timestamp gives ``slot``."""
        return max(slot, self.slot) if self.first <= offset <= self.last else slot


class LiftIndex:
    """The lifts of one topic by partition; empty for nearly every pipeline."""

    def __init__(self, lifts: Iterable[Lift] = ()) -> None:
        self._by_partition: dict[int, list[Lift]] = {}
        for lift in lifts:
            self._by_partition.setdefault(lift.partition, []).append(lift)

    def __bool__(self) -> bool:
        return bool(self._by_partition)

    def of(self, partition: int) -> tuple[Lift, ...]:
        """The lifts of ``partition``."""
        return tuple(self._by_partition.get(partition, ()))

    def slots(self, partition: int, stamps: Mapping[int, int], delta_ms: int) -> dict[int, int]:
        """Per offset of ``stamps`` (offset -> timestamp ms) that a lift moves, its slot."""
        moved: dict[int, int] = {}
        for lift in self._by_partition.get(partition, ()):
            for offset, stamp in stamps.items():
                slot = slot_of(stamp, delta_ms)
                lifted = lift.slot_of(offset, slot)
                if lifted > max(slot, moved.get(offset, -1)):
                    moved[offset] = lifted
        return moved
