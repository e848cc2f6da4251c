"""The one interface of state backends, and the rules every backend checks keys by.

A snapshot is the state of one hash unit of a stateful operation (FlameStream fault
tolerance) at one snapshot time. Its key is ``(unit, slot)``:

* ``unit`` names the hash unit, qualified enough to be unique in the backend, e.g.
  ``"<app>.<node>.p<partition>"``. Any non-empty string without NUL.
* ``slot`` is the global-time slot of the min time the snapshot was taken at
  (``framework.core.time``; the acker's min time is a slot). A snapshot at ``slot`` holds
  the state after every item with a smaller slot. An int, not a `GlobalTime`: snapshots
  are requested on min-time notifications, which are whole slots.

Contract (checked by ``unit_tests/snapshots/backends/test_backends.py`` on every backend):

* ``put`` is atomic: a reader sees the old value or the new one, never part of one, and a
  crash in the middle of a put leaves the old state.
* ``put`` of a key twice is idempotent: the later value replaces the earlier atomically,
  which for deterministic snapshots is the same bytes.
* ``put`` returns once the value is durable (as the backend defines it: memory backends
  are durable for the life of the process).
"""

from __future__ import annotations

from typing import Protocol

SLOT_MAX = (1 << 63) - 1
"""Largest slot a backend stores (slots are timestamps / delta_ms, far below it)."""


class StateBackend(Protocol):
    """Snapshots of hash units keyed by ``(unit, slot)``."""

    def put(self, unit: str, slot: int, data: bytes) -> None:
        """Store ``data`` as the snapshot of ``unit`` at ``slot``, atomically and durably."""
        ...

    def get(self, unit: str, slot: int) -> bytes:
        """The snapshot of ``unit`` at ``slot``; `SnapshotMissing` if there is none."""
        ...

    def latest(self, unit: str, at_or_below: int = SLOT_MAX) -> tuple[int, bytes] | None:
        """The newest ``(slot, data)`` of ``unit`` with ``slot <= at_or_below``, or None."""
        ...

    def units(self, slot: int) -> list[str]:
        """The units that have a snapshot at exactly ``slot``, sorted."""
        ...

    def drop_below(self, slot: int) -> int:
        """Delete every snapshot with a slot below ``slot``; return how many were deleted."""
        ...

    def close(self) -> None:
        """Release files and handles; the backend is unusable afterwards."""
        ...


def check_slot(slot: int) -> int:
    """``slot`` if it is an int in ``[0, SLOT_MAX]``, else `ValueError`."""
    # bool is an int subclass: True as a slot is a bug of the caller.
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot <= SLOT_MAX:
        raise ValueError(f"slot {slot!r} is not a global-time slot: use an int in [0, 2**63)")
    return slot


def check_key(unit: str, slot: int) -> None:
    """`ValueError` unless ``(unit, slot)`` is a valid snapshot key."""
    if not isinstance(unit, str) or not unit or "\x00" in unit:
        raise ValueError(f"unit {unit!r} is not a hash unit name: use a non-empty str, no NUL")
    check_slot(slot)
