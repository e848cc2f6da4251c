"""Avro binary of ``flamepipe.Meta``, written by hand: the barrier encodes one per item.

fastavro's schemaless writer costs about 14 us per meta (a dict per record and a generic
walk of the schema); this writer emits the same bytes (checked against fastavro in
``unit_tests/test_metacodec.py``) in a few microseconds. Avro binary: a ``long`` is a
zig-zag varint; an array is blocks of ``count, items...`` closed by a zero count; a
``boolean`` is one byte.
"""

from __future__ import annotations

from framework.core.meta import Meta

__all__ = ["encode_meta"]

_I64_MIN = -(1 << 63)
_I64_END = 1 << 63
_U64 = 1 << 64


_CACHED = 1 << 16
_cache: dict[int, bytes] = {}
"""Encodings of recent longs: slots, fronts, child ids and traces repeat across items."""


def _long(value: int) -> bytes:
    if not _I64_MIN <= value < _I64_END:
        raise ValueError(f"cannot encode meta: {value} is not a signed 64-bit long")
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cached_long(value: int) -> bytes:
    data = _cache.get(value)
    if data is None:
        data = _long(value)
        if len(_cache) >= _CACHED:
            _cache.clear()
        _cache[value] = data
    return data


def encode_meta(meta: Meta) -> bytes:
    """Avro bytes of ``meta`` (schema ``schemas/meta.avsc``); ``ValueError`` if invalid."""
    gt, child_ids, trace, tombstone = meta
    slot, front, offset = gt
    if not 0 <= trace < _U64:
        raise ValueError(f"cannot encode meta: trace {trace} is not an unsigned 64-bit value")
    # Offsets rarely repeat: encoded afresh, they would only churn the cache.
    parts = [_cached_long(slot), _cached_long(front), _long(offset)]
    if child_ids:
        parts.append(_cached_long(len(child_ids)))
        parts.extend(map(_cached_long, child_ids))
    parts.append(b"\x00")
    parts.append(_cached_long(trace - _U64 if trace >= _I64_END else trace))
    parts.append(b"\x01" if tombstone else b"\x00")
    return b"".join(parts)
