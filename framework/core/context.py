"""A source record with its Kafka context, for functions that need more than the value.

`KafkaSource(..., context=True)` (and `ListSource(..., context=True)` in the in-process
harness) makes every payload a `Message`: the decoded value with the record's key,
headers, timestamp and its type, topic, partition and offset. It is part of the payload,
so it is the same on every replay (exactly the record Kafka stored) and travels through
shuffles like any payload; a function reads it as ``message.offset``, not from a
thread-local that would mean another record after a shuffle.
"""

from __future__ import annotations

from typing import NamedTuple

LOG_APPEND_TIME = "LogAppendTime"
"""The timestamp type of every source record: global time is computed from it."""


class Message(NamedTuple):
    """A source record: the decoded ``value`` (as the source's serdes give it) and where
    and when Kafka stored it.

    ``key``: the raw key bytes (or None); with a key serde on the source, the decoded key.
    ``headers``: ``(name, value bytes)`` pairs in record order. ``timestamp_ms`` with its
    ``timestamp_type`` (`LOG_APPEND_TIME`: the broker's append time).
    """

    value: object
    key: object
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    timestamp_type: str
    topic: str
    partition: int
    offset: int
