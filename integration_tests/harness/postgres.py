"""A PostgreSQL server of its own on 127.0.0.1, for the database sink's tests.

`LocalPostgres` runs the installed server's ``initdb`` and ``pg_ctl`` (on the PATH or under
``/usr/lib/postgresql/<version>/bin``; `scripts/bootstrap.sh` installs the Debian package
when missing) in a fresh directory with trust authentication on a free port, and stops it
(and removes the directory) on exit. The server refuses to run as root: as root its
commands run as the ``postgres`` user, which the Debian package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from framework.local.provision import free_port

__all__ = ["LocalPostgres"]

_USER = "flamepipe"


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found is not None:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not candidates:
        raise RuntimeError(
            f"no PostgreSQL {name}: run scripts/bootstrap.sh (as root it installs it)"
        )
    return candidates[-1]


class LocalPostgres:
    """The server; a context manager. ``dsn`` once entered."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="flamepipe-pg-"))
        self.data = self.root / "data"
        self._as_postgres = os.geteuid() == 0
        self._started = False

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={_USER} dbname=postgres"

    def _run(self, *args: str) -> None:
        argv = ["runuser", "-u", "postgres", "--", *args] if self._as_postgres else list(args)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}"
            )

    def __enter__(self) -> LocalPostgres:
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        try:
            self._run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", _USER, "-N")
            options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root}"
            log = str(self.root / "server.log")
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")
            self._started = True
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_exc_info: object) -> None:
        try:
            if self._started:
                self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
                self._started = False
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
