"""Changelog records of stateful stages: one compacted record per key, latest wins.

Layout (topic ``<app>.<node>.state``, compacted):

* a key's record: Kafka key = the key's canonical bytes (`key_bytes`: equal keys compact
  together), value = pickle of ``(key, bucket)``; ``bucket`` is ``(metas, values, early
  tombstones)`` with every meta as a plain tuple, plus ``(value, slot of its last item)``
  for a rolling aggregate (`framework.core.rolling`), or None once the key has neither;
* an aggregate's min time: Kafka key `MIN_TIME_KEY`, value = pickle of ``(None, min_time)``;
  a task writes it first in every batch's records (`framework.plan.state`);
* an aggregate's restore floor: Kafka key `FLOOR_KEY`, value = pickle of ``(None, slot)``,
  written once by a restore from a snapshot at ``slot``: items below it hold no slot and
  their results were released by an earlier epoch (`WindowAggregator.put_floor`).

Written by a stage task (`framework.plan.state`) and, byte for byte the same, by a restore
that seeds a new epoch from a snapshot (`framework.snapshots.units`). These topics are
flamepipe's own: nothing else may write them.
"""

from __future__ import annotations

from typing import Any

from framework.core.ops import key_bytes
from framework.wire.serde import Pickle

__all__ = [
    "BUCKET",
    "FLOOR",
    "FLOOR_KEY",
    "MIN_TIME",
    "MIN_TIME_KEY",
    "bucket_record",
    "floor_record",
    "min_time_record",
    "read_record",
]

_PICKLE = Pickle()

MIN_TIME_KEY = b"\xfffp.min_time"
"""Changelog key of an aggregate's min time (no key's canonical bytes start with 0xff)."""

FLOOR_KEY = b"\xfffp.floor"
"""Changelog key of an aggregate's restore floor."""

BUCKET, MIN_TIME, FLOOR = "bucket", "min_time", "floor"
"""What a changelog record is (`read_record`)."""

_KINDS = {MIN_TIME_KEY: MIN_TIME, FLOOR_KEY: FLOOR}


def bucket_record(key: Any, bucket: Any) -> tuple[bytes, bytes]:
    """The record of ``key`` with its plain ``bucket`` (None: the bucket is gone)."""
    return key_bytes(key), _PICKLE.dumps((key, bucket))


def min_time_record(min_time: int) -> tuple[bytes, bytes]:
    """The record of an aggregate's min time."""
    return MIN_TIME_KEY, _PICKLE.dumps((None, min_time))


def floor_record(slot: int) -> tuple[bytes, bytes]:
    """The record of an aggregate's restore floor."""
    return FLOOR_KEY, _PICKLE.dumps((None, slot))


def read_record(kafka_key: bytes | None, value: bytes) -> tuple[str, Any, Any]:
    """``(kind, key, bucket or slot)`` of a record's bytes; kind is `BUCKET`, `MIN_TIME` or
    `FLOOR`."""
    key, bucket = _PICKLE.loads(value)
    return _KINDS.get(bytes(kafka_key or b""), BUCKET), key, bucket
