"""Rescaling (``flamepipe rescale``) against the real stack: another parallelism in the same
epoch is refused; a new epoch moves the keyed state to the new hash units, on micro-batches
and on continuous stages.

Word pairs (a window-2 grouping: each word's item pairs with the word's previous one) run
with 2 units, then 3, then 1, with input between the steps. A key whose state stayed in a
unit that no longer receives it would pair its next word with nothing: the output, read
with read_committed and by the verifying consumer across every epoch, equals the oracle of
the whole input only if every key's state moved with it.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key, window_counts_oracle, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.errors import ConfigError
from framework.kafka.admin import (
    TopicSpec,
    ensure_topics,
    input_topic_spec,
    partition_count,
    partitions_if_exists,
)
from framework.kafka.clients import read_to_end
from framework.kafka.lifts import read_lifts
from framework.operations.rescale import keyed_nodes, start_rescale
from framework.wire.topics import Topics
from integration_tests.harness.counts import counts, released_windows, running_oracle
from integration_tests.harness.runs import (
    new_app,
    numbered_lines,
    produce_lines,
    read_output,
    running,
    snapshot_past,
    verified_items,
)
from integration_tests.harness.services import ServiceProcess, service_env


def test_rescaling_a_grouping_up_and_down_moves_its_state(stack: Settings, spark: Any) -> None:
    base = stack.with_(parallelism=2, snapshot_interval_ms=200)
    bootstrap = base.kafka_bootstrap
    app, source, sink = new_app("rescale", "pairs")
    lines = numbered_lines(360, seed=13, words_per_line=5, vocabulary=30)
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
    assert output == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)
    assert verified_items(bootstrap, sink) == output


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


def test_rescaling_continuous_stages_moves_both_kinds_of_state(
    stack: Settings, tmp_path: Path
) -> None:
    """`flamepipe run` on continuous stages with 2 hash units, then `flamepipe rescale` to 3
    and to 1, input between the steps: a grouping (word pairs, a changelog of items) and a
    rolling count (a changelog of buckets) go on where each word's state was."""
    app = f"crescale{uuid.uuid4().hex[:6]}"
    source, pairs, counts = f"{app}-lines", f"{app}-pairs", f"{app}-counts"
    bootstrap = stack.kafka_bootstrap
    ensure_topics(
        bootstrap, [input_topic_spec(source, 2), TopicSpec(pairs, 1), TopicSpec(counts, 1)]
    )
    lines = numbered_lines(240, seed=23, words_per_line=5, vocabulary=30)
    spec = "integration_tests.harness.state_jobs:from_env"
    names = {"FP_TEST_APP": app, "FP_TEST_SOURCE": source}
    words = 0
    for step, units in enumerate((2, 3, 1)):
        env = service_env(
            stack,
            names,
            FLAMEPIPE_EXECUTION="continuous",
            FLAMEPIPE_PARALLELISM=str(units),
            FLAMEPIPE_SNAPSHOT_INTERVAL_MS="200",
            FLAMEPIPE_STATE_DIR=str(tmp_path / "state"),
            FLAMEPIPE_SNAPSHOT_DIR=str(stack.snapshot_path),
        )
        args = ("--parallelism", str(units)) if step else ()
        command = "rescale" if step else "run"
        driver = ServiceProcess(command, spec, env, tmp_path / f"driver-{step}.log", *args)
        try:
            chunk = lines[step::3]
            until = produce_lines(bootstrap, source, chunk, partitions=2)
            words += sum(len(line.split()) - 1 for line in chunk)
            _wait_for(bootstrap, (counts, pairs), words, driver)
            if step < 2:
                snapshot_past(stack, app, until)
        finally:
            driver.stop()
        assert _newest_changelog(bootstrap, app) == (step, units), driver.tail()
    logs = "".join(p.read_text() for p in (tmp_path / "state" / "logs").glob("worker-*.log"))
    # A task's start names its stages, "a+b" when they share it: count the loops.
    started = re.finditer(r" (\S+)\[\d+\]: began [\d.-]+ s after its Python worker", logs)
    assert sum(m.group(1).count("+") + 1 for m in started) >= 3 * 4, "not on continuous stages"
    lifts = read_lifts(bootstrap, app).get(source, ())
    seen = Counter(pair_key(item) for item in read_output(bootstrap, pairs))
    assert seen == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS, lifts)
    assert verified_items(bootstrap, pairs) == seen
    totals: Counter[str] = Counter()
    for msg in read_to_end(bootstrap, source):
        totals.update((msg.value() or b"").decode().split()[1:])
    running_counts = Counter(tuple(item) for item in read_output(bootstrap, counts))
    assert running_counts == Counter((w, n) for w, t in totals.items() for n in range(1, t + 1))


def _newest_changelog(bootstrap: str, app: str) -> tuple[int, int]:
    """The newest epoch with a changelog of ``pairs``, and its partitions."""
    found = [
        (epoch, partitions_if_exists(bootstrap, Topics(app, epoch).state("pairs")))
        for epoch in range(6)
    ]
    return max((epoch, count) for epoch, count in found if count)


def _wait_for(bootstrap: str, topics: tuple[str, ...], words: int, driver: ServiceProcess) -> None:
    """Until each of ``topics`` holds ``words`` items (the driver must keep running)."""
    deadline = time.monotonic() + 180
    while any(len(read_output(bootstrap, topic)) < words for topic in topics):
        assert driver.proc.poll() is None, f"the driver stopped:\n{driver.tail()}"
        assert time.monotonic() < deadline, f"{words} words not out in time:\n{driver.tail()}"
        time.sleep(0.5)
