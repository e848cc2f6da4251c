"""A flamepipe Spark session warms its Python workers, and mapInArrow tasks (micro-batch
stages) or plain tasks (continuous stages) find them warm."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from framework.runners.spark.warmup import WorkerWarmup, warm_workers

_STAGE_MODULE = "framework.runners.spark.tasks"
_CONTINUOUS_MODULE = "framework.runners.spark.continuous_tasks"


def _warm_before(batches: Iterator[Any]) -> Iterator[Any]:
    """Whether this task's worker had the stage task's module before the task began."""
    import pyarrow as pa

    warm = _STAGE_MODULE in sys.modules
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"warm": warm}])


def test_a_session_has_one_warmup_until_it_is_stale(spark: Any) -> None:
    warmup = warm_workers(spark)  # the session's own, or a new one if that one is stale
    assert warmup.join(120.0)

    assert warm_workers(spark, ("json",)) is warmup  # not stale: the same one
    assert warmup.seconds is not None, "the warm-up job failed (see the log)"
    assert 1 <= len(warmup.pids) <= warmup.slots


def test_tasks_after_a_warmup_find_the_stage_modules_imported(spark: Any) -> None:
    # Spark stops a worker idle for a minute, so this test warms its own (the session's
    # warm-up ran when the test session began).
    warmup = WorkerWarmup(spark).start()
    assert warmup.join(120.0)
    assert warmup.seconds is not None, "the warm-up job failed (see the log)"

    slots = warmup.slots
    rows = spark.range(0, slots, 1, slots).mapInArrow(_warm_before, "warm BOOLEAN").collect()

    assert len(rows) == slots
    assert all(row["warm"] for row in rows), "a task started in a cold worker"


def _started_at(rows: Iterator[Any]) -> Iterator[float]:
    """When this plain task's Python worker process started (s since the epoch)."""
    for _ in rows:
        pass
    with open("/proc/self/stat") as own:
        ticks = int(own.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as stat:
        boot = next(int(line.split()[1]) for line in stat if line.startswith("btime"))
    yield boot + ticks / os.sysconf("SC_CLK_TCK")


def test_plain_tasks_after_a_plain_warmup_find_their_module_imported(spark: Any) -> None:
    # The kind of the warm-up matters: Spark keeps plain tasks' workers apart from the
    # mapInArrow ones, so each kind has a warm-up of its own in the session.
    warmup = warm_workers(spark, plain=True)
    assert warmup is not warm_workers(spark) and warmup is warm_workers(spark, plain=True)
    assert warmup.join(120.0)
    assert warmup.seconds is not None, "the plain warm-up job failed (see the log)"
    # One worker per task slot, but no more than the driver's machine has cores.
    slots = int(spark.sparkContext.defaultParallelism)
    assert warmup.slots == min(slots, os.cpu_count() or 1)
    assert 1 <= len(warmup.pids) <= warmup.slots

    fresh = WorkerWarmup(spark, plain=True).start()  # the session's may be a minute old
    assert fresh.join(120.0) and fresh.seconds is not None
    time.sleep(1.1)  # a worker forked from now on starts after this (1 s: /proc/stat's btime)
    submitted = time.time()
    sc = spark.sparkContext
    started = sc.parallelize(range(fresh.slots), fresh.slots).mapPartitions(_started_at)
    assert max(started.collect()) < submitted, "a plain task started in a new Python worker"
