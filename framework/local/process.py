"""Daemon processes of the embedded stack: start, identify, wait for, stop.

Each daemon runs in its own session (it outlives ``flamepipe up``), writes stdout and
stderr to ``<state>/<name>.log`` and its pid to ``<state>/<name>.pid``. A pid is only
trusted if ``/proc/<pid>/cmdline`` still carries the stack's marker, so a recycled pid is
never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from framework.deadline import Deadline
from framework.errors import StackError


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if nothing listens on ``host:port`` and we could bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers bind with SO_REUSEADDR too: connections in TIME_WAIT do not make a port taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.rstrip().splitlines()[-lines:])


def wait_for(
    ready: Callable[[], bool], timeout_s: float, alive: Callable[[], bool], what: str
) -> None:
    """Poll ``ready`` until true; fail early if the process died, or after ``timeout_s``."""
    deadline = Deadline(timeout_s)
    while not deadline.expired:
        if ready():
            return
        if not alive():
            raise StackError(f"{what} exited during start-up")
        time.sleep(0.2)
    raise StackError(f"{what} did not become ready within {timeout_s:.0f} s")


class Daemon:
    """One background process identified by a pid file and a command-line marker."""

    def __init__(self, name: str, state_dir: Path, marker: str) -> None:
        self.name = name
        self.state_dir = state_dir
        self.marker = marker
        self.pid_file = state_dir / f"{name}.pid"
        self.log_file = state_dir / f"{name}.log"

    def start(self, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
        """Start detached, appending to the log; returns the pid."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                cwd=self.state_dir,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._child = proc
        return proc.pid

    def pid(self) -> int | None:
        """The pid of the running daemon, or None if it is not running."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        self._reap()
        return pid if self._is_ours(pid) else None

    def alive(self) -> bool:
        """True while the daemon's process exists."""
        child: subprocess.Popen[bytes] | None = getattr(self, "_child", None)
        if child is not None and child.poll() is None:
            # Started by us: right after fork /proc still shows our own command line, not
            # the marker, so ask the child handle instead.
            return True
        return self.pid() is not None

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout_s``; True if a process was stopped."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        self._signal(pid, signal.SIGTERM)
        deadline = Deadline(timeout_s)
        while not deadline.expired and self._running(pid):
            self._reap()
            time.sleep(0.1)
        if self._running(pid):
            self._signal(pid, signal.SIGKILL)
            while self._running(pid):
                self._reap()
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True

    def _running(self, pid: int) -> bool:
        """True until ``pid`` has ended. A child of ours counts until its handle reaps it:
        an exiting process loses its /proc cmdline (the marker) before it ends, and
        `alive` would still see it running through the handle."""
        child: subprocess.Popen[bytes] | None = getattr(self, "_child", None)
        if child is not None and child.pid == pid:
            return child.poll() is None
        return self._is_ours(pid)

    def kill(self) -> None:
        """SIGKILL at once (crash tests)."""
        pid = self.pid()
        if pid is not None:
            self._signal(pid, signal.SIGKILL)

    def _is_ours(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return False
        zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
        return not zombie and self.marker.encode() in cmdline

    def _reap(self) -> None:
        # A daemon started by this very process must be waited for, or it lingers as a zombie.
        child: subprocess.Popen[bytes] | None = getattr(self, "_child", None)
        if child is not None:
            child.poll()

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
