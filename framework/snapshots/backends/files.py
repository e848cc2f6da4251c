"""Snapshots as files: one file per key, safe on a local disk or a shared mount.

Layout under the backend's directory::

    <unit, percent-encoded>/            one directory per hash unit
        <slot, 20 digits>.snap          the snapshot of the unit at that slot
        .<slot>.<random>.tmp            a put in progress, or one a crash cut short

A unit name is percent-encoded (``urllib.parse.quote`` with no safe characters, and a
leading dot as ``%2E``), so ``/``, ``..`` or a hidden name can never escape or collide.
Slots are zero-padded so names sort in slot order. Readers look only at ``*.snap``
files; a temporary file is invisible to them and is deleted when the backend is opened
once it is older than ``stale_after_s`` (younger ones may be another process's put).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from pathlib import Path
from urllib.parse import quote, unquote

from framework.errors import SnapshotMissing, StateError
from framework.snapshots.backends.base import SLOT_MAX, check_key, check_slot

_SNAP = re.compile(r"^(\d{20})\.snap$")
_TEMP = re.compile(r"^\.(\d{20})\.[0-9a-f]{32}\.tmp$")


def _encode_unit(unit: str) -> str:
    name = quote(unit, safe="")
    return "%2E" + name[1:] if name.startswith(".") else name


def _snap_name(slot: int) -> str:
    return f"{slot:020d}.snap"


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` and fsync it: its bytes are on disk on return."""
    with open(path, "xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def fsync_dir(path: Path) -> None:
    # Some network filesystems refuse fsync on a directory; their rename is already
    # synchronous on the server, so there is nothing more to wait for.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class FileBackend:
    """A `StateBackend` of files under ``directory`` (created if missing)."""

    def __init__(self, directory: str | Path, stale_after_s: float = 600.0) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create snapshot directory {self.directory}: {exc}") from exc
        self.removed_temp = self._remove_stale_temp(stale_after_s)

    def put(self, unit: str, slot: int, data: bytes) -> None:
        """Store ``data`` at ``(unit, slot)`` atomically and durably.

        1. Write the bytes to a fresh temporary file in the unit's directory (the same
           filesystem, so the rename below is atomic).
        2. fsync the file: its bytes are on disk before its name is.
        3. ``os.replace`` it onto ``<slot>.snap``: a reader sees the old file or the new one.
        4. fsync the directory: the rename itself survives a power loss.
        """
        check_key(unit, slot)
        folder = self._unit_dir(unit, create=True)
        temp = folder / f".{slot:020d}.{uuid.uuid4().hex}.tmp"
        try:
            # Steps 1 and 2
            write_synced(temp, data)
            # Step 3
            os.replace(temp, folder / _snap_name(slot))
            # Step 4
            fsync_dir(folder)
        except OSError as exc:
            raise StateError(f"cannot save snapshot of {unit!r} at slot {slot}: {exc}") from exc
        finally:
            # Any failure before step 3 leaves the temporary file; after it, it is gone.
            with contextlib.suppress(OSError):
                temp.unlink()

    def get(self, unit: str, slot: int) -> bytes:
        """The snapshot at ``(unit, slot)``; `SnapshotMissing` if absent."""
        check_key(unit, slot)
        path = self._unit_dir(unit) / _snap_name(slot)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise SnapshotMissing(f"no snapshot of unit {unit!r} at slot {slot}: {path}") from None
        except OSError as exc:
            raise StateError(f"cannot read snapshot {path}: {exc}") from exc

    def latest(self, unit: str, at_or_below: int = SLOT_MAX) -> tuple[int, bytes] | None:
        """The newest ``(slot, data)`` of ``unit`` at or below ``at_or_below``."""
        check_key(unit, at_or_below)
        slots = sorted((s for s in self._slots(unit) if s <= at_or_below), reverse=True)
        for slot in slots:
            # A concurrent drop_below may delete a file between listing and reading it.
            with contextlib.suppress(SnapshotMissing):
                return slot, self.get(unit, slot)
        return None

    def units(self, slot: int) -> list[str]:
        """Units with a snapshot at exactly ``slot``."""
        check_slot(slot)
        name = _snap_name(slot)
        return sorted(
            unquote(entry.name)
            for entry in self._unit_entries()
            if os.path.exists(os.path.join(entry.path, name))
        )

    def drop_below(self, slot: int) -> int:
        """Delete snapshot files older than ``slot``; return the count.

        Unit directories stay (a concurrent put may be about to write into one).
        """
        check_slot(slot)
        dropped = 0
        for entry in self._unit_entries():
            for name in os.listdir(entry.path):
                match = _SNAP.match(name)
                if match and int(match.group(1)) < slot:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(entry.path, name))
                        dropped += 1
        return dropped

    def close(self) -> None:
        """Nothing to release: every call opens and closes its own files."""

    def _unit_dir(self, unit: str, create: bool = False) -> Path:
        folder = self.directory / _encode_unit(unit)
        if create and not folder.is_dir():
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                raise StateError(f"cannot create unit directory {folder}: {exc}") from exc
            fsync_dir(self.directory)
        return folder

    def _unit_entries(self) -> list[os.DirEntry[str]]:
        with os.scandir(self.directory) as entries:
            return [e for e in entries if e.is_dir()]

    def _slots(self, unit: str) -> list[int]:
        try:
            names = os.listdir(self._unit_dir(unit))
        except FileNotFoundError:
            return []
        return [int(m.group(1)) for m in map(_SNAP.match, names) if m]

    def _remove_stale_temp(self, stale_after_s: float) -> int:
        """Delete temporary files older than ``stale_after_s``; return how many."""
        cutoff = time.time() - stale_after_s
        removed = 0
        for entry in self._unit_entries():
            for temp in os.scandir(entry.path):
                if _TEMP.match(temp.name) and temp.stat().st_mtime < cutoff:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(temp.path)
                        removed += 1
        return removed
