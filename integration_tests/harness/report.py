"""What a crash-harness run was asked to do and what it found (config, events, report)."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BROKER",
    "COMPONENTS",
    "EXECUTOR",
    "STACK",
    "TARGETS",
    "ZOOKEEPER",
    "ChaosEvent",
    "Exit",
    "HarnessConfig",
    "HarnessReport",
    "log_tails",
]

COMPONENTS = ("driver", "acker", "barrier")
STACK = "stack"  # the broker and ZooKeeper stopped (SIGTERM) and started again
BROKER = "broker"  # the broker killed with SIGKILL, started again on its data
ZOOKEEPER = "zookeeper"  # ZooKeeper killed with SIGKILL, started again on its data
EXECUTOR = "executor"  # one executor JVM of the Spark standalone cluster (SIGKILL)
TARGETS = (*COMPONENTS, STACK, BROKER, ZOOKEEPER, EXECUTOR)
"""The chaos target that restarts the broker and ZooKeeper."""


@dataclass(frozen=True, slots=True)
class HarnessConfig:
    """One harness run: how much input, how fast, how much chaos.

    ``kills``: the number of chaos events (None: until the input is written; if given,
    the chaos goes on after production until that many happened). Every run restarts the
    stack at least once: if no event did before the last one, the last one does.
    ``stall_timeout_ms``: the driver's stall watch (`Settings.stall_timeout_ms`).
    ``targets``: what the shuffled rounds of kills take (`TARGETS` but `STACK`);
    ``stack_every`` 0: no stack restarts. ``cluster``: Spark on a standalone master and
    two one-core workers (six slots each in continuous execution) instead of
    ``local[2]``. ``restart_after_s``: how long a killed broker or ZooKeeper stays down.
    ``one_at_a_time``: the next event only once output was committed after the last (each
    recovery measured alone). ``execution``: how the stages run (`Settings.execution`;
    continuous on ``local[4]``, a slot per task). ``standbys``: a second acker and barrier
    process queue as standbys; a kill takes the one that leads and restarts it (a standby
    again), so recovery is the standby's takeover, not a process start.
    """

    records: int = 20_000
    rate: float = 200.0
    kill_every_s: float = 5.0
    kills: int | None = None
    stack_first: int = 2
    stack_every: int = 8
    pipeline: str = "word_pairs"
    words_per_line: int = 4
    vocabulary: int = 200
    seed: int = 1
    complete_timeout_s: float = 600.0
    ready_timeout_s: float = 240.0
    stall_timeout_ms: int = 120_000
    targets: tuple[str, ...] = COMPONENTS
    cluster: bool = False
    restart_after_s: float = 3.0
    one_at_a_time: bool = False
    execution: str = "micro-batch"
    standbys: bool = False


@dataclass(slots=True)
class ChaosEvent:
    """One kill (or stack restart) and how long the output took to recover from it."""

    target: str
    at_ms: int
    first_output_s: float | None = None
    caught_up_s: float | None = None
    # Whether input was still being written at the kill: after the last record, a pipeline
    # that had caught up has no output left to show that it recovered.
    input_left: bool = True
    # The broker or ZooKeeper (or both): seconds from the kill until it served again.
    down_s: float | None = None

    @property
    def after_return_s(self) -> float | None:
        """First output after a killed server served again (the pipeline's own part)."""
        if self.first_output_s is None:
            return None
        return self.first_output_s - (self.down_s or 0.0)


@dataclass(frozen=True, slots=True)
class Exit:
    """A component that exited by itself, with the last line it logged."""

    component: str
    code: int
    at_s: float
    last_line: str


@dataclass(slots=True)
class HarnessReport:
    """What a run measured; `ok` when the output is exactly the oracle's."""

    pipeline: str
    records: int
    expected_items: int
    output_items: int
    events: list[ChaosEvent]
    exits: list[Exit]
    duplicates: int
    lost: int
    identical: bool
    bundles_ok: bool
    bundle_error: str | None
    complete: bool
    epoch: int
    producer_replaced: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    work_dir: Path | None = None

    @property
    def ok(self) -> bool:
        """Exactly once: nothing twice, nothing lost, bundles verified."""
        return self.identical and self.duplicates == 0 and self.lost == 0 and self.bundles_ok

    def kills(self) -> Counter[str]:
        """Chaos events per target."""
        return Counter(event.target for event in self.events)

    def summary(self) -> str:
        """The human report."""
        kills = self.kills()
        exits = Counter(e.component for e in self.exits)
        lines = [
            f"crash harness: pipeline {self.pipeline}, {self.records} records, "
            f"{self.expected_items} expected items, {self.output_items} output items",
            "kills: "
            + ", ".join(f"{t} {kills[t]}" for t in TARGETS if kills[t])
            + f" ({sum(not e.input_left for e in self.events)} after the input ended)",
            "exits by themselves (restarted): "
            + (", ".join(f"{c} {n}" for c, n in sorted(exits.items())) or "none"),
        ]
        for target in TARGETS:
            events = [e for e in self.events if e.target == target]
            if events:
                first = _stats([e.first_output_s for e in events])
                caught_up = _stats([e.caught_up_s for e in events])
                line = f"recovery {target:<8} first output {first}; caught up {caught_up}"
                if any(e.down_s is not None for e in events):
                    back = _stats([e.after_return_s for e in events])
                    line += f"; first output after it served again {back}"
                lines.append(line)
        bundles = "verified" if self.bundles_ok else f"NOT verified: {self.bundle_error}"
        complete = "yes" if self.complete else "NO (timed out)"
        lines += [
            f"duplicates {self.duplicates}, lost {self.lost}, "
            f"identical {'yes' if self.identical else 'NO'}, bundles {bundles}",
            f"output complete {complete}, final epoch {self.epoch}, "
            f"input producer replaced {self.producer_replaced} times",
            "seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in self.seconds.items()),
        ]
        for e in self.exits:
            lines.append(f"  exit: {e.component} code {e.code} at {e.at_s:.0f} s: {e.last_line}")
        if self.work_dir is not None:
            lines.append(f"logs: {self.work_dir / 'logs'}")
        return "\n".join(lines)

    def tails(self, lines: int = 40) -> str:
        """The end of every log of the run (for a failing test's message)."""
        if self.work_dir is None:
            return "(no logs)"
        return log_tails(self.work_dir, lines)


def log_tails(work_dir: Path, lines: int = 40) -> str:
    """The end of every log under ``work_dir/logs``, without librdkafka's noise."""
    parts = []
    for log in sorted((work_dir / "logs").glob("*.log")):
        kept = [ln for ln in log.read_text(errors="replace").splitlines() if not ln.startswith("%")]
        parts.append(f"--- {log} ---\n" + "\n".join(kept[-lines:]))
    return "\n".join(parts)


def _stats(values: list[float | None]) -> str:
    """``p50 X s, max Y s`` of the known values (and how many never recovered)."""
    known = sorted(v for v in values if v is not None)
    missing = len(values) - len(known)
    text = f"p50 {statistics.median(known):.1f} s, max {known[-1]:.1f} s" if known else "n/a"
    return text + (f" ({missing} n/a)" if missing else "")
