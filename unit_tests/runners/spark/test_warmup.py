"""The warm-up task: what a Python worker imports before its first stage task."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pyarrow as pa
import pytest

from framework.runners.spark.warmup import ExecutorWarmup, WorkerWarmup, _warm, _warm_plain


def test_a_warmup_task_imports_the_stage_modules_and_the_given_ones() -> None:
    sys.modules.pop("colorsys", None)  # a small standard module nothing here imports

    batches = [pa.RecordBatch.from_pylist([{"id": 0}])]
    (out,) = list(_warm(("colorsys",), iter(batches)))

    assert "colorsys" in sys.modules
    assert "framework.runners.spark.tasks" in sys.modules
    row = out.to_pylist()[0]
    assert row["pid"] == os.getpid()
    assert row["seconds"] >= 0.0


def test_a_module_that_cannot_be_imported_fails_the_task() -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        list(_warm(("no_such_module_here",), iter([])))


def test_a_plain_warmup_task_imports_the_continuous_task_module() -> None:
    sys.modules.pop("colorsys", None)

    (row,) = list(_warm_plain(("colorsys",), iter([0])))

    assert "colorsys" in sys.modules
    assert "framework.runners.spark.continuous_tasks" in sys.modules
    assert row["pid"] == os.getpid() and row["seconds"] >= 0.0


class _Cluster:
    """What `ExecutorWarmup` sees of Spark: the executors, and the warm-up jobs it ran."""

    def __init__(self) -> None:
        self.executors: frozenset[str] = frozenset({"driver:1", "exec0:1"})
        self.jobs: list[int] = []
        self.free = 6
        self.busy = False  # whether the last warm-up job still runs
        self.cancelled: list[str] = []


def _warmer(monkeypatch: pytest.MonkeyPatch, cluster: _Cluster) -> ExecutorWarmup:
    from framework.runners.spark import warmup

    monkeypatch.setattr(warmup, "_EXECUTORS_POLL_S", 0.0)
    monkeypatch.setattr(warmup, "_executors", lambda _spark: cluster.executors)

    def start(self: WorkerWarmup) -> WorkerWarmup:
        cluster.jobs.append(self.slots)
        return self

    monkeypatch.setattr(WorkerWarmup, "start", start)
    monkeypatch.setattr(WorkerWarmup, "join", lambda _self, _timeout_s=0: not cluster.busy)
    context = SimpleNamespace(
        defaultParallelism=12,
        master="spark://m",
        cancelJobGroup=cluster.cancelled.append,
    )
    spark = SimpleNamespace(sparkContext=context)
    return ExecutorWarmup(spark, lambda: cluster.free)  # type: ignore[arg-type]


def test_executors_are_warmed_once_their_set_settles_with_a_task_per_free_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from framework.runners.spark import warmup

    cluster = _Cluster()
    warmer = _warmer(monkeypatch, cluster)
    monkeypatch.setattr(warmup, "_SETTLE_S", 3600.0)
    warmer._step()  # step 1: the first look
    warmer._step()
    assert cluster.jobs == [], "not before the executor set has settled"

    monkeypatch.setattr(warmup, "_SETTLE_S", 0.0)
    warmer._step()
    assert cluster.jobs == [6]
    warmer._step()
    assert cluster.jobs == [6], "warmed executors are not warmed again"

    cluster.executors |= {"exec1:1"}  # a lost executor's replacement registers
    cluster.free = 4
    warmer._step()  # the set changed: wait for it to settle
    assert cluster.jobs == [6]
    warmer._step()
    assert cluster.jobs == [6, 4] and warmer.runs == 2


def test_no_job_when_continuous_tasks_hold_every_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    from framework.runners.spark import warmup

    monkeypatch.setattr(warmup, "_SETTLE_S", 0.0)
    cluster = _Cluster()
    cluster.free = 0
    warmer = _warmer(monkeypatch, cluster)
    warmer._step()
    warmer._step()
    assert cluster.jobs == [] and warmer.warmed == cluster.executors


def test_an_executor_lost_during_a_warmup_cancels_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lost executor's tasks need the free slots the warm-up's tasks hold."""
    from framework.runners.spark import warmup

    monkeypatch.setattr(warmup, "_SETTLE_S", 0.0)
    cluster = _Cluster()
    warmer = _warmer(monkeypatch, cluster)
    warmer._step()
    warmer._step()
    assert cluster.jobs == [6]
    cluster.busy = True
    cluster.executors |= {"exec1:1"}
    warmer._step()
    warmer._step()
    assert cluster.jobs == [6], "one warm-up at a time"
    assert cluster.cancelled == []

    cluster.executors -= {"exec0:1"}  # lost while the warm-up runs
    warmer._step()
    assert len(cluster.cancelled) == 1 and warmer.cancelled == 1
    cluster.busy = False
    warmer._step()  # only the executor that waited for it is warmed now
    assert cluster.jobs == [6, 6] and warmer.warmed >= {"exec1:1"}
