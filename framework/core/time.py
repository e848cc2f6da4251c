"""Global time: a total order recomputable from what Kafka stores.

A record's global time is ``(slot, front, offset)``:

* ``slot = timestamp_ms // delta_ms`` (the tracker paper): timestamps of different fronts are only
  comparable up to the synchronisation slack ``delta``, so time is coarsened to slots and
  the acker reasons in whole slots.
* ``front`` is a stable 63-bit id of the ``(topic, partition)`` the record was read from.
  It breaks ties between fronts inside one slot.
* ``offset`` is the record's Kafka offset. Inside a partition offsets grow with append
  order and, because input topics use LogAppendTime, so do timestamps: the triple is
  monotone per front, which is all FlameStream's fault tolerance asks of "Kafka offsets
  act as global time".

Everything in the triple is stored by Kafka with the record, so a replay from any offset
recomputes exactly the same global times, and therefore the same output.

Tuples (``NamedTuple``) rather than dataclasses: comparisons happen on every hot path
(acker, barrier, grouping) and tuple comparison runs in C.
"""

from __future__ import annotations

from typing import NamedTuple

from framework.core.ids import stable_id

DEFAULT_DELTA_MS = 10
FRONT_MAX = (1 << 63) - 1
OFFSET_MAX = (1 << 63) - 1


class GlobalTime(NamedTuple):
    """A point of global time, ordered lexicographically by (slot, front, offset)."""

    slot: int
    front: int
    offset: int

    @classmethod
    def of_record(
        cls, timestamp_ms: int, topic: str, partition: int, offset: int, delta_ms: int
    ) -> GlobalTime:
        """Global time of a Kafka record, from its stored coordinates alone."""
        return cls(slot_of(timestamp_ms, delta_ms), front_id(topic, partition), offset)

    @classmethod
    def slot_start(cls, slot: int) -> GlobalTime:
        """The smallest global time in ``slot``."""
        return cls(slot, 0, -1)

    @classmethod
    def slot_end(cls, slot: int) -> GlobalTime:
        """The largest global time in ``slot``: every time in the slot is <= it."""
        return cls(slot, FRONT_MAX, OFFSET_MAX)


def slot_of(timestamp_ms: int, delta_ms: int = DEFAULT_DELTA_MS) -> int:
    """The global-time slot of a timestamp: ``floor(timestamp_ms / delta_ms)``."""
    return timestamp_ms // delta_ms


def front_id(topic: str, partition: int) -> int:
    """A stable id in [0, 2**63) for ``(topic, partition)``, equal across processes and runs.

    Python's ``hash()`` is salted per process, so a keyed digest is used instead.
    """
    return stable_id(f"{topic}\x00{partition}")
