"""HDFS of its own on 127.0.0.1, for the file sink's ``webhdfs://`` tests.

`LocalHdfs` runs Hadoop's MiniDFSCluster (the real NameNode and DataNode servers, in one
JVM of their own: ``MiniHdfs.java`` beside this file, launched as a single source file)
from the ``hdfs-minicluster`` jar bundle, in a fresh directory, and stops it (SIGTERM,
then SIGKILL) and removes the directory on exit. `LocalHdfs.restart` kills it with
SIGKILL and starts it again on the same port and files, as a NameNode crash would.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

from framework.config import Settings
from framework.local.jars import jar_bundle
from framework.local.process import Daemon, log_tail, wait_for
from framework.local.provision import free_port
from framework.local.tools import java_executable

__all__ = ["LocalHdfs"]

_SOURCE = Path(__file__).with_name("MiniHdfs.java")
_READY = re.compile(r"MINIHDFS READY (\d+)")


class LocalHdfs:
    """The cluster; a context manager. ``uri(path)`` names a directory in it."""

    def __init__(self, settings: Settings, port: int | None = None) -> None:
        self.settings = settings
        self.port = port if port is not None else free_port()
        self.root = Path(tempfile.mkdtemp(prefix="flamepipe-hdfs-"))
        self._daemon = Daemon("minihdfs", self.root, str(self.root))

    def uri(self, path: str) -> str:
        return f"webhdfs://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def __enter__(self) -> LocalHdfs:
        try:
            self._start()
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def restart(self, down_s: float) -> None:
        """kill -9 of the cluster's JVM (NameNode and DataNode at once); ``down_s`` later,
        the same cluster again (its files kept, WebHDFS on the same port)."""
        self._daemon.kill()
        wait_for(lambda: not self._daemon.alive(), 30, lambda: True, "MiniDFSCluster's end")
        time.sleep(down_s)
        self._start()

    def _start(self) -> None:
        jars = jar_bundle("hdfs-minicluster", self.settings.cache_dir)
        classpath = ":".join(str(j) for j in jars)
        argv = [java_executable(), "-Xmx512m", "-cp", classpath, str(_SOURCE)]
        log = self._daemon.log_file
        seen = log.stat().st_size if log.exists() else 0
        self._daemon.start([*argv, str(self.root / "data"), str(self.port)])

        def ready() -> bool:  # this start's line, not an earlier one's
            with open(log, "rb") as text:
                text.seek(seen)
                return _READY.search(text.read().decode(errors="replace")) is not None

        try:
            wait_for(ready, 120, self._daemon.alive, "MiniDFSCluster")
        except Exception as exc:
            raise RuntimeError(f"{exc}:\n{log_tail(log, 30)}") from exc

    def __exit__(self, *_exc_info: object) -> None:
        self._daemon.stop(timeout_s=30)
        shutil.rmtree(self.root, ignore_errors=True)
