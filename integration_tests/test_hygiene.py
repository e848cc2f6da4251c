"""Topic hygiene (issue: operability): the driver trims internal topics below what their
readers may still read, and a restart from the same checkpoints still finds everything it
needs; the output stays exactly once."""

from __future__ import annotations

import time
from typing import Any

import pytest

from framework.cli import main
from framework.config import Settings
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs, wordcount
from framework.kafka.admin import end_offsets, list_topics, offsets_at
from framework.operations.hygiene import epoch_topics
from framework.operations.replay import resolve_start, start_replay
from framework.runners.spark.runner import PipelineRun
from integration_tests.harness.runs import (
    assert_running_counts,
    new_app,
    produce_lines,
    read_output,
    running,
)


def _starts(bootstrap: str, topic: str) -> dict[int, int]:
    """The first offset each partition still holds."""
    return offsets_at(bootstrap, topic, None)


def _internal(run: PipelineRun) -> list[str]:
    shuffles = [q.spec.stage.topic for q in run.queries.values() if not q.spec.stage.is_source]
    return [run.topics.acks, *shuffles, *(run.topics.pre(b.sink_node) for b in run.barriers())]


def test_the_janitor_trims_and_a_restart_still_finds_what_it_needs(
    stack: Settings, spark: Any
) -> None:
    settings = stack.with_(parallelism=2, trim_interval_ms=1000)
    bootstrap = settings.kafka_bootstrap
    app, source, sink = new_app("trim", "counts")
    lines = generate_lines(900, words_per_line=5, vocabulary=50, seed=21)
    with running(settings, spark, wordcount(app, source, sink)) as run:
        for chunk in (lines[:200], lines[200:400], lines[400:600]):
            until = produce_lines(bootstrap, source, chunk, partitions=2)
            run.wait_released(until, timeout_s=120)
        topics = _internal(run)
        janitor = run.janitor
        assert janitor is not None
        deadline = time.monotonic() + 60
        while not all(any(_starts(bootstrap, t).values()) for t in topics):
            assert time.monotonic() < deadline, {t: _starts(bootstrap, t) for t in topics}
            time.sleep(0.5)
        assert janitor.trimmed > 0 and janitor.error is None
        for topic in topics:  # trimmed, never past what was written
            ends = end_offsets(bootstrap, topic)
            assert all(_starts(bootstrap, topic)[p] <= ends[p] for p in ends)
    # A driver restart resumes each reader where it may read again: the Spark checkpoints,
    # the acker's checkpoints and the barrier's P_rel are all at or after the trimmed starts.
    with running(settings, spark, wordcount(app, source, sink)) as run:
        until = produce_lines(bootstrap, source, lines[600:], partitions=2)
        run.wait_released(until, timeout_s=180)
    assert_running_counts(read_output(bootstrap, sink), lines)


def test_flamepipe_gc_removes_the_internal_topics_of_earlier_epochs(
    stack: Settings,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app, source, sink = new_app("gc", "pairs")
    pipeline = word_pairs(app, source, sink)
    graph = pipeline.graph()
    with running(settings, spark, pipeline) as run:
        until = produce_lines(bootstrap, source, generate_lines(50, seed=2), partitions=2)
        run.wait_released(until, timeout_s=120)
    old = epoch_topics(graph, 0)
    assert old <= set(list_topics(bootstrap))
    start_replay(settings, graph, resolve_start(bootstrap, graph))  # epoch 1, no driver yet
    for name, value in (("FP_TEST_APP", app), ("FP_TEST_SOURCE", source), ("FP_TEST_SINK", sink)):
        monkeypatch.setenv(name, value)
    flags = [
        *("--kafka-port", str(settings.kafka_port)),
        *("--zookeeper-port", str(settings.zookeeper_port)),
        *("--controller-port", str(settings.controller_port)),
        *("--state-dir", str(settings.state_dir)),
    ]
    spec = "integration_tests.pipelines:word_pairs_job"
    assert main(["gc", spec, "--dry-run", *flags]) == 0
    printed = capsys.readouterr().out
    assert all(f"would delete topic {name}" in printed for name in old)
    assert old <= set(list_topics(bootstrap))  # a dry run changes nothing
    assert main(["gc", spec, *flags]) == 0
    existing = set(list_topics(bootstrap))
    assert old & existing == set()
    assert {source, sink, f"{sink}.bundles", f"{app}.dlq"} <= existing  # never the user's
