"""Replay (``flamepipe replay``): a new epoch re-reads the input; the output does not change.

Word pairs (a window-2 grouping, so order matters) run once; then the same input range is
replayed twice in new epochs (the second time with new input arriving meanwhile). The
output, read with read_committed and by the verifying consumer across all epochs, equals
the oracle of the whole input: the replays added nothing.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from framework.cli import main
from framework.config import Settings
from framework.coordination.epochs import Epochs
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.errors import ConfigError
from framework.kafka.admin import list_topics
from framework.operations.hygiene import epoch_topics
from framework.operations.replay import resolve_start, start_replay
from framework.runners.assembly import source_fronts
from framework.runners.snapshots import restorer
from integration_tests.harness.runs import (
    produce_lines,
    read_output,
    running,
    snapshot_past,
    verified_items,
)


def _word_pairs_run(prefix: str, seed: int) -> tuple[str, str, str, list[str]]:
    """A new app's name, its source and sink topics, and 300 numbered lines of text."""
    app = f"{prefix}{uuid.uuid4().hex[:6]}"
    texts = generate_lines(300, words_per_line=5, vocabulary=30, seed=seed)
    return app, f"{app}-lines", f"{app}-pairs", [f"{i} {text}" for i, text in enumerate(texts)]


def _pairs(items: list[Any]) -> Counter[Any]:
    return Counter(pair_key(item) for item in items)


def test_replaying_the_same_input_twice_adds_nothing(
    stack: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app, source, sink, lines = _word_pairs_run("replay", seed=3)
    pipeline = word_pairs(app, source, sink)
    graph = pipeline.graph()
    with running(settings, spark, pipeline) as run:
        until = produce_lines(bootstrap, source, lines[:200], partitions=2)
        run.wait_released(until, timeout_s=180)
    first = _pairs(read_output(bootstrap, sink))
    assert first == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)

    # Replay 1: everything from the first offsets, nothing new.
    record = start_replay(settings, graph, resolve_start(bootstrap, graph))
    assert record.epoch == 1
    with running(settings, spark, pipeline) as run:
        assert run.epoch == 1
        run.wait_released(until, timeout_s=180)
        replayed = run.barriers()[0].stats
    assert replayed.records_in > 0, "the new epoch should have re-read the input"
    assert _pairs(read_output(bootstrap, sink)) == first
    # Epoch 1's driver removed epoch 0's internal topics: nothing reads them again.
    existing = set(list_topics(bootstrap))
    assert epoch_topics(graph, 0) & existing == set()
    assert epoch_topics(graph, 1) <= existing
    assert {source, sink, f"{sink}.bundles", f"{app}.dlq"} <= existing

    # Replay 2, through the command line, with new input arriving during the replay.
    monkeypatch.setenv("FP_TEST_APP", app)
    monkeypatch.setenv("FP_TEST_SOURCE", source)
    monkeypatch.setenv("FP_TEST_SINK", sink)
    code = main(
        [
            "replay",
            "integration_tests.pipelines:word_pairs_job",
            "--from-start",
            "--no-run",
            *("--kafka-port", str(settings.kafka_port)),
            *("--zookeeper-port", str(settings.zookeeper_port)),
            *("--controller-port", str(settings.controller_port)),
            *("--state-dir", str(settings.state_dir)),
        ]
    )
    assert code == 0
    with running(settings, spark, pipeline) as run:
        assert run.epoch == 2
        until = produce_lines(bootstrap, source, lines[200:], partitions=2)
        run.wait_released(until, timeout_s=180)
    output = _pairs(read_output(bootstrap, sink))
    assert output == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)
    assert verified_items(bootstrap, sink) == output
    assert epoch_topics(graph, 1) & set(list_topics(bootstrap)) == set()


def test_replay_of_a_grouping_from_the_middle_needs_a_snapshot(stack: Settings) -> None:
    bootstrap = stack.kafka_bootstrap
    app = f"mid{uuid.uuid4().hex[:6]}"
    source = f"{app}-lines"
    graph = word_pairs(app, source, f"{app}-out").graph()
    source_fronts(bootstrap, graph)  # creates the source topic
    produce_lines(bootstrap, source, [f"{i} a b" for i in range(10)], partitions=2)
    offsets = resolve_start(bootstrap, graph, offsets={source: {0: 3}})
    assert offsets == {source: {0: 3, 1: 0}}
    with pytest.raises(ConfigError, match="needs a committed snapshot"):
        start_replay(stack, graph, offsets)
    epochs = Epochs(stack.zookeeper, app)
    try:
        assert epochs.current() is None  # nothing changed
    finally:
        epochs.close()


def test_replay_from_a_snapshot_restores_the_groupings(stack: Settings, spark: Any) -> None:
    """Replay from the input's end: the state comes from the committed snapshot, the input
    from its offsets; results that pair words across the replay point prove the state."""
    settings = stack.with_(parallelism=2, snapshot_interval_ms=200)
    bootstrap = settings.kafka_bootstrap
    app, source, sink, lines = _word_pairs_run("snap", seed=8)
    pipeline = word_pairs(app, source, sink)
    graph = pipeline.graph()
    with running(settings, spark, pipeline) as run:
        until = produce_lines(bootstrap, source, lines[:200], partitions=2)
        run.wait_released(until, timeout_s=180)
        snapshot = snapshot_past(settings, app, until, timeout_s=60)
    ends = resolve_start(bootstrap, graph, at_ms=time.time_ns() // 1_000_000 + 60_000)
    record = start_replay(settings, graph, ends, restore=restorer(settings, graph))
    assert record.snapshot is not None and record.snapshot >= snapshot.slot
    assert record.offsets is not None
    assert all(record.offsets[source][p] <= ends[source][p] for p in ends[source])
    with running(settings, spark, pipeline) as run:
        assert run.epoch == record.epoch
        until = produce_lines(bootstrap, source, lines[200:], partitions=2)
        run.wait_released(until, timeout_s=180)
    output = _pairs(read_output(bootstrap, sink))
    assert output == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)
    assert verified_items(bootstrap, sink) == output


def test_replaying_a_join_and_a_rolling_count_from_the_start_adds_nothing(
    stack: Settings, spark: Any
) -> None:
    """Rolling state (a temporal join's table, a running count) rebuilt by a replay in a
    new epoch gives the same output, so the barrier releases nothing new."""
    from connectors import KafkaSink, KafkaSource
    from framework.demos.orders import order_lines, priced_orders
    from framework.demos.wordcount import rolling_counts

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    tag = uuid.uuid4().hex[:6]
    for app, build, lines in (
        (
            f"rjoin{tag}",
            lambda a, s, k: priced_orders(a, KafkaSource(s, partitions=2), KafkaSink(k)),
            order_lines(400, items=10, seed=2),
        ),
        (f"rroll{tag}", rolling_counts, generate_lines(150, 5, 30, seed=6)),
    ):
        source, sink = f"{app}-in", f"{app}-out"
        pipeline = build(app, source, sink)
        with running(settings, spark, pipeline) as run:
            until = produce_lines(bootstrap, source, lines, partitions=2)
            run.wait_released(until, timeout_s=180)
        first = Counter(map(str, read_output(bootstrap, sink)))
        assert sum(first.values()) > 0
        start_replay(settings, pipeline.graph(), resolve_start(bootstrap, pipeline.graph()))
        with running(settings, spark, pipeline) as run:
            assert run.epoch == 1
            run.wait_released(until, timeout_s=180)
            assert run.barriers()[0].stats.records_in > 0, "the replay re-read the input"
        assert Counter(map(str, read_output(bootstrap, sink))) == first, app


def test_operators_restart_from_a_savepoint_with_their_state(stack: Settings, spark: Any) -> None:
    """Event-time windows, sessions, dedup and a windowed join restart in a new epoch from
    a savepoint taken between bursts, and the last burst comes after: the output equals the
    harness's on what Kafka stored, so each operator went on from its saved state (a dedup
    restored empty would pass every word again; a cut window would count differently)."""
    import json

    from connectors import KafkaSink, KafkaSource
    from framework.core.graph import Kind
    from framework.kafka.clients import read_to_end
    from framework.operations.savepoints import start_from_savepoint, take_savepoint
    from framework.runners.inprocess.endpoints import SourceRecord
    from framework.testing import InProcessRunner, ListSink, ListSource
    from integration_tests.harness.operators import operators

    settings = stack.with_(parallelism=2, snapshot_interval_ms=200)
    bootstrap = settings.kafka_bootstrap
    app = f"rops{uuid.uuid4().hex[:6]}"
    source, sink = f"{app}-in", f"{app}-out"
    pipeline = operators(app, KafkaSource(source, partitions=2, context=True), KafkaSink(sink))
    graph = pipeline.graph()
    lines = [f"{i} {line}" for i, line in enumerate(generate_lines(300, 5, 40, seed=9))]
    with running(settings, spark, pipeline) as run:
        first = produce_lines(bootstrap, source, lines[0::3], partitions=2)
        time.sleep(0.4)  # sessions end in the pauses; windows span batches
        until = produce_lines(bootstrap, source, lines[1::3], partitions=2)
        snapshot_past(settings, app, first)  # not one from before the input
        saved = take_savepoint(settings, graph, "mid", wait_s=60)
        run.wait_released(until + 1_000, timeout_s=180)
    record, upgrade = start_from_savepoint(settings, graph, "mid")
    keyed = {n.id for n in graph.nodes if n.kind in (Kind.GROUP, Kind.AGGREGATE)}
    assert set(upgrade.kept) == keyed and len(keyed) >= 4 and record.snapshot == saved.slot
    with running(settings, spark, pipeline) as run:
        assert run.epoch == record.epoch
        until = produce_lines(bootstrap, source, lines[2::3], partitions=2)
        run.wait_released(until + 1_000, timeout_s=180)
    output = Counter(json.dumps(item) for item in read_output(bootstrap, sink))
    stored = sorted(read_to_end(bootstrap, source), key=lambda m: (m.partition(), m.offset()))
    harness = ListSource.timed([], partitions=2, topic=source, context=True)
    harness.records = tuple(
        SourceRecord(m.partition(), m.offset(), m.timestamp()[1], (m.value() or b"").decode())
        for m in stored
    )
    expected = operators(app, harness, ListSink()).run(InProcessRunner()).values()
    assert output == Counter(json.dumps(item) for item in expected)
    kinds = Counter(json.loads(item)[0] for item in output)
    assert set(kinds) == {"event", "session", "first", "join"}, kinds
