"""A driver (micro-batch) or an executor (continuous) whose clock runs ahead of the broker's
loses nothing.

Heartbeats of caught-up source partitions promise "nothing more below now - front_lag_ms".
Measured before this was fixed: with the driver's clock 2 s ahead (the same effect as a
broker pause longer than ``front_lag_ms``), 0 of 100 items reached the output, all dropped
as replays. Now the fronts take "now" from the broker (the LogAppendTime of their own
heartbeat records, never overestimated), and a source task refuses, before committing,
records below what was heartbeated. Here the driver's clock is set 2 s ahead
(``FLAMEPIPE_FAILPOINTS=clock.skew_ms=2000``): the output must equal the oracle. In
continuous execution the source tasks heartbeat, on their executors' clocks; each commits
how far its clock runs ahead (`framework.wire.positions.TaskCounts`), shown by the driver.
"""

from __future__ import annotations

from typing import Any

import pytest

from framework.config import Settings
from framework.demos.text import generate_lines
from framework.demos.wordcount import wordcount
from integration_tests.harness.runs import (
    BOTH_EXECUTIONS,
    assert_running_counts,
    new_app,
    produce_lines,
    read_output,
    running,
)


# Continuous: the source tasks heartbeat from their executors' clocks (the driver's
# failpoints reach them).
@BOTH_EXECUTIONS
def test_a_clock_2_s_ahead_loses_nothing(
    stack: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch, execution: str, partitions: int
) -> None:
    monkeypatch.setenv("FLAMEPIPE_FAILPOINTS", "clock.skew_ms=2000")
    settings = stack.with_(parallelism=partitions, execution=execution)
    bootstrap = settings.kafka_bootstrap
    app, source, sink = new_app("skew", "counts")
    lines = generate_lines(100, words_per_line=5, vocabulary=30, seed=12)
    with running(settings, spark, wordcount(app, source, sink, partitions)) as run:
        # Two bursts with idle time between: the partitions are caught up, so they are
        # heartbeated from the clock, the case the skew broke.
        until = produce_lines(bootstrap, source, lines[:50], partitions=partitions)
        run.wait_released(until, timeout_s=120)
        until = produce_lines(bootstrap, source, lines[50:], partitions=partitions)
        run.wait_released(until, timeout_s=120)
        items = read_output(bootstrap, sink)
        dropped = sum(b.replays_dropped for b in run.barriers())
        if execution == "continuous":  # measured by the source task, shown by the driver
            ahead = [max(q.stats.clock_ahead_ms.values(), default=0) for q in run.queries.values()]
            measured = -max(ahead)
        else:
            assert run.fronts is not None
            measured = run.fronts.broker_offset_ms
    assert measured is not None and measured <= -1_900, measured  # the skew was seen
    assert dropped == 0
    assert_running_counts(items, lines)
