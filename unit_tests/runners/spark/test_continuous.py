"""The driver side of continuous stages, without Spark: slots and execution modes."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from framework.config import Settings
from framework.errors import ConfigError
from framework.runners.spark.continuous import (
    ContinuousQuery,
    cancelled_with_all_jobs,
    check_slots,
    local_master,
)
from framework.runners.spark.queries import StageStats, essence
from unit_tests.plan.test_task import programs, wordcount


def _spark(slots: int) -> object:
    return SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=slots))


def test_too_few_slots_name_the_count_and_the_settings() -> None:
    assert not check_slots(_spark(4), {"source": 2, "aggregate": 2})
    with pytest.raises(ConfigError, match=r"needs 5 Spark task slots \(source 2, aggregate 3\)"):
        check_slots(_spark(4), {"source": 2, "aggregate": 3})
    with pytest.raises(ConfigError, match=r"use local\[5\] .* FLAMEPIPE_EXECUTION=micro-batch"):
        check_slots(_spark(4), {"source": 2, "aggregate": 3})


def test_stages_share_tasks_when_asked_or_when_slots_are_too_few_for_their_own() -> None:
    needed = {"source": 2, "aggregate": 3}
    assert check_slots(_spark(3), needed, "shared")
    assert check_slots(_spark(8), needed, "shared")
    assert not check_slots(_spark(5), needed, "auto")
    assert check_slots(_spark(3), needed, "auto")
    with pytest.raises(ConfigError, match=r"needs 5 .* or 3 if they share tasks.*local\[3\]"):
        check_slots(_spark(2), needed, "auto")
    with pytest.raises(ConfigError, match=r"needs 3 Spark task slots .* use local\[3\]"):
        check_slots(_spark(2), needed, "shared")
    with pytest.raises(ConfigError, match=r"needs 5 Spark task slots"):
        check_slots(_spark(3), needed, "per-stage")


def test_the_execution_setting_is_checked() -> None:
    assert Settings().execution == "continuous"
    with pytest.raises(ConfigError, match="not an execution mode: use one of micro-batch"):
        Settings(execution="streaming")
    with pytest.raises(ConfigError, match="fuse_stages runs micro-batches only"):
        Settings(fuse_stages=True)  # continuous by default
    with pytest.raises(ConfigError, match="commit_interval_ms=-1 must be >= 0"):
        Settings(commit_interval_ms=-1)
    assert Settings().continuous_tasks == "auto"
    with pytest.raises(ConfigError, match="not a task layout: use one of auto, per-stage"):
        Settings(continuous_tasks="packed")


def test_only_local_star_in_continuous_execution_is_sized_by_the_pipeline() -> None:
    graph = object()  # never looked at: these masters are the user's
    micro = Settings(execution="micro-batch")
    assert local_master(micro, graph) == "local[*]"  # type: ignore[arg-type]
    for master in ("local[3]", "spark://127.0.0.1:7077"):
        settings = Settings(spark_master=master, execution="continuous")
        assert local_master(settings, graph) == master  # type: ignore[arg-type]


class _Registering:
    """A cluster's slot count: 2 until its executors register, ``cores`` after."""

    def __init__(self, cores: int, after_reads: int) -> None:
        self.cores, self.reads, self.after = cores, 0, after_reads

    @property
    def defaultParallelism(self) -> int:  # noqa: N802 - Spark's name
        self.reads += 1
        return self.cores if self.reads > self.after else 2


def test_a_cluster_gets_time_for_its_executors_to_register() -> None:
    context = _Registering(cores=8, after_reads=3)
    check_slots(SimpleNamespace(sparkContext=context), {"source": 2, "aggregate": 4}, wait_s=5)
    assert context.reads == 4
    with pytest.raises(ConfigError, match="needs 6 Spark task slots"):
        late = SimpleNamespace(sparkContext=_Registering(cores=8, after_reads=10**6))
        check_slots(late, {"source": 2, "aggregate": 4}, wait_s=0.3)


def test_auto_shares_once_a_cluster_has_enough_slots_for_it_and_no_more_come() -> None:
    context = _Registering(cores=3, after_reads=2)
    spark = SimpleNamespace(sparkContext=context)
    started = time.monotonic()
    assert check_slots(spark, {"source": 2, "aggregate": 3}, "auto", wait_s=60)
    assert time.monotonic() - started < 10  # not the whole minute


def test_counts_read_back_from_kafka_are_cached_until_a_recount(tmp_path: Path) -> None:
    spec = programs(wordcount())[0].spec
    query = ContinuousQuery(spec, "127.0.0.1:1", "cp", Settings(state_dir=tmp_path))
    reads: list[int] = []

    def counts() -> StageStats:
        reads.append(1)
        return StageStats(dead_letters=len(reads))

    query._committed_counts = counts  # type: ignore[method-assign]
    query.run_id = "running"
    assert query.stats.dead_letters == 1
    assert query.stats.dead_letters == 1  # within a second: the cached counts
    query.recount()  # after a release was waited for: what committed before it counts
    assert query.stats.dead_letters == 2


def test_a_cancellation_of_all_jobs_is_told_apart_from_a_task_failure() -> None:
    # What pyspark's Ctrl-C handler makes a running job raise (Spark 4), as py4j shows it.
    cancelled = Exception(
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
        ": org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 1 cancelled as part of "
        "cancellation of all jobs SQLSTATE: XXKDA\n\tat org.apache.spark.scheduler.DAGScheduler"
    )
    assert cancelled_with_all_jobs(essence(cancelled))
    failed = Exception(
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage "
        "3.0 failed 1 times, most recent failure: ... KafkaClientError: broker down"
    )
    assert not cancelled_with_all_jobs(essence(failed))
    group = Exception(
        ": org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 4 cancelled part of "
        "cancelled job group flamepipe-x SQLSTATE: XXKDA"
    )
    assert not cancelled_with_all_jobs(essence(group))  # the run's own stop: not this
