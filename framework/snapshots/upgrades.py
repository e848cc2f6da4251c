"""Starting a changed pipeline from a savepoint: which state each operator gets.

A pipeline whose graph changed starts from a savepoint by operator id (`plan_upgrade`):
an operator of the savepoint and of the graph with the same id keeps its state; a
grouping or aggregate of the graph the savepoint lacks starts empty; one of the savepoint
the graph lacks is reported as removed. An id that names a grouping with another window,
an aggregate of another shape (`aggregate_shape`: window, slot width, rolling, TTL,
event time), or another kind of operator, is an incompatible change and is refused. Ids come from
`framework.core.names`; ``renames`` maps a saved id to its new one. `SavepointBackend`
serves the kept state to `framework.snapshots.restore.restore_epoch`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from framework.core.graph import KEYED_STATE, Graph, Kind
from framework.errors import ConfigError, SnapshotMissing
from framework.snapshots.backends.base import SLOT_MAX
from framework.snapshots.savepoint_store import SavedOperator, Savepoint
from framework.snapshots.units import (
    decode_unit,
    resign_unit,
    state_shape,
    unit_label,
    unit_name,
)
from framework.wire.znodes import SnapshotRecord

_KEYED = KEYED_STATE


@dataclass(frozen=True)
class Upgrade:
    """How a graph starts from a savepoint (`plan_upgrade`).

    ``kept``: graph grouping or aggregate id -> saved id whose state it gets; ``new``:
    groupings and aggregates that start empty; ``removed``: saved operators the graph
    lacks; ``new_sources``: source topics the savepoint has no offsets for (read from
    their first offsets);
    ``removed_sources``: saved source topics the graph no longer reads.
    """

    kept: Mapping[str, str]
    new: tuple[str, ...]
    removed: tuple[str, ...]
    new_sources: tuple[str, ...]
    removed_sources: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the operator: what keeps state, what starts empty, what went."""
        kept = [n if n == o else f"{n} (from {o})" for n, o in self.kept.items()]
        parts = [f"state kept: {', '.join(kept) or 'none'}"]
        if self.new:
            parts.append(f"new, empty: {', '.join(self.new)}")
        if self.removed:
            parts.append(f"removed: {', '.join(self.removed)}")
        if self.new_sources:
            parts.append(f"new sources from their first offsets: {', '.join(self.new_sources)}")
        if self.removed_sources:
            parts.append(f"sources no longer read: {', '.join(self.removed_sources)}")
        return "; ".join(parts)


def plan_upgrade(
    savepoint: Savepoint, graph: Graph, renames: Mapping[str, str] | None = None
) -> Upgrade:
    """How ``graph`` starts from ``savepoint`` (see the module docstring); `ConfigError`
    naming the operator and the way out for an incompatible change."""
    renames = dict(renames or {})
    if savepoint.app != graph.name:
        raise ConfigError(
            f"savepoint {savepoint.name!r} is of {savepoint.app!r}, not {graph.name!r}: a "
            "savepoint starts the pipeline it was taken of"
        )
    saved = {op.id: op for op in savepoint.operators}
    unknown = sorted(set(renames) - set(saved))
    if unknown:
        raise ConfigError(f"--rename {unknown}: savepoint {savepoint.name!r} has no such operator")
    by_new = {renames.get(op_id, op_id): op for op_id, op in saved.items()}
    kept: dict[str, str] = {}
    new: list[str] = []
    for node in graph.nodes:
        op = by_new.get(node.id)
        if op is None:
            if node.kind in _KEYED:
                new.append(node.id)
            continue
        if op.kind != node.kind.value:
            raise ConfigError(
                f"operator {node.id!r} was a {op.kind} in savepoint {savepoint.name!r} and is "
                f"a {node.kind.value} now: give the new one another name="
            )
        if node.kind == Kind.GROUP:
            if op.window != node.window:
                raise ConfigError(
                    f"grouping {node.id!r} had window {op.window} in savepoint "
                    f"{savepoint.name!r} and has {node.window} now: its state does not fit; "
                    "give it another name= to start it empty"
                )
            kept[node.id] = op.id
        else:
            shape = state_shape(node, graph.delta_ms)
            if shape is None:
                continue  # stateless: nothing saved
            if op.shape != shape:
                raise ConfigError(
                    f"{node.kind} {node.id!r} was {op.shape} in savepoint {savepoint.name!r} "
                    f"and is {shape} now: its state does not fit; give it another name= to "
                    "start it empty"
                )
            kept[node.id] = op.id
    present = {node.id for node in graph.nodes}
    removed = tuple(op.id for new_id, op in by_new.items() if new_id not in present)
    sources = [node.endpoint.name for node in graph.by_kind(Kind.SOURCE) if node.endpoint]
    new_sources = tuple(t for t in sources if t not in savepoint.offsets)
    gone = tuple(t for t in savepoint.offsets if t not in sources)
    return Upgrade(kept, tuple(new), removed, new_sources, gone)


class SavepointBackend:
    """The state of ``savepoint`` as a read-only `StateBackend` for `restore_epoch`.

    Unit ``<new id>/<p>`` at the savepoint's slot is the saved unit of the operator it was
    kept from (`Upgrade.kept`), verified for its saved label and signed again for the new
    one, so the restore's checks hold for a renamed operator too.
    """

    def __init__(self, savepoint: Savepoint, upgrade: Upgrade) -> None:
        self.savepoint = savepoint
        self.upgrade = upgrade

    def record(self, epoch: int) -> SnapshotRecord:
        """The snapshot record `restore_epoch` restores, with the graph's ids."""
        units = {
            new: tuple(unit_name(new, p) for p in range(self._saved(old).units))
            for new, old in self.upgrade.kept.items()
        }
        return SnapshotRecord(
            slot=self.savepoint.slot,
            offsets=self.savepoint.offsets,
            units=units,
            epoch=epoch,
            created_ms=self.savepoint.created_ms,
        )

    def _saved(self, op_id: str) -> SavedOperator:
        op = self.savepoint.operator(op_id)
        assert op is not None  # plan_upgrade only keeps saved operators
        return op

    def get(self, unit: str, slot: int) -> bytes:
        node, _, p = unit.rpartition("/")
        old = self.upgrade.kept.get(node)
        if old is None or slot != self.savepoint.slot:
            raise SnapshotMissing(f"savepoint {self.savepoint.name!r} has no {unit}@{slot}")
        sp = self.savepoint
        saved = unit_name(old, int(p))
        state = decode_unit(
            sp.unit_bytes(saved), unit_label(sp.app, saved, slot), f"savepoint {sp.name} {saved}"
        )
        return resign_unit(state, unit_label(sp.app, unit, slot))

    def put(self, unit: str, slot: int, data: bytes) -> None:
        raise ConfigError("a savepoint is read-only")

    def latest(self, unit: str, at_or_below: int = SLOT_MAX) -> tuple[int, bytes] | None:
        if self.savepoint.slot > at_or_below:
            return None
        try:
            return self.savepoint.slot, self.get(unit, self.savepoint.slot)
        except SnapshotMissing:
            return None

    def units(self, slot: int) -> list[str]:
        if slot != self.savepoint.slot:
            return []
        record = self.record(0)
        return sorted(u for us in record.units.values() for u in us)

    def drop_below(self, slot: int) -> int:
        return 0

    def close(self) -> None:
        return None
