"""Hostile records on a running pipeline's topics: nothing runs, time does not move.

Anyone who can write to a pipeline's internal topics but lacks its key (docs/security.md)
appends, while the running word count runs on Spark: a pickle whose loading would run a
shell command, as a shuffle frame, a pre-barrier frame and a changelog record; and a
heartbeat of a real front ~116 days ahead on every acker shard. No command may run, min
time must not jump, the output must equal the oracle of the real input, and each attempt
must be reported (counted and logged; the stage's frame as a dead letter).
"""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from framework.config import Settings
from framework.core.messages import Heartbeat
from framework.core.time import front_id, slot_of
from framework.demos.text import generate_lines
from framework.demos.wordcount import wordcount
from framework.wire import auth
from framework.wire.acks import shard_batches
from framework.wire.dead_letters import read_dead_letter
from framework.wire.frames import FRAME_HEADERS
from framework.wire.topics import Topics
from integration_tests.harness.runs import (
    assert_running_counts,
    new_app,
    produce_lines,
    read_output,
    running,
)

MARKER = Path("/tmp/flamepipe-pwned-through-kafka")


class _RunsACommand:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {MARKER}",))


def _inject(settings: Settings, app: str, source: str, group_topic: str, pre: str) -> int:
    """Append the forged records; returns the forged heartbeat's slot."""
    topics = Topics(app)
    evil_frame = pickle.dumps((True, [_RunsACommand()]), protocol=5)
    evil_bucket = pickle.dumps(("the", _RunsACommand()), protocol=5)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for topic in (group_topic, pre):
        producer.produce(topic, value=evil_frame, partition=0, headers=list(FRAME_HEADERS))
    producer.produce(topics.state("group"), key=b"the", value=evil_bucket, partition=0)
    far = slot_of(time.time_ns() // 1_000_000 + 10**10, 10)  # ~116 days ahead
    beat = Heartbeat(front_id(source, 0), far)
    for shard, value in shard_batches(424242, 1, (), settings.acker_shards, [beat]):
        producer.produce(topics.acks, value=value, partition=shard)
    assert producer.flush(10) == 0
    return far


def test_forged_records_run_nothing_move_no_time_and_lose_nothing(
    stack: Settings, spark: Any
) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app, source, sink = new_app("trust", "counts")
    lines = generate_lines(600, words_per_line=6, vocabulary=50, seed=8)
    MARKER.unlink(missing_ok=True)
    refused_before = dict(auth.refused)
    with running(settings, spark, wordcount(app, source, sink)) as run:
        until = produce_lines(bootstrap, source, lines[:300], partitions=2)
        run.wait_released(until, timeout_s=120)
        group_topic = next(q.topic for s, q in run.queries.items() if s.endswith("group"))
        pre = next(iter(run.services.barriers)).pre
        far = _inject(settings, app, source, group_topic, pre)
        until = produce_lines(bootstrap, source, lines[300:], partitions=2)
        run.wait_released(until, timeout_s=120)
        assert run.services.view is not None
        min_time = run.services.view.min_time()
        items = read_output(bootstrap, sink)
        dead = [read_dead_letter(m) for m in _read(bootstrap, Topics(app).dlq)]
        acker_refused = run.services.acker.refused_future if run.services.acker else 0
    assert not MARKER.exists(), "a forged record ran a command"
    now_slot = slot_of(time.time_ns() // 1_000_000, 10)
    assert min_time <= now_slot < far, f"min time {min_time} moved past now ({now_slot})"
    assert_running_counts(items, lines)
    refused = {k: auth.refused[k] - refused_before.get(k, 0) for k in auth.refused}
    assert refused.get("acker", 0) >= 1, refused  # the forged heartbeats
    assert refused.get("barrier", 0) == 1, refused  # the pre-barrier frame
    assert acker_refused == 0  # refused for its MAC, before its time was even read
    (letter,) = [d for d in dead if d.topic == group_topic]
    assert "unauthenticated" in letter.reason and letter.offset >= 0


def _read(bootstrap: str, topic: str) -> list[Any]:
    from framework.kafka.clients import read_to_end

    return read_to_end(bootstrap, topic)
