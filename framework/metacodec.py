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


def _long(value: int, out: bytearray) -> None:
    if not _I64_MIN <= value < _I64_END:
        raise ValueError(f"cannot encode meta: {value} is not a signed 64-bit long")
    n = (value << 1) ^ (value >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_meta(meta: Meta) -> bytes:
    """Avro bytes of ``meta`` (schema ``schemas/meta.avsc``); ``ValueError`` if invalid."""
    out = bytearray()
    gt = meta.gt
    _long(gt.slot, out)
    _long(gt.front, out)
    _long(gt.offset, out)
    child_ids = meta.child_ids
    if child_ids:
        _long(len(child_ids), out)
        for child in child_ids:
            _long(child, out)
    out.append(0)
    trace = meta.trace
    if not 0 <= trace < _U64:
        raise ValueError(f"cannot encode meta: trace {trace} is not an unsigned 64-bit value")
    _long(trace - _U64 if trace >= _I64_END else trace, out)
    out.append(1 if meta.tombstone else 0)
    return bytes(out)
