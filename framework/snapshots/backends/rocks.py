"""Snapshots in RocksDB (``rocksdict``): many units and slots in one local database.

Keys are ``<unit utf-8> NUL <slot, 8 bytes big-endian>``, so a unit's snapshots are
contiguous and sorted by slot: ``latest`` is one ``seek_for_prev``. Units hold no NUL, so
no unit's keys interleave with another's. Every write is synced to the write-ahead log
before ``put`` returns; a RocksDB write is atomic, so a crash keeps the old value.

RocksDB locks its directory: one process per path. Use `FileBackend` on a shared mount.
``rocksdict`` is an optional dependency (``pip install 'flamepipe[rocksdb]'``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from framework.errors import ConfigError, SnapshotMissing, StateError
from framework.snapshots.backends.base import SLOT_MAX, check_key, check_slot


def _key(unit: str, slot: int) -> bytes:
    return unit.encode() + b"\x00" + slot.to_bytes(8, "big")


def _split(key: bytes) -> tuple[str, int]:
    return key[:-9].decode(), int.from_bytes(key[-8:], "big")


def _rocksdict() -> Any:
    try:
        import rocksdict
    except ImportError:
        raise ConfigError(
            "state_backend=rocksdb needs the rocksdict package: "
            "pip install 'flamepipe[rocksdb]' (or use state_backend=file)"
        ) from None
    return rocksdict


class RocksBackend:
    """A `StateBackend` in a RocksDB database at ``path`` (created if missing)."""

    def __init__(self, path: str | Path) -> None:
        rocksdict = _rocksdict()
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = rocksdict.Rdict(str(self.path), rocksdict.Options(raw_mode=True))
        except Exception as exc:  # rocksdict raises plain Exception for I/O and lock errors
            raise StateError(
                f"cannot open RocksDB at {self.path} (is another process using it?): {exc}"
            ) from exc
        options = rocksdict.WriteOptions()
        options.sync = True
        self._db.set_write_options(options)
        self._write_batch = rocksdict.WriteBatch
        # One call at a time: iterators and writes from the writer thread and a reader
        # thread must not interleave inside the binding.
        self._lock = threading.Lock()
        self._closed = False

    def put(self, unit: str, slot: int, data: bytes) -> None:
        """Store ``data`` at ``(unit, slot)``: one synced RocksDB write."""
        check_key(unit, slot)
        with self._lock:
            self._check_open()
            self._db[_key(unit, slot)] = bytes(data)

    def get(self, unit: str, slot: int) -> bytes:
        """The snapshot at ``(unit, slot)``; `SnapshotMissing` if absent."""
        check_key(unit, slot)
        with self._lock:
            self._check_open()
            data: bytes | None = self._db.get(_key(unit, slot))
        if data is None:
            raise SnapshotMissing(f"no snapshot of unit {unit!r} at slot {slot} in {self.path}")
        return data

    def latest(self, unit: str, at_or_below: int = SLOT_MAX) -> tuple[int, bytes] | None:
        """The newest ``(slot, data)`` of ``unit`` at or below ``at_or_below``."""
        check_key(unit, at_or_below)
        with self._lock:
            self._check_open()
            it = self._db.iter()
            it.seek_for_prev(_key(unit, at_or_below))
            if not it.valid():
                return None
            found_unit, slot = _split(it.key())
            return (slot, it.value()) if found_unit == unit else None

    def units(self, slot: int) -> list[str]:
        """Units with a snapshot at exactly ``slot`` (one seek per unit)."""
        check_slot(slot)
        found = []
        with self._lock:
            self._check_open()
            it = self._db.iter()
            it.seek_to_first()
            while it.valid():
                unit, _ = _split(it.key())
                if self._db.get(_key(unit, slot)) is not None:
                    found.append(unit)
                # Every key of `unit` starts with unit + NUL: the next unit starts at or
                # after unit + 0x01.
                it.seek(unit.encode() + b"\x01")
        return sorted(found)

    def drop_below(self, slot: int) -> int:
        """Delete snapshots older than ``slot`` in one atomic batch; return the count."""
        check_slot(slot)
        batch = self._write_batch(raw_mode=True)
        dropped = 0
        with self._lock:
            self._check_open()
            it = self._db.iter()
            it.seek_to_first()
            while it.valid():
                if _split(it.key())[1] < slot:
                    batch.delete(it.key())
                    dropped += 1
                it.next()
            if dropped:
                self._db.write(batch)
        return dropped

    def close(self) -> None:
        """Close the database (releases its directory lock)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StateError(f"the RocksDB state backend at {self.path} is closed")
