"""State backends: durable snapshots of stateful operations' hash units.

Adapters only: ``framework.core`` produces and restores the state, this package stores it.
`StateBackend` is the interface; `MemoryBackend`, `FileBackend` and `RocksBackend` the
implementations; `open_backend` picks one from `Settings`; `SnapshotWriter` saves off the
processing thread. Decision and layout: ``docs/decisions/snapshots-and-coordination.md``.
"""

from framework.snapshots.backends.base import SLOT_MAX, StateBackend
from framework.snapshots.backends.factory import open_backend
from framework.snapshots.backends.files import FileBackend
from framework.snapshots.backends.memory import MemoryBackend
from framework.snapshots.backends.rocks import RocksBackend
from framework.snapshots.snapshot_writer import Saved, SnapshotWriter

__all__ = [
    "SLOT_MAX",
    "FileBackend",
    "MemoryBackend",
    "RocksBackend",
    "Saved",
    "SnapshotWriter",
    "StateBackend",
    "open_backend",
]
