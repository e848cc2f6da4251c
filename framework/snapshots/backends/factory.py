"""The state backend a configuration asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework.errors import ConfigError
from framework.snapshots.backends.base import StateBackend
from framework.snapshots.backends.files import FileBackend
from framework.snapshots.backends.memory import MemoryBackend
from framework.snapshots.backends.rocks import RocksBackend

if TYPE_CHECKING:
    from framework.config import Settings


def open_backend(settings: Settings, app: str | None = None) -> StateBackend:
    """Open ``settings.state_backend`` under ``settings.snapshot_path``.

    ``file`` keeps files in ``<snapshot_path>/files[/<app>]``, ``rocksdb`` a database in
    ``<snapshot_path>/rocksdb[/<app>]``: switching backends never mixes their files, and
    one application's garbage collection never touches another's snapshots.
    """
    kind = settings.state_backend
    tail = () if app is None else (app,)
    if kind == "memory":
        return MemoryBackend()
    if kind == "file":
        return FileBackend(settings.snapshot_path.joinpath("files", *tail))
    if kind == "rocksdb":
        return RocksBackend(settings.snapshot_path.joinpath("rocksdb", *tail))
    raise ConfigError(f"state_backend={kind!r} is not a state backend (FLAMEPIPE_STATE_BACKEND)")
