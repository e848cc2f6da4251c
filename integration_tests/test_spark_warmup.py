"""A flamepipe Spark session warms its Python workers, and mapInArrow tasks find them warm."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from framework.runners.spark.warmup import WorkerWarmup, warm_workers

_STAGE_MODULE = "framework.runners.spark.tasks"


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
