"""Recovery from a lost ack: min time stalls, a new epoch starts from the last snapshot.

An ack that no item will ever cancel (what a lost ack looks like to the acker: a slot
whose XOR never returns to zero) is written into the acks topic. Min time stops there;
after ``stall_timeout_ms`` the stall watch starts epoch 1 from the committed snapshot,
the runner follows it, and the output completes: equal to the oracle, nothing twice.
The pipeline has a grouping (word pairs) and a windowed aggregate (counts per 200 ms
window), both restored from the snapshot.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from framework.config import Settings
from framework.coordination.epochs import Epochs
from framework.core.time import DEFAULT_DELTA_MS, GlobalTime
from framework.demos.oracle import pair_key, window_counts_oracle, word_pairs_oracle
from framework.demos.text import generate_lines
from integration_tests.harness.counts import pairs_and_windows, released_windows
from integration_tests.harness.runs import (
    driving,
    lose_an_ack,
    produce_lines,
    read_output,
    wait_items,
)


def test_a_lost_ack_stalls_min_time_and_recovery_completes_the_output(
    stack: Settings, spark: Any
) -> None:
    settings = stack.with_(parallelism=2, stall_timeout_ms=15_000, snapshot_interval_ms=300)
    bootstrap = settings.kafka_bootstrap
    app = f"stall{uuid.uuid4().hex[:6]}"
    source, sink, windows = f"{app}-lines", f"{app}-pairs", f"{app}-windows"
    texts = generate_lines(300, words_per_line=5, vocabulary=30, seed=9)
    lines = [f"{i} {text}" for i, text in enumerate(texts)]
    pipeline = pairs_and_windows(app, source, sink, windows)
    graph = pipeline.graph()
    with driving(settings, spark, graph) as failures:
        produce_lines(bootstrap, source, lines[:150], partitions=2)
        wait_items(bootstrap, sink, sum(len(t.split()) for t in texts[:150]), 180, failures)
        now_ms = time.time_ns() // 1_000_000
        now_slot = GlobalTime.of_record(now_ms, "", 0, 0, DEFAULT_DELTA_MS).slot
        segment = graph.segments().of_node["group"]
        # Half a second ahead: min time cannot have passed it yet, and the next round
        # takes longer than that to produce, so its later lines cannot be released
        # without a recovery.
        lose_an_ack(bootstrap, app, segment, now_slot + 50, settings.acker_shards)
        for start in range(150, 300, 30):
            produce_lines(bootstrap, source, lines[start : start + 30], partitions=2)
            time.sleep(0.3)
        wait_items(bootstrap, sink, sum(len(t.split()) for t in texts), 240, failures)
        tokens = sum(len(line.split()) for line in lines)
        deadline = time.monotonic() + 120
        while sum(n for *_, n in read_output(bootstrap, windows)) < tokens:
            assert not failures, failures
            assert time.monotonic() < deadline, "windows not all released"
            time.sleep(0.5)
        assert not failures, failures
    epochs = Epochs(settings.zookeeper, app)
    try:
        record = epochs.current()
    finally:
        epochs.close()
    # One recovery; a micro-batch slower than the timeout on a loaded machine may add one.
    assert record is not None and record.epoch >= 1
    assert record.reason.startswith("recovery")
    output = Counter(pair_key(item) for item in read_output(bootstrap, sink))
    assert output == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)
    counted = released_windows(read_output(bootstrap, windows))
    assert counted == window_counts_oracle(bootstrap, source, 200)
