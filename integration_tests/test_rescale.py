"""Rescaling (``flamepipe rescale``) against the real stack: another parallelism in the same
epoch is refused; a new epoch moves the keyed state to the new hash units.

Word pairs (a window-2 grouping: each word's item pairs with the word's previous one) run
with 2 units, then 3, then 1, with input between the steps. A key whose state stayed in a
unit that no longer receives it would pair its next word with nothing: the output, read
with read_committed and by the verifying consumer across every epoch, equals the oracle of
the whole input only if every key's state moved with it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from connectors import BundleConsumer
from framework.config import Settings
from framework.demos.oracle import pair_key, window_counts_oracle, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.errors import ConfigError
from framework.kafka.admin import partition_count
from framework.runners.rescale import keyed_nodes, start_rescale
from framework.wire.topics import Topics
from integration_tests.harness.counts import counts, released_windows, running_oracle
from integration_tests.harness.runs import produce_lines, read_output, running, snapshot_past


def _verified_pairs(bootstrap: str, topic: str) -> Counter[Any]:
    seen: Counter[Any] = Counter()
    with BundleConsumer(bootstrap, topic, f"verify-{uuid.uuid4().hex}") as consumer:
        for bundle in consumer.bundles(idle_s=5):
            seen.update(pair_key(item.value) for item in bundle.items)
    return seen


def test_rescaling_a_grouping_up_and_down_moves_its_state(stack: Settings, spark: Any) -> None:
    base = stack.with_(parallelism=2, snapshot_interval_ms=200)
    bootstrap = base.kafka_bootstrap
    app = f"rescale{uuid.uuid4().hex[:6]}"
    source, sink = f"{app}-lines", f"{app}-pairs"
    texts = generate_lines(360, words_per_line=5, vocabulary=30, seed=13)
    lines = [f"{i} {text}" for i, text in enumerate(texts)]
    pipeline = word_pairs(app, source, sink)
    graph = pipeline.graph()
    epochs = []
    for step, units in enumerate((2, 3, 1)):
        settings = base.with_(parallelism=units)
        if step:
            refused = r"runs with parallelism \d+ in epoch .* flamepipe rescale"
            with pytest.raises(ConfigError, match=refused), running(settings, spark, pipeline):
                pass
            record = start_rescale(settings, graph)
            assert record.snapshot is not None and record.reason.startswith("rescale")
            epochs.append(record.epoch)
        with running(settings, spark, pipeline) as run:
            until = produce_lines(bootstrap, source, lines[step::3], partitions=2)
            run.wait_released(until, timeout_s=180)
            changelog = Topics(app, run.epoch).state(keyed_nodes(graph)[0])
            assert partition_count(bootstrap, changelog) == units
            if step < 2:
                snapshot_past(settings, app, until)
    assert len(set(epochs)) == 2
    output = Counter(pair_key(item) for item in read_output(bootstrap, sink))
    assert output == word_pairs_oracle(bootstrap, source, base.delta_ms)
    assert _verified_pairs(bootstrap, sink) == output


def test_rescaling_aggregates_moves_their_state(stack: Settings, spark: Any) -> None:
    """A running count (a rolling fold) and counts per window, 2 units then 3: every
    count after the rescale goes on from the count its word had, wherever its unit went."""
    settings = stack.with_(parallelism=2, snapshot_interval_ms=200)
    bootstrap = settings.kafka_bootstrap
    app = f"rescaleagg{uuid.uuid4().hex[:6]}"
    source, running_sink, windows = f"{app}-lines", f"{app}-running", f"{app}-windows"
    lines = generate_lines(300, words_per_line=5, vocabulary=30, seed=17)
    pipeline = counts(app, source, running_sink, windows)
    graph = pipeline.graph()
    with running(settings, spark, pipeline) as run:
        until = produce_lines(bootstrap, source, lines[:150], partitions=2)
        run.wait_released(until + 200, timeout_s=180)
        snapshot_past(settings, app, until + 200)
    wider = settings.with_(parallelism=3)
    record = start_rescale(wider, graph)
    assert record.snapshot is not None
    with running(wider, spark, pipeline) as run:
        assert run.epoch == record.epoch
        until = produce_lines(bootstrap, source, lines[150:], partitions=2)
        run.wait_released(until + 200, timeout_s=180)
        assert partition_count(bootstrap, Topics(app, run.epoch).state("running")) == 3
    updates = [tuple(item) for item in read_output(bootstrap, running_sink)]
    assert Counter(updates) == running_oracle(bootstrap, source)
    assert released_windows(read_output(bootstrap, windows)) == window_counts_oracle(
        bootstrap, source, 200
    )
