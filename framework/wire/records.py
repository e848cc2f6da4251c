"""Kafka records as flamepipe's code sees them: read by a task, written by a task or a barrier.

Plain tuples, no client types: a task is pure with respect to I/O, and a runner turns these
into ``confluent_kafka`` calls or Spark rows.
"""

from __future__ import annotations

from typing import NamedTuple


class InRecord(NamedTuple):
    """A Kafka record as a stage task reads it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class OutRecord(NamedTuple):
    """A Kafka record a stage task writes (partition None: the producer's partitioner)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
