"""A source record that arrives after its partition was heartbeated past it is repaired.

The driver promises caught-up source partitions 3 s ahead of the broker's time
(``FLAMEPIPE_FAILPOINTS=fronts.ahead_ms=3000``): what a broker that exposes records that
long after stamping them (starved, or crashing between the two) makes of a correct
promise. Before, the first such record stopped the run with a ProtocolViolation. Now its
source task moves it up to the promised slot and commits the move with the batch, in
``<app>.lifts``: nothing is dropped, no run stops, and the output equals the oracle
computed from what Kafka stores (timestamps, offsets and the lifts). On ``local[2]`` and,
as the same task code, on the cluster tier's executors under kill -9 chaos
(`integration_tests/test_broker_crashes.py`).
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.wordcount import word_pairs
from framework.kafka.admin import ensure_topics, input_topic_spec
from framework.kafka.lifts import read_lifts
from framework.snapshots.offsets import replay_offsets
from framework.wire.lifts import Lift
from integration_tests.harness.runs import (
    BOTH_EXECUTIONS,
    new_app,
    numbered_lines,
    produce_lines,
    read_output,
    running,
)


# Continuous: the source tasks heartbeat their own fronts, and lift by them.
@BOTH_EXECUTIONS
def test_late_records_are_lifted_to_the_heartbeat_and_nothing_is_lost(
    stack: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch, execution: str, partitions: int
) -> None:
    monkeypatch.setenv("FLAMEPIPE_FAILPOINTS", "fronts.ahead_ms=3000")
    settings = stack.with_(parallelism=partitions, execution=execution)
    bootstrap = settings.kafka_bootstrap
    app, source, sink = new_app("lift", "pairs")
    lines = numbered_lines(120, seed=21, words_per_line=4, vocabulary=20)
    with running(settings, spark, word_pairs(app, source, sink, partitions)) as run:
        # Bursts after idle time: the partitions are caught up and promised 3 s ahead,
        # so the next burst arrives below the promise.
        for start in range(0, 120, 40):
            until = produce_lines(bootstrap, source, lines[start : start + 40], partitions)
            run.wait_released(until + 3_500, timeout_s=120)
        lifted = sum(q.stats.lifted for q in run.queries.values())
        dropped = sum(b.replays_dropped for b in run.barriers())
    lifts = read_lifts(bootstrap, app).get(source, ())
    assert lifted > 0 and lifts, "no record arrived below the promise: nothing was tested"
    assert dropped == 0
    output = Counter(pair_key(item) for item in read_output(bootstrap, sink))
    assert output == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS, lifts)


def test_a_snapshot_after_a_lift_replays_from_the_lifted_records(stack: Settings) -> None:
    """A lift moved records 3..5 of partition 0 up to a slot past the snapshot's, though
    their timestamps lie before it: the replay of partition 0 must start at offset 3."""
    bootstrap = stack.kafka_bootstrap
    topic = f"lifted-{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, [input_topic_spec(topic, 2)])
    until = produce_lines(bootstrap, topic, [f"{i} a b" for i in range(20)], partitions=2)
    slot = until // DEFAULT_DELTA_MS + 1  # after every record's timestamp
    plain = replay_offsets(bootstrap, {topic: 2}, slot, DEFAULT_DELTA_MS)
    assert plain == {topic: {0: 10, 1: 10}}  # the ends: nothing stamped that late
    lifts = {topic: (Lift(topic, 0, 3, 5, slot + 5), Lift(topic, 1, 2, 2, slot - 100))}
    moved = replay_offsets(bootstrap, {topic: 2}, slot, DEFAULT_DELTA_MS, lifts)
    assert moved == {topic: {0: 3, 1: 10}}  # a lift below the slot changes nothing
