"""Position records on a real broker: the latest committed record of each input partition
is its position, whatever was aborted, whoever else writes to the partition, however far
back it is (`framework.kafka.stage_positions`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from framework.errors import ProtocolViolation
from framework.kafka.admin import ensure_topics
from framework.kafka.clients import new_producer
from framework.kafka.stage_positions import position_record, read_positions
from framework.kafka.topics import positions_topic_spec
from framework.kafka.transactions import TaskCommitter, TransactionalProducer, close_cached


@pytest.fixture
def topic(bootstrap: str) -> Iterator[str]:
    name = f"pos-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [positions_topic_spec(name, 1)])
    yield name
    close_cached()


def _commit(committer: TaskCommitter, topic: str, partition: int, offset: int) -> None:
    record = position_record(
        topic, 1, group="g", source="in", partition=partition, offset=offset, text=f"o={offset}"
    )
    committer.commit([record], "g", {})


def test_the_latest_committed_record_of_each_partition_is_its_position(
    bootstrap: str, topic: str
) -> None:
    committer = TaskCommitter(bootstrap, f"{topic}.tasks", take_over=False)
    try:
        # Partition 0 commits once, then partition 1 commits 300 times: partition 0's
        # record lies far behind the first window the reader looks at (64 records).
        _commit(committer, topic, 0, 7)
        for offset in range(300):
            _commit(committer, topic, 1, offset)
    finally:
        committer.close()
    # An aborted transaction is never a position.
    aborting = TransactionalProducer(bootstrap, f"{topic}.aborting")
    try:
        aborting.start()
        aborting.begin()
        aborting.produce(
            position_record(topic, 1, group="g", source="in", partition=1, offset=999, text="")
        )
        assert aborting.abort()
    finally:
        aborting.close()
    found = read_positions(bootstrap, topic, group="g", source="in", partitions=[0, 1, 2])
    assert found == {0: (7, "o=7"), 1: (299, "o=299")}
    # Another run's group: its records are no position of this one.
    assert read_positions(bootstrap, topic, group="g2", source="in", partitions=[0]) == {}


def test_a_forged_latest_record_is_refused_not_skipped(bootstrap: str, topic: str) -> None:
    committer = TaskCommitter(bootstrap, f"{topic}.tasks", take_over=False)
    try:
        _commit(committer, topic, 0, 5)
    finally:
        committer.close()
    producer = new_producer(bootstrap)
    forged = b'["g", "in", 0, 500, "o=5|mac=00"]'
    producer.produce(topic, forged, key=b"0", partition=0)
    assert producer.flush(10) == 0
    with pytest.raises(ProtocolViolation, match="no valid MAC"):
        read_positions(bootstrap, topic, group="g", source="in", partitions=[0])
