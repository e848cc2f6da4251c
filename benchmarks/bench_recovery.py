"""Time from kill -9 to the first new committed output, per component (goal: <= 30 s).

Runs the crash harness (`integration_tests.harness.crash`: driver, acker and barrier as
processes on a stack of its own, word pairs at a steady rate) with a kill every
``kill-every`` seconds of readiness, and reports, per killed component, the seconds from
the SIGKILL to the first bundle produced after it as a read_committed reader sees it
("first output"), and to the first bundle whose GT_last passes the kill ("caught up").
The stack restart (broker and ZooKeeper) every run includes is reported apart: it is not a
kill of a flamepipe process. The output is checked exactly as in the harness.

Run: ``.venv/bin/python benchmarks/bench_recovery.py [records] [rate] [kill-every-s] [kills]
[--continuous] [--standbys]`` (``--continuous``: the stages as long-running tasks;
``--standbys``: a standby acker and barrier queue beside the leaders, and a kill takes the
leader).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # integration_tests

from integration_tests.harness.crash import run_harness
from integration_tests.harness.report import COMPONENTS, STACK, HarnessConfig

GOAL_S = 30.0


def main() -> int:
    execution = "continuous" if "--continuous" in sys.argv else "micro-batch"
    args = [float(a) for a in sys.argv[1:] if not a.startswith("--")]
    records, rate, every, kills = (args + [0.0] * 4)[:4]
    config = HarnessConfig(
        execution=execution,
        records=int(records or 30_000),
        rate=rate or 200.0,
        kill_every_s=every or 10.0,
        kills=int(kills or 10),
        stack_first=int(kills or 10) - 1,  # the stack restart last: kills first
        complete_timeout_s=600,
        standbys="--standbys" in sys.argv,
    )
    report = run_harness(config, Path(tempfile.mkdtemp(prefix="flamepipe-bench-recovery-")))
    print(report.summary())
    worst = 0.0
    for target in (*COMPONENTS, STACK):
        firsts = [e.first_output_s for e in report.events if e.target == target]
        known = [f for f in firsts if f is not None]
        if not known:
            print(f"{target:<8} no measurement ({len(firsts)} events)")
            continue
        if target != STACK:
            worst = max(worst, *known)
        print(
            f"{target:<8} kill -9 -> first new committed output: n={len(known)} "
            f"p50 {statistics.median(known):5.1f} s  max {max(known):5.1f} s"
        )
    verdict = "MET" if worst <= GOAL_S else "NOT MET"
    print(f"worst over driver, acker, barrier: {worst:.1f} s (goal <= {GOAL_S:.0f} s): {verdict}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
