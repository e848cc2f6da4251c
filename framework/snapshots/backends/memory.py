"""Snapshots in a dict: for tests and the in-process harness (gone with the process)."""

from __future__ import annotations

import threading

from framework.errors import SnapshotMissing, StateError
from framework.snapshots.backends.base import SLOT_MAX, check_key, check_slot


class MemoryBackend:
    """A `StateBackend` in process memory; safe to share between threads."""

    def __init__(self) -> None:
        self._units: dict[str, dict[int, bytes]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def put(self, unit: str, slot: int, data: bytes) -> None:
        """Store ``data`` at ``(unit, slot)``; one dict assignment, so atomic."""
        check_key(unit, slot)
        value = bytes(data)  # a private copy: the caller may reuse a bytearray
        with self._lock:
            self._check_open()
            self._units.setdefault(unit, {})[slot] = value

    def get(self, unit: str, slot: int) -> bytes:
        """The snapshot at ``(unit, slot)``; `SnapshotMissing` if absent."""
        check_key(unit, slot)
        with self._lock:
            self._check_open()
            data = self._units.get(unit, {}).get(slot)
        if data is None:
            raise SnapshotMissing(f"no snapshot of unit {unit!r} at slot {slot} in memory")
        return data

    def latest(self, unit: str, at_or_below: int = SLOT_MAX) -> tuple[int, bytes] | None:
        """The newest ``(slot, data)`` of ``unit`` at or below ``at_or_below``."""
        check_key(unit, at_or_below)
        with self._lock:
            self._check_open()
            slots = self._units.get(unit, {})
            best = max((s for s in slots if s <= at_or_below), default=None)
            return None if best is None else (best, slots[best])

    def units(self, slot: int) -> list[str]:
        """Units with a snapshot at exactly ``slot``."""
        check_slot(slot)
        with self._lock:
            self._check_open()
            return sorted(u for u, slots in self._units.items() if slot in slots)

    def drop_below(self, slot: int) -> int:
        """Delete snapshots older than ``slot``; return the count."""
        check_slot(slot)
        dropped = 0
        with self._lock:
            self._check_open()
            for unit in list(self._units):
                slots = self._units[unit]
                for old in [s for s in slots if s < slot]:
                    del slots[old]
                    dropped += 1
                if not slots:
                    del self._units[unit]
        return dropped

    def close(self) -> None:
        """Forget everything."""
        with self._lock:
            self._closed = True
            self._units.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StateError("the memory state backend is closed")
