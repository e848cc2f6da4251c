"""State backends: durable snapshots of stateful operations' hash units (seed 002).

Adapters only: ``framework.core`` produces and restores the state, this package stores it.
`StateBackend` is the interface; `MemoryBackend`, `FileBackend` and `RocksBackend` the
implementations; `open_backend` picks one from `Settings`; `SnapshotWriter` saves off the
processing thread. Decision and layout: ``docs/decisions/snapshots-and-coordination.md``.
"""

from framework.state.backend import SLOT_MAX, StateBackend
from framework.state.factory import open_backend
from framework.state.files import FileBackend
from framework.state.memory import MemoryBackend
from framework.state.rocks import RocksBackend
from framework.state.writer import Saved, SnapshotWriter

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
