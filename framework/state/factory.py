"""The state backend a configuration asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework.errors import ConfigError
from framework.state.backend import StateBackend
from framework.state.files import FileBackend
from framework.state.memory import MemoryBackend
from framework.state.rocks import RocksBackend

if TYPE_CHECKING:
    from framework.config import Settings

__all__ = ["open_backend"]


def open_backend(settings: Settings) -> StateBackend:
    """Open ``settings.state_backend`` under ``settings.snapshot_path``.

    ``file`` keeps files in ``<snapshot_path>/files``, ``rocksdb`` a database in
    ``<snapshot_path>/rocksdb``: switching backends never mixes their files.
    """
    kind = settings.state_backend
    if kind == "memory":
        return MemoryBackend()
    if kind == "file":
        return FileBackend(settings.snapshot_path / "files")
    if kind == "rocksdb":
        return RocksBackend(settings.snapshot_path / "rocksdb")
    raise ConfigError(f"state_backend={kind!r} is not a state backend (FLAMEPIPE_STATE_BACKEND)")
