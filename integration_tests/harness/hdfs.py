"""HDFS of its own on 127.0.0.1, for the file sink's ``webhdfs://`` tests.

`LocalHdfs` runs Hadoop's MiniDFSCluster (the real NameNode and DataNode servers, in one
JVM of their own: ``MiniHdfs.java`` beside this file, launched as a single source file)
from the ``hdfs-minicluster`` jar bundle, in a fresh directory, and stops it (SIGTERM,
then SIGKILL) and removes the directory on exit.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

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
        jars = jar_bundle("hdfs-minicluster", self.settings.cache_dir)
        classpath = ":".join(str(j) for j in jars)
        argv = [java_executable(), "-Xmx512m", "-cp", classpath, str(_SOURCE)]
        self._daemon.start([*argv, str(self.root / "data"), str(self.port)])
        try:
            wait_for(self._ready, 120, self._daemon.alive, "MiniDFSCluster")
        except Exception as exc:
            self.__exit__(None, None, None)
            raise RuntimeError(f"{exc}:\n{log_tail(self._daemon.log_file, 30)}") from exc
        return self

    def _ready(self) -> bool:
        try:
            return _READY.search(self._daemon.log_file.read_text(errors="replace")) is not None
        except FileNotFoundError:
            return False

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._daemon.stop(timeout_s=30)
        shutil.rmtree(self.root, ignore_errors=True)
