"""A source stage and its keyed stage fused into one Spark query (``fuse_stages``), against
the real stack: docs/decisions/fused-stages.md."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key, window_counts_oracle, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import windowed_counts, word_pairs
from framework.errors import ConfigError
from framework.runners.spark.fused_query import FusedQuery
from framework.runners.spark.fused_tasks import spark_partition_keys
from integration_tests.harness.runs import numbered_lines, produce_lines, read_output, running


def _app(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def test_spark_sends_each_units_key_to_that_units_partition(spark: Any) -> None:
    for units in (2, 4, 5):
        keys = spark_partition_keys(units)
        frame = spark.createDataFrame([(u, k) for u, k in enumerate(keys)], "unit INT, pkey INT")
        placed = frame.repartition(units, "pkey").selectExpr("unit", "spark_partition_id() AS p")
        assert sorted((r["unit"], r["p"]) for r in placed.collect()) == [
            (u, u) for u in range(units)
        ]


def test_a_fused_windowed_count_equals_the_oracle_across_a_restart(
    stack: Settings, spark: Any
) -> None:
    settings = stack.with_(parallelism=2, fuse_stages=True, execution="micro-batch")
    bootstrap = settings.kafka_bootstrap
    app = _app("fwin")
    source, sink = f"{app}-lines", f"{app}-counts"
    window_ms = 200
    lines = generate_lines(600, words_per_line=6, vocabulary=40, seed=5)
    pipeline = windowed_counts(app, source, sink, window_ms=window_ms)
    for part in range(2):  # the second run resumes from the same checkpoints
        with running(settings, spark, pipeline) as run:
            assert [type(q) for q in run.queries.values()] == [FusedQuery]
            for burst in range(3):
                until = produce_lines(bootstrap, source, lines[part + 2 * burst :: 6], partitions=2)
                time.sleep(window_ms / 1000)
            run.wait_released(until + window_ms, timeout_s=120)
            ticks = run.ticks.sent if run.ticks is not None else 0
            stats = next(iter(run.stats.values()))
        assert ticks > 0 and stats.batches > 0
    items = read_output(bootstrap, sink)
    released = Counter({(word, start): n for word, start, n in items})
    assert len(items) == len(released), "a window was released twice"
    assert released == window_counts_oracle(bootstrap, source, window_ms)


def test_a_fused_grouping_keeps_the_order_of_every_key(stack: Settings, spark: Any) -> None:
    settings = stack.with_(parallelism=2, fuse_stages=True, execution="micro-batch")
    bootstrap = settings.kafka_bootstrap
    app = _app("fpairs")
    source, sink = f"{app}-lines", f"{app}-pairs"
    lines = numbered_lines(300, seed=7, words_per_line=5, vocabulary=30)
    with running(settings, spark, word_pairs(app, source, sink)) as run:
        until = produce_lines(bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
    items = read_output(bootstrap, sink)
    assert Counter(pair_key(item) for item in items) == word_pairs_oracle(
        bootstrap, source, DEFAULT_DELTA_MS
    )


def test_switching_a_running_pipeline_between_split_and_fused_is_refused(
    stack: Settings, spark: Any
) -> None:
    settings = stack.with_(parallelism=2, execution="micro-batch")  # fused: micro-batch only
    app = _app("fswitch")
    pipeline = windowed_counts(app, f"{app}-lines", f"{app}-counts", window_ms=200)
    with running(settings, spark, pipeline):
        pass
    fused = settings.with_(fuse_stages=True)
    with (
        pytest.raises(
            ConfigError, match=r"ran split in epoch .* now ask for fused: switch in a new epoch"
        ),
        running(fused, spark, pipeline),
    ):
        pass
