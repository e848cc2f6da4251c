"""CPU seconds by process role, from /proc: what each part of the stack spent on a phase.

Counts this process and its descendants (the embedded broker, ZooKeeper, Spark's JVM and
Python workers, service processes). A process that exited meanwhile (a Python worker
replaced) takes its seconds with it, so the totals are lower bounds.
"""

from __future__ import annotations

import os

__all__ = ["cpu_seconds", "print_cpu"]

_ROLES = (
    # Not the bare module name: the Spark JVM's command line names it in its settings.
    ("-m framework.runners.spark.daemon", "python workers (stage tasks)"),
    ("pyspark.daemon", "python workers (stage tasks)"),
    ("pyspark/daemon", "python workers (stage tasks)"),
    ("#zookeeper", "zookeeper"),
    ("#kafka", "kafka broker"),
    ("framework.cli acker", "acker process"),
    ("--sink eo", "barrier process eo"),
    ("--sink alo", "barrier process alo"),
    ("multiprocessing", "benchmark reader"),
    ("#spark-master", "spark master"),
    ("#spark-worker", "spark worker"),
    ("CoarseGrainedExecutorBackend", "spark executor jvm"),
    ("java", "spark jvm"),
)


def _role(pid: int, cmd: str) -> str:
    if pid == os.getpid():
        return "driver (python)"
    return next((role for needle, role in _ROLES if needle in cmd), "other")


def _stats() -> tuple[dict[int, int], dict[int, float]]:
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    return parents, times


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process and its descendants, by role."""
    parents, times = _stats()
    mine = {os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in mine} - mine
        grew = bool(more)
        mine |= more
    roles: dict[str, float] = {}
    for pid in mine:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        role = _role(pid, cmd)
        roles[role] = roles.get(role, 0.0) + times.get(pid, 0.0)
    return roles


def print_cpu(before: dict[str, float], after: dict[str, float], span_s: float) -> None:
    """The CPU each role used between two `cpu_seconds` readings, and in cores."""
    total = 0.0
    for role in sorted(after):
        used = after[role] - before.get(role, 0.0)
        total += used
        print(f"    {role:<34} {used:6.1f} CPU-s  {used / span_s:5.2f} cores")
    print(f"    {'total':<34} {total:6.1f} CPU-s  {total / span_s:5.2f} cores (of 2)")
