"""Puts snapshots in a loop until killed: ``python -m unit_tests.snapshots.crash_writer KIND PATH``.

Each value is self-checking (see `value` / `is_whole`), so a reader after ``kill -9`` can
tell a whole snapshot from a torn one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from framework.snapshots.backends.base import StateBackend
from framework.snapshots.backends.files import FileBackend
from framework.snapshots.backends.rocks import RocksBackend

__all__ = ["SIZE", "is_whole", "open_kind", "value"]

SIZE = 256 * 1024


def value(n: int) -> bytes:
    """Snapshot number ``n``: its number, then SIZE bytes all equal to ``n % 251``."""
    return n.to_bytes(8, "big") + bytes([n % 251]) * SIZE


def is_whole(data: bytes) -> bool:
    """Whether ``data`` is exactly one `value`."""
    return data == value(int.from_bytes(data[:8], "big"))


def open_kind(kind: str, path: Path) -> StateBackend:
    """A persistent backend of ``kind`` at ``path``."""
    return FileBackend(path) if kind == "file" else RocksBackend(path)


def main(kind: str, path: str) -> None:
    backend = open_kind(kind, Path(path))
    for n in range(1_000_000):
        backend.put(f"unit-{n % 3}", n % 5, value(n))
        if n == 10:
            print("ready", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
