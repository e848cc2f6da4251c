"""The pipeline's secret keys: from ``FLAMEPIPE_SECRET``, a key file, or one made for it.

Every process of a pipeline (driver, executors, acker, barrier) must sign and verify with
the same keys (`framework.wire.auth`). In order:

1. ``secret`` (``FLAMEPIPE_SECRET``): base64 keys separated by commas;
2. ``secret_file`` (``FLAMEPIPE_SECRET_FILE``): base64 keys, one per line, ``#`` comments;
3. else ``<state_dir>/pipeline.key``, created on first use with a new random key (mode
   0600). Processes sharing the state directory (the local stack, the compose services on
   their shared volume) share it; processes on other hosts need 1. or 2.

The first key signs, every key verifies (rotation: docs/security.md). Keys are never
logged; errors name the file and line, never the text.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from framework.errors import ConfigError

if TYPE_CHECKING:
    from framework.config.settings import Settings

DEFAULT_KEY_FILE = "pipeline.key"
_KEY_BYTES = 32


def new_key() -> str:
    """A new random key, base64 (what `flamepipe keygen` prints)."""
    return base64.b64encode(secrets.token_bytes(_KEY_BYTES)).decode()


def pipeline_keys(settings: Settings) -> tuple[bytes, ...]:
    """Steps 1-3 of the module docstring."""
    # Step 1
    if settings.secret is not None:
        return _parse(settings.secret.split(","), "FLAMEPIPE_SECRET")
    # Step 2
    if settings.secret_file is not None:
        return _parse(_read(settings.secret_file), str(settings.secret_file))
    # Settings built in code rather than loaded still honour the environment.
    if os.environ.get("FLAMEPIPE_SECRET"):
        return _parse(os.environ["FLAMEPIPE_SECRET"].split(","), "FLAMEPIPE_SECRET")
    if os.environ.get("FLAMEPIPE_SECRET_FILE"):
        path = Path(os.environ["FLAMEPIPE_SECRET_FILE"])
        return _parse(_read(path), str(path))
    # Step 3
    path = settings.state_dir / DEFAULT_KEY_FILE
    if not path.exists():
        _create(path)
    return _parse(_read(path), str(path))


def _read(path: Path) -> list[str]:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{path} is readable by others: chmod 600 {path}")
        return path.read_text().splitlines()
    except FileNotFoundError:
        raise ConfigError(
            f"secret_file {path} does not exist: create it with `flamepipe keygen > {path}`"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the key file {path}: {type(exc).__name__}") from None


def _create(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # another process of the pipeline made it first: use theirs
    with os.fdopen(fd, "w") as out:
        out.write(new_key() + "\n")


def _parse(lines: Iterable[str], where: str) -> tuple[bytes, ...]:
    keys = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            keys.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            # Never echo the line: it may be a key with a typo.
            raise ConfigError(
                f"{where}, key {number}: not base64 (make one with `flamepipe keygen`)"
            ) from None
    if not keys:
        raise ConfigError(f"{where} holds no key: add one with `flamepipe keygen`")
    for key in keys:
        if len(key) < 16:
            raise ConfigError(f"{where}: a key of {len(key)} bytes is too short, use 32")
    return tuple(keys)
