"""Avro binary of ``flamepipe.Meta``, written by hand: the barrier encodes one per item.

fastavro's schemaless writer costs about 14 us per meta (a dict per record and a generic
walk of the schema); this writer emits the same bytes (checked against fastavro in
``unit_tests/wire/test_meta.py``) in a few microseconds. Avro binary: a ``long`` is a
zig-zag varint; an array is blocks of ``count, items...`` closed by a zero count; a
``boolean`` is one byte.
"""

from __future__ import annotations

from collections.abc import Iterable

from framework.core.meta import Meta
from framework.errors import EncodeError

_I64_MIN = -(1 << 63)
_I64_END = 1 << 63
_U64 = 1 << 64


_CACHED = 1 << 16
_cache: dict[int, bytes] = {}
"""Encodings of recent longs: slots, fronts, child ids and traces repeat across items."""


def _long(value: int) -> bytes:
    if not _I64_MIN <= value < _I64_END:
        raise EncodeError(f"cannot encode meta: {value} is not a signed 64-bit long")
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


_tails: dict[tuple[tuple[int, ...], int, bool], bytes] = {}
"""Encodings of ``(child ids, trace, tombstone)``: every item of one path shares them."""


def _tail(child_ids: tuple[int, ...], trace: int, tombstone: bool) -> bytes:
    key = (child_ids, trace, tombstone)
    data = _tails.get(key)
    if data is None:
        if not 0 <= trace < _U64:
            raise EncodeError(f"cannot encode meta: trace {trace} is not an unsigned 64-bit value")
        parts = [_long(len(child_ids)), *map(_long, child_ids)] if child_ids else []
        parts.append(b"\x00")
        parts.append(_long(trace - _U64 if trace >= _I64_END else trace))
        parts.append(b"\x01" if tombstone else b"\x00")
        data = b"".join(parts)
        if len(_tails) >= _CACHED:
            _tails.clear()
        _tails[key] = data
    return data


def encode_meta(meta: Meta) -> bytes:
    """Avro bytes of ``meta`` (schema ``schemas/meta.avsc``); `EncodeError` if invalid."""
    gt, child_ids, trace, tombstone = meta
    slot, front, offset = gt
    # Offsets rarely repeat: encoded afresh, they would only churn the cache.
    return b"".join(
        (_cached_long(slot), _cached_long(front), _long(offset), _tail(child_ids, trace, tombstone))
    )


def encode_metas(metas: Iterable[Meta]) -> list[bytes]:
    """`encode_meta` of each of ``metas``, with the per-meta work in one loop."""
    cached, tail, long_ = _cache.get, _tail, _long
    join = b"".join
    out: list[bytes] = []
    append = out.append
    for (slot, front, offset), child_ids, trace, tombstone in metas:
        append(
            join((
                cached(slot) or _cached_long(slot), cached(front) or _cached_long(front),
                long_(offset), tail(child_ids, trace, tombstone),
            ))
        )  # fmt: skip
    return out
