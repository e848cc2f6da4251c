"""The crash harness (`integration_tests.harness.crash`) in CI.

Each run starts a stack of its own (the session stack is shared and must not restart),
kills the driver, the acker and the barrier with SIGKILL, restarts the broker and
ZooKeeper once (stages as micro-batches, and as continuous long-running tasks), and
requires the read_committed output to equal the oracle exactly:
0 duplicates, 0 lost, and every bundle verified by `BundleConsumer`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from integration_tests.harness.crash import run_harness
from integration_tests.harness.report import COMPONENTS, STACK, HarnessConfig, HarnessReport


def _check(report: HarnessReport, kills: int) -> None:
    print(report.summary())
    context = f"\n{report.summary()}\n{report.tails()}"
    done = report.kills()
    assert done[STACK] >= 1, f"the broker and ZooKeeper were never restarted{context}"
    assert all(done[c] >= 1 for c in COMPONENTS), f"a component was never killed{context}"
    assert sum(done.values()) >= kills, context
    assert report.complete, f"the output did not complete in time{context}"
    assert report.duplicates == 0, context
    assert report.lost == 0, context
    assert report.identical, context
    assert report.bundles_ok, context


# 6k lines at 100/s: ~60 s of input, 4 events: the driver, the acker and the barrier each
# killed once in shuffled order, the third event restarts the stack (the long runs behind
# `slow` do more of each). 45 s of stalled min time start a recovery: past a driver's
# restart (first output 20-45 s after a kill).
_SHORT = HarnessConfig(
    records=6_000, rate=100, kill_every_s=5, kills=4, complete_timeout_s=300,
    stall_timeout_ms=45_000,
)  # fmt: skip


def test_short_chaos_run_output_is_exactly_once(tmp_path: Path) -> None:
    _check(run_harness(_SHORT, tmp_path), kills=4)


def test_short_chaos_run_in_continuous_stages_is_exactly_once(tmp_path: Path) -> None:
    """The same chaos with every stage a set of long-running Spark tasks: a driver kill
    takes the tasks' Python workers with it, an acker or barrier kill leaves them running,
    a stack restart breaks their consumers and transactions under them."""
    _check(run_harness(replace(_SHORT, execution="continuous"), tmp_path), kills=4)


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["word_pairs", "two_groupings"])
def test_long_chaos_run_output_is_exactly_once(tmp_path: Path, pipeline: str) -> None:
    # 200k lines at 400/s: ~500 s of input, a kill every 5 s of readiness, the stack
    # restarted at the third event and every eighth after.
    config = HarnessConfig(
        records=200_000, rate=400, kill_every_s=5, pipeline=pipeline, complete_timeout_s=900
    )
    _check(run_harness(config, tmp_path), kills=10)
