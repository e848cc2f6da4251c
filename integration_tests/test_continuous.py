"""Continuous stages (``execution=continuous``): long-running Spark tasks, against the real
stack (`framework.runners.spark.continuous`)."""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from connectors import BundleConsumer, KafkaSink, KafkaSource
from framework import Pipeline
from framework.config import Settings
from framework.demos.oracle import window_counts_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import windowed_counts
from framework.errors import ConfigError
from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec
from framework.kafka.clients import read_to_end
from framework.operations.replay import resolve_start, start_replay
from framework.runners.spark.continuous import local_master, tasks_needed
from framework.wire.dead_letters import read_dead_letter
from framework.wire.topics import Topics
from integration_tests.harness.driver_main import WINDOW_MS, stateful_names
from integration_tests.harness.runs import open_transaction, produce_lines, read_output, running
from integration_tests.test_driver_crash import (
    _assert_event_time,
    _assert_priced,
    _bursts_of_orders_and_readings,
    _event_time_harness,
    _killed_twice,
    _output_until,
)


def _app(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


@pytest.mark.parametrize("layout", ["per-stage", "shared"])
def test_a_continuous_windowed_count_killed_twice_equals_the_oracle(
    stack: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """The driver (with its Spark JVM and the long-running tasks' Python workers) killed
    with kill -9 twice mid-run; every window's count once, as the oracle counts it. With
    tasks of their own per stage, and with both stages taking turns in each task."""
    monkeypatch.setenv("FLAMEPIPE_EXECUTION", "continuous")
    monkeypatch.setenv("FLAMEPIPE_CONTINUOUS_TASKS", layout)
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
    # Each task names the stages it runs in its worker's log: "a+b" when they share it.
    logs = "".join(p.read_text() for p in (tmp_path / "logs").glob("worker-*.log"))
    tasks = {m.group(1) for m in re.finditer(rf"{app} (\S+)\[\d\]: began", logs)}
    assert tasks, "no task's start in the workers' logs"
    assert all(("+" in t) == (layout == "shared") for t in tasks), tasks


def test_a_continuous_join_and_event_time_windows_killed_twice_lose_and_repeat_nothing(
    stack: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table join (each order priced as of the order) and event-time windows over
    producer-stamped readings, some ingested too late, in one continuous driver killed with
    kill -9 twice mid-run: every order priced once, every window once and every late
    reading one dead letter, as the in-process harness computes them from what Kafka
    stored."""
    monkeypatch.setenv("FLAMEPIPE_EXECUTION", "continuous")
    app = _app("cjoin")
    source, sink = f"{app}-in", f"{app}-out"
    named = stateful_names(app, source, sink)
    (j_app, j_in, j_out), (e_app, e_in, e_out) = named["joined"], named["eventtime"]
    bootstrap = stack.kafka_bootstrap
    orders, burst = _bursts_of_orders_and_readings(j_in, e_in)
    with _killed_twice(
        stack, tmp_path, app, source, sink, kind="joined,eventtime", bursts=burst,
        apps=[j_app, e_app],
    ):  # fmt: skip
        priced = _output_until(bootstrap, j_out, sum(1 for o in orders if o.startswith("order")))
        harness = _event_time_harness(bootstrap, e_app, e_in)
        sums = _output_until(bootstrap, e_out, len(harness.values()))
        dead = [read_dead_letter(m) for m in read_to_end(bootstrap, Topics(e_app).dlq)]
    _assert_priced(bootstrap, j_app, j_in, priced)
    _assert_event_time(harness, sums, dead)


def test_too_few_task_slots_fail_before_anything_starts(
    stack: Settings, spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Two source partitions and as many hash units as the shared session has slots need
    two slots more than it has. Nothing is shipped to the executors (shipping
    logs every time it runs) and so no service started either (they start after it)."""
    caplog.set_level(logging.INFO, logger="framework.runners.spark.shipping")
    slots = int(spark.sparkContext.defaultParallelism)
    settings = stack.with_(parallelism=slots, execution="continuous", continuous_tasks="per-stage")
    app = _app("cslots")
    source, sink = f"{app}-in", f"{app}-out"
    ensure_topics(stack.kafka_bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    pipeline = windowed_counts(app, source, sink, window_ms=200)
    with (
        pytest.raises(ConfigError, match=rf"needs {slots + 2} Spark task slots .* local\["),
        running(settings, spark, pipeline),
    ):
        pass
    assert not [r for r in caplog.records if r.name == "framework.runners.spark.shipping"]
    # Shared, the widest stage needs a slot per task: one hash unit more than slots.
    wide = _app("cwide")
    ensure_topics(stack.kafka_bootstrap, [input_topic_spec(f"{wide}-in", 2)])
    auto = settings.with_(parallelism=slots + 1, continuous_tasks="auto")
    with (
        pytest.raises(ConfigError, match=rf"or {slots + 1} if they share tasks"),
        running(auto, spark, windowed_counts(wide, f"{wide}-in", sink, window_ms=200)),
    ):
        pass


def test_local_star_gets_a_slot_per_long_lived_task(stack: Settings) -> None:
    """Three source partitions and two hash units: five tasks, so ``local[*]`` becomes
    ``local[5]`` on a machine of fewer cores (the source topic is read, not guessed); with
    stages sharing tasks (``auto`` on fewer cores than tasks), one per task of the widest
    stage: three."""
    app = _app("clocal")
    source, sink = f"{app}-in", f"{app}-out"
    ensure_topics(stack.kafka_bootstrap, [input_topic_spec(source, 3), TopicSpec(sink, 1)])
    graph = windowed_counts(app, source, sink, window_ms=200).graph()
    own = stack.with_(
        parallelism=2, execution="continuous", spark_master="local[*]",
        continuous_tasks="per-stage",
    )  # fmt: skip
    assert tasks_needed(graph, own) == 5
    cores = os.cpu_count() or 1
    assert local_master(own, graph) == f"local[{max(cores, 5)}]"
    auto = own.with_(continuous_tasks="auto")
    assert local_master(auto, graph) == f"local[{max(cores, 3) if cores < 5 else cores}]"
    assert tasks_needed(graph, own.with_(continuous_tasks="shared")) == 3


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
    words = sorted(w for line in lines for w in line.split())
    with running(settings, spark, pipeline) as run:
        until = produce_lines(stack.kafka_bootstrap, source, lines, partitions=1)
        run.wait_released(until, timeout_s=120)
        time.sleep(1.1)  # the driver reads the tasks' counts once a second
        (stats,) = run.stats.values()
    items = read_output(stack.kafka_bootstrap, sink)
    assert sorted(map(str, items)) == words
    # Counted from what the task committed with its positions.
    assert (stats.records_in, stats.items_in, stats.items_out) == (
        len(lines),
        len(lines),
        len(words),
    )
    assert stats.dead_letters == 0
    assert 1 <= stats.batches <= len(lines), "a batch is a commit, of one record or more"
    with (
        pytest.raises(ConfigError, match=r"ran continuous in epoch .* switch in a new epoch"),
        running(stack.with_(parallelism=1, execution="micro-batch"), spark, pipeline),
    ):
        pass


def test_a_restart_with_no_new_input_still_closes_the_last_window(
    stack: Settings, spark: Any
) -> None:
    """Stopped before its last window closed, a continuous windowed count restarted with no
    new input emits that window: the restarted source task knows it read its partition
    to the end, so its front heartbeats past the window by the clock alone."""
    settings = stack.with_(parallelism=1, execution="continuous")
    app = _app("cidle")
    source, sink = f"{app}-in", f"{app}-out"
    window_ms = 10_000
    lines = generate_lines(200, words_per_line=5, vocabulary=20, seed=8)
    pipeline = windowed_counts(app, source, sink, window_ms=window_ms, partitions=1)
    with running(settings, spark, pipeline) as run:
        until = produce_lines(stack.kafka_bootstrap, source, lines, partitions=1)
        deadline = time.monotonic() + 30
        reading = next(q for q in run.queries.values() if q.spec.stage.is_source)
        while reading.stats.records_in < len(lines):  # all of it committed
            assert time.monotonic() < deadline, "the input was not committed in time"
            time.sleep(0.2)
    with running(settings, spark, pipeline) as run:
        run.wait_released(until + window_ms, timeout_s=60)
    items = read_output(stack.kafka_bootstrap, sink)
    released = Counter({(word, start): n for word, start, n in items})
    assert len(items) == len(released), "a window was released twice"
    assert released == window_counts_oracle(stack.kafka_bootstrap, source, window_ms)


def test_a_transactional_writers_last_records_close_their_window(
    stack: Settings, spark: Any
) -> None:
    """Input written in a Kafka transaction ends with its commit marker, one offset past
    the last record: the source task reads up to its consumer's position, past the
    marker, so its front heartbeats as read to the end and the last window closes with no
    further input (it waited forever when the task counted offsets by records)."""
    settings = stack.with_(parallelism=1, execution="continuous")
    bootstrap = stack.kafka_bootstrap
    app = _app("ctxn")
    source, sink = f"{app}-in", f"{app}-out"
    window_ms = 200
    lines = generate_lines(120, words_per_line=5, vocabulary=20, seed=9)
    pipeline = windowed_counts(app, source, sink, window_ms=window_ms, partitions=1)
    with running(settings, spark, pipeline) as run:
        open_transaction(bootstrap, f"{app}-w", source, lines).commit_transaction(30)
        until = time.time_ns() // 1_000_000
        run.wait_released(until + window_ms, timeout_s=60)
    items = read_output(bootstrap, sink)
    released = Counter({(word, start): n for word, start, n in items})
    assert len(items) == len(released), "a window was released twice"
    assert released == window_counts_oracle(bootstrap, source, window_ms)


def test_a_continuous_replay_from_the_start_adds_nothing(stack: Settings, spark: Any) -> None:
    """A windowed count runs continuous, then a new epoch replays its input from the
    first offsets while new input arrives: every window once, as the oracle counts the
    whole input, and the verifying consumer accepts every bundle across the epochs."""
    settings = stack.with_(parallelism=1, execution="continuous")
    bootstrap = stack.kafka_bootstrap
    app = _app("creplay")
    source, sink = f"{app}-in", f"{app}-out"
    window_ms = 500
    lines = generate_lines(600, words_per_line=5, vocabulary=25, seed=6)
    pipeline = windowed_counts(app, source, sink, window_ms=window_ms, partitions=1)
    graph = pipeline.graph()
    with running(settings, spark, pipeline) as run:
        until = produce_lines(bootstrap, source, lines[:300], partitions=1)
        run.wait_released(until + window_ms, timeout_s=120)
    first = _windows(read_output(bootstrap, sink))
    assert first == window_counts_oracle(bootstrap, source, window_ms)

    record = start_replay(settings, graph, resolve_start(bootstrap, graph))
    assert record.epoch == 1
    with running(settings, spark, pipeline) as run:
        assert run.epoch == 1
        until = produce_lines(bootstrap, source, lines[300:], partitions=1)
        run.wait_released(until + window_ms, timeout_s=120)
        replayed = run.barriers()[0].stats
    assert replayed.records_in > 0, "the new epoch should have re-read the input"
    expected = window_counts_oracle(bootstrap, source, window_ms)
    assert _windows(read_output(bootstrap, sink)) == expected
    verified: Counter[tuple[str, int]] = Counter()
    with BundleConsumer(bootstrap, sink, f"verify-{app}") as consumer:
        for bundle in consumer.bundles(to_end=True):
            verified.update(
                {(word, start): n for word, start, n in (item.value for item in bundle.items)}
            )
    assert verified == expected


def _windows(items: list[Any]) -> Counter[tuple[str, int]]:
    released = Counter({(word, start): n for word, start, n in items})
    assert len(items) == len(released), "a window was released twice"
    return released
