"""A flamepipe Spark session warms a Python worker per task slot, and stage tasks run in them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from framework.runners.spark.warmup import warm_workers


def _pid(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"pid": os.getpid()}])


def test_the_session_warms_the_workers_that_mapinarrow_tasks_then_use(spark: Any) -> None:
    warmup = warm_workers(spark)  # the session's own, started by spark_session

    assert warm_workers(spark, ("json",)) is warmup  # once per context
    assert warmup.join(120.0)
    assert warmup.seconds is not None, "the warm-up job failed (see the log)"
    # One worker per task slot when the tasks overlap (they import for ~0.5 s each).
    assert 1 <= len(warmup.pids) <= warmup.slots

    slots = warmup.slots
    rows = spark.range(0, slots, 1, slots).mapInArrow(_pid, "pid LONG").collect()
    used = {row["pid"] for row in rows}
    assert used <= warmup.pids, f"tasks ran in new workers {used - warmup.pids}"
