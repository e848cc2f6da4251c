"""Who a candidate is, and whether it is provably dead: a process identity for elections.

A leader killed with SIGKILL leaves its lock znode until its ZooKeeper session expires
(the session timeout, `framework.cli.serve`: 6 s); the restarted process on the same
host would wait that long to lead again. An identity that names the host, the PID
namespace, the PID and the process's start time lets a candidate prove a contender dead
without waiting: same host and namespace, and no process with that PID started at that
time. Anything else (another host or namespace, an identity of another form, a PID
reused by a live process) proves nothing, and the session timeout decides as before.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

_PROC = Path("/proc")


def _start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks after boot), None if there is no such process."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def process_age_s(pid: int | None = None) -> float | None:
    """Seconds since this process (or ``pid``) started; None where /proc does not say."""
    ticks = _start_ticks(os.getpid() if pid is None else pid)
    try:
        uptime = float((_PROC / "uptime").read_text().split()[0])
        return None if ticks is None else uptime - int(ticks) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _namespace() -> str:
    try:
        return str(os.stat(_PROC / "self" / "ns" / "pid").st_ino)
    except OSError:
        return "-"


def process_identity(pid: int | None = None) -> str:
    """``host:pid:ns<pid namespace>:t<start ticks>`` of this process (or ``pid``'s)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:ns{_namespace()}:t{_start_ticks(pid) or '-'}"


def dead_on_this_host(identity: str) -> bool:
    """Whether ``identity`` (`process_identity`) names a process of this host and PID
    namespace that no longer runs. False whenever that cannot be proved."""
    parts = identity.rsplit(":", 3)
    if len(parts) != 4 or not parts[1].isdigit():
        return False
    host, pid, namespace, started = parts
    if host != socket.gethostname() or namespace != f"ns{_namespace()}" or namespace == "ns-":
        return False
    if started == "t-" or int(pid) == os.getpid():
        return False
    return _start_ticks(int(pid)) != started[1:]
