"""Reading a whole topic as it stands: tools, demos, oracles and tests."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from framework.errors import PipelineError

__all__ = ["read_to_end"]


def read_to_end(
    bootstrap: str, topic: str, *, committed: bool = True, timeout_s: float = 60.0
) -> list[Message]:
    """Every record of ``topic`` from each partition's start to its current end.

    Partitions are assigned, not subscribed, so there is no group join to wait for; the
    end is where the broker reports end of partition (the last stable offset with
    ``committed``, i.e. read_committed).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"flamepipe-read-{uuid.uuid4().hex}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending = set(partitions)
        records: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                error = msg.error()
                if error is None:
                    records.append(msg)
                elif error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                else:
                    raise PipelineError(f"reading {topic}: {error}")
        if pending:
            raise PipelineError(f"reading {topic}: partitions {sorted(pending)} did not end")
        return records
    finally:
        consumer.close()
