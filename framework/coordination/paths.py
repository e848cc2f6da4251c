"""The znode layout of one application (``docs/decisions/snapshots-and-coordination.md``)::

/flamepipe/<app>/committed              the committed snapshot (JSON; empty before one)
/flamepipe/<app>/snapshots/<slot:020d>  every committed snapshot that gc kept (JSON)
/flamepipe/<app>/epoch                  the current epoch (JSON; empty before a bump)
/flamepipe/<app>/leaders/<role>/lock/   election contenders (ephemeral, sequential)
/flamepipe/<app>/leaders/<role>/token   fencing token, +1 at every takeover
"""

from __future__ import annotations

import re

ROOT = "/flamepipe"
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def check_name(name: str, what: str) -> str:
    """``name`` if it is usable as one znode name, else `ValueError` naming ``what``."""
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
        raise ValueError(f"{what} {name!r} is not a znode name: use letters, digits, . _ -")
    return name


def app_root(app: str) -> str:
    """``/flamepipe/<app>``."""
    return f"{ROOT}/{check_name(app, 'app')}"


def committed_path(app: str) -> str:
    """The znode holding the committed snapshot record."""
    return f"{app_root(app)}/committed"


def snapshots_path(app: str) -> str:
    """The parent of the per-slot snapshot records."""
    return f"{app_root(app)}/snapshots"


def snapshot_path(app: str, slot: int) -> str:
    """The record of the snapshot at ``slot``, zero-padded so names sort by slot."""
    return f"{snapshots_path(app)}/{slot:020d}"


def epoch_path(app: str) -> str:
    """The znode holding the current epoch record."""
    return f"{app_root(app)}/epoch"


def leader_path(app: str, role: str) -> str:
    """The election path of ``role`` (e.g. ``acker``, ``barrier``) for `LeaderElection`."""
    return f"{app_root(app)}/leaders/{check_name(role, 'role')}"
