"""Continuous stages (``execution=continuous``): long-running Spark tasks, against the real
stack (`framework.runners.spark.continuous`)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from connectors import KafkaSink, KafkaSource
from framework import Pipeline
from framework.config import Settings
from framework.demos.oracle import window_counts_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import windowed_counts
from framework.errors import ConfigError
from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec
from integration_tests.harness.driver_main import WINDOW_MS
from integration_tests.harness.runs import produce_lines, read_output, running
from integration_tests.test_driver_crash import _killed_twice, _output_until


def _app(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def test_a_continuous_windowed_count_killed_twice_equals_the_oracle(
    stack: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver (with its Spark JVM and the long-running tasks' Python workers) killed
    with kill -9 twice mid-run; every window's count once, as the oracle counts it."""
    monkeypatch.setenv("FLAMEPIPE_EXECUTION", "continuous")
    app = _app("ccrash")
    source, sink = f"{app}-in", f"{app}-out"
    lines = generate_lines(3000, words_per_line=6, vocabulary=80, seed=4)
    bootstrap = stack.kafka_bootstrap
    with _killed_twice(
        stack, tmp_path, app, source, sink, kind="windowed",
        bursts=lambda n: {source: lines[n::3]}, apps=[app],
    ):  # fmt: skip
        expected = window_counts_oracle(bootstrap, source, WINDOW_MS)
        items = _output_until(bootstrap, sink, len(expected))
    released = Counter({(word, start): n for word, start, n in items})
    assert len(items) == len(released), "a window was released twice"
    assert released == expected


def test_too_few_task_slots_fail_before_anything_starts(stack: Settings, spark: Any) -> None:
    """Two source partitions and two hash units need four slots; the shared session has
    ``local[*]`` on this machine's cores."""
    slots = int(spark.sparkContext.defaultParallelism)
    settings = stack.with_(parallelism=slots, execution="continuous")
    app = _app("cslots")
    source, sink = f"{app}-in", f"{app}-out"
    ensure_topics(stack.kafka_bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    pipeline = windowed_counts(app, source, sink, window_ms=200)
    with (
        pytest.raises(ConfigError, match=rf"needs {slots + 2} Spark task slots .* local\["),
        running(settings, spark, pipeline),
    ):
        pass


def test_a_continuous_word_count_in_the_shared_session_and_a_switch_refused(
    stack: Settings, spark: Any
) -> None:
    """A stateless pipeline of one source partition runs continuous beside the suite's
    session; the same pipeline cannot go back to micro-batches in the same epoch."""
    settings = stack.with_(parallelism=1, execution="continuous")
    app = _app("cword")
    source, sink = f"{app}-in", f"{app}-out"
    lines = generate_lines(400, words_per_line=5, vocabulary=30, seed=2)
    pipeline = Pipeline(app)
    pipeline.source(KafkaSource(source, partitions=1)).flat_map(str.split).sink(KafkaSink(sink))
    with running(settings, spark, pipeline) as run:
        until = produce_lines(stack.kafka_bootstrap, source, lines, partitions=1)
        run.wait_released(until, timeout_s=120)
    items = read_output(stack.kafka_bootstrap, sink)
    assert sorted(map(str, items)) == sorted(w for line in lines for w in line.split())
    with (
        pytest.raises(ConfigError, match=r"ran continuous in epoch .* switch in a new epoch"),
        running(stack.with_(parallelism=1), spark, pipeline),
    ):
        pass
