"""Changelog records of stateful stages, compacted: latest wins per Kafka key.

Layout (topic ``<app>.<node>.state``, compacted):

* a grouping's item: Kafka key = `ITEM_PREFIX` + the key's canonical bytes (`key_bytes`)
  + its meta packed (`item_key`; equal items compact together), value = pickle of ``(key,
  meta, values, early tombstones)``: the payloads of the bucket's items at that meta and
  of its tombstones that overtook their items there; a Kafka tombstone (None) once there
  are neither. A commit writes the items it changed, not their buckets: a hot key's
  bucket rewritten whole at every commit made the changelog 18-25x its input at 50
  commits a second;
* an aggregate's key: Kafka key = the key's canonical bytes (`key_bytes`: equal keys
  compact together), value = pickle of ``(key, bucket)``; ``bucket`` is ``(metas, values,
  early tombstones)`` with every meta as a plain tuple, plus ``(value, slot of its last
  item)`` for a rolling aggregate (`framework.core.rolling`), or None once the key has
  neither;
* an aggregate's min time: Kafka key `MIN_TIME_KEY`, value = pickle of ``(None, min_time)``;
  a task writes it first in every batch's records (`framework.plan.stage_state`);
* an aggregate's restore floor: Kafka key `FLOOR_KEY`, value = pickle of ``(None, slot)``,
  written once by a restore from a snapshot at ``slot``: items below it hold no slot and
  their results were released by an earlier epoch (`WindowAggregator.put_floor`).

Written by a stage task (`framework.plan.stage_state`) and, byte for byte the same, by a restore
that seeds a new epoch from a snapshot (`framework.snapshots.units`). These topics are
flamepipe's own: nothing else may write them.
"""

from __future__ import annotations

import struct
from typing import Any

from framework.core.ops import key_bytes, read_key
from framework.errors import DecodeError
from framework.wire.serde import Pickle

_PICKLE = Pickle()

MIN_TIME_KEY = b"\xfffp.min_time"
"""Changelog key of an aggregate's min time (no key's canonical bytes start with 0xff)."""

FLOOR_KEY = b"\xfffp.floor"
"""Changelog key of an aggregate's restore floor."""

ITEM_PREFIX = b"\xfe"
"""First byte of a grouping item's changelog key (no key's canonical bytes start so)."""

BUCKET, MIN_TIME, FLOOR, ITEM = "bucket", "min_time", "floor", "item"
"""What a changelog record is (`read_record`)."""

PlainMeta = tuple[tuple[int, int, int], tuple[int, ...], int]
"""An item's meta in a changelog key: global time, child ids, trace."""

_KINDS = {MIN_TIME_KEY: MIN_TIME, FLOOR_KEY: FLOOR}


def bucket_record(key: object, bucket: Any) -> tuple[bytes, bytes]:
    """The record of ``key`` with its plain ``bucket`` (None: the bucket is gone)."""
    return key_bytes(key), _PICKLE.dumps((key, bucket))


def item_record(
    key: object, meta: PlainMeta, values: list[Any], early: list[Any], *, raw_key: bytes = b""
) -> tuple[bytes, bytes | None]:
    """The record of a grouping's items at ``meta`` in ``key``'s bucket: their payloads
    and those of its early tombstones at ``meta``; a deletion (None) when both are empty.
    ``raw_key``: `key_bytes` of ``key`` if the caller has it."""
    kafka_key = item_key(raw_key or key_bytes(key), meta)
    if not values and not early:
        return kafka_key, None
    return kafka_key, _PICKLE.dumps((key, meta, values, early))


def item_key(raw_key: bytes, meta: PlainMeta) -> bytes:
    """`ITEM_PREFIX`, the key's canonical bytes, then the meta packed: slot, front, offset
    (signed), trace (unsigned), the child ids' count (16 bits) and the ids (signed), all
    64-bit big-endian but the count. Packed, not `key_bytes` of the whole tuple: that took
    11 of a record's 13 us."""
    (slot, front, offset), child_ids, trace = meta
    return b"".join(
        (ITEM_PREFIX, raw_key, _meta_struct(len(child_ids)).pack(
            slot, front, offset, trace, len(child_ids), *child_ids
        ))
    )  # fmt: skip


def _meta_struct(children: int) -> struct.Struct:
    found = _META_STRUCTS.get(children)
    if found is None:
        found = _META_STRUCTS[children] = struct.Struct(f">qqqQH{children}q")
    return found


_META_STRUCTS: dict[int, struct.Struct] = {}
_META_HEAD = struct.Struct(">qqqQH")


def read_item_key(kafka_key: bytes) -> tuple[Any, PlainMeta]:
    """``(key, meta)`` of a grouping item's changelog key (a deletion names its item so);
    `DecodeError` for any other bytes. The key equals the one written (`key_from_bytes`)."""
    if not kafka_key.startswith(ITEM_PREFIX):
        raise DecodeError("not a grouping item's changelog key")
    key, start = read_key(kafka_key, 1)
    try:
        slot, front, offset, trace, children = _META_HEAD.unpack_from(kafka_key, start)
        if len(kafka_key) != start + _META_HEAD.size + 8 * children:
            raise DecodeError("a grouping item's changelog key of the wrong length")
        child_ids = _meta_struct(children).unpack_from(kafka_key, start)[5:]
    except struct.error:
        raise DecodeError("not a grouping item's changelog key") from None
    return key, ((slot, front, offset), tuple(child_ids), trace)


def min_time_record(min_time: int) -> tuple[bytes, bytes]:
    """The record of an aggregate's min time."""
    return MIN_TIME_KEY, _PICKLE.dumps((None, min_time))


def floor_record(slot: int) -> tuple[bytes, bytes]:
    """The record of an aggregate's restore floor."""
    return FLOOR_KEY, _PICKLE.dumps((None, slot))


def read_record(kafka_key: bytes | None, value: bytes) -> tuple[str, Any, Any]:
    """``(kind, key, payload)`` of a record's bytes: kind `BUCKET` (payload: the bucket),
    `MIN_TIME` or `FLOOR` (the slot), `ITEM` (``(meta, values, early)``)."""
    raw = bytes(kafka_key or b"")
    if raw.startswith(ITEM_PREFIX):
        key, meta, values, early = _PICKLE.loads(value)
        return ITEM, key, (meta, values, early)
    key, bucket = _PICKLE.loads(value)
    return _KINDS.get(raw, BUCKET), key, bucket
