"""Record meta (FlameStream runtime): ``(global time, child ids, trace, tombstone)``.

Metas are ordered lexicographically in that field order; the barrier and the grouping
sort by it. Map, flat_map and broadcast append a child id and XOR the physical operation's
64-bit id into the trace; grouping and merge only XOR. A tombstone carries the same meta as
the item it cancels, with the flag set, so the two travel the same path and meet at the
barrier.
"""

from __future__ import annotations

from typing import NamedTuple

from framework.core.time import GlobalTime


class Meta(NamedTuple):
    """Meta of one record; tuple order is the FlameStream order."""

    gt: GlobalTime
    child_ids: tuple[int, ...] = ()
    trace: int = 0
    tombstone: bool = False

    def child(self, op_id: int, child_id: int) -> Meta:
        """Meta of the ``child_id``-th output of a map-like physical operation ``op_id``."""
        return Meta(self.gt, (*self.child_ids, child_id), self.trace ^ op_id, self.tombstone)

    def through(self, op_id: int) -> Meta:
        """Meta after a grouping or merge physical operation ``op_id`` (trace XOR only)."""
        return Meta(self.gt, self.child_ids, self.trace ^ op_id, self.tombstone)

    def as_tombstone(self) -> Meta:
        """The meta of the tombstone that cancels a record with this meta."""
        return Meta(self.gt, self.child_ids, self.trace, True)

    def as_item(self) -> Meta:
        """This meta with the tombstone flag cleared (the key a tombstone cancels)."""
        return Meta(self.gt, self.child_ids, self.trace, False)


class Record(NamedTuple):
    """A payload with its meta, as it flows between operations."""

    meta: Meta
    value: object

    def tombstone(self) -> Record:
        """The tombstone of this record: same meta and payload, flag set."""
        return Record(self.meta.as_tombstone(), self.value)
