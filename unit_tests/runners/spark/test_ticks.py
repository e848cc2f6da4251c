"""Which aggregate partitions the driver ticks, from the tasks' reports (no Spark, no Kafka)."""

from __future__ import annotations

import threading
from pathlib import Path

from framework.config import Settings
from framework.core.graph import Kind
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import plan_stages
from framework.runners.spark.queries import StageQuery
from framework.runners.spark.ticks import WindowTicks
from unit_tests.plan.test_aggregate_task import counting


def query(tmp_path: Path) -> StageQuery:
    graph = counting()
    stages = plan_stages(graph, {n.id: "lines" for n in graph.by_kind(Kind.SOURCE)})
    aggregate = stages[1]
    spec = StageSpec(graph, aggregate, {aggregate.topic: 3}, 2)
    return StageQuery(spec, "127.0.0.1:1", str(tmp_path / "cp"), Settings(), lambda: 0)


def row(partition: int, next_due: int) -> dict[str, int]:
    return {"partition": partition, "next_due": next_due}


def test_unknown_partitions_are_ticked_once_then_after_the_retry_time(tmp_path: Path) -> None:
    q = query(tmp_path)
    assert q.ticks_due(0, now=0.0, retry_s=10) == [0, 1, 2]  # state unknown: look once
    assert q.ticks_due(5, now=1.0, retry_s=10) == []  # outstanding
    assert q.ticks_due(5, now=11.0, retry_s=10) == [0, 1, 2]  # no report came: again


def test_reports_decide_which_partition_needs_a_tick(tmp_path: Path) -> None:
    q = query(tmp_path)
    q.ticks_due(0, now=0.0, retry_s=10)
    q.note_due([row(0, 120), row(1, -1), row(2, 300)])
    assert q.ticks_due(100, now=1.0, retry_s=10) == []  # nothing due yet
    assert q.ticks_due(120, now=2.0, retry_s=10) == [0]  # min time reached 0's window end
    assert q.ticks_due(400, now=3.0, retry_s=10) == [2]  # 0 outstanding, 1 has no window
    q.note_due([row(0, 200), row(2, -2)])  # 2's task was skipped: its state is unknown
    assert q.ticks_due(400, now=4.0, retry_s=10) == [0]  # 2 still outstanding


class _Stage:
    """An aggregate stage whose windows are never due: it only counts the rounds."""

    topic = "shuffle"

    def __init__(self) -> None:
        self.rounds = threading.Event()

    def min_time(self) -> int:
        return 0

    def ticks_due(self, min_time: int, now: float, retry_s: float) -> list[int]:
        self.rounds.set()
        return []


def test_a_poke_runs_a_round_at_once_not_at_the_next_interval() -> None:
    stage = _Stage()
    ticks = WindowTicks("127.0.0.1:1", [stage], interval_ms=60_000)
    ticks.start()
    try:
        assert not stage.rounds.wait(0.3)  # the interval alone: no round for a minute
        ticks.poke()
        assert stage.rounds.wait(5)
    finally:
        ticks.stop(timeout=5)
