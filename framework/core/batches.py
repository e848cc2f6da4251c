"""Batch operations: the user function takes a column of payloads, not one payload.

``map_batches``, ``flat_map_batches``, ``filter_batches`` and ``key_by_batches`` are
``map``, ``flat_map``, ``filter`` and ``key_by`` whose function sees many payloads at once
as a `pyarrow.Array` (payloads that are dicts arrive as a ``StructArray``;
`pyarrow.RecordBatch.from_struct_array` makes a batch of columns of it). Their meta rules
are their per-item twins' exactly (`framework.core.ops`): the ``i``-th output of a payload
has child id ``i`` and the op's id XORed into its trace, so a pipeline gives the same
output with either.

What the function returns, for ``n`` payloads in:

* ``map_batches``: ``n`` values (an Arrow array, a NumPy array, a list, a pandas Series);
* ``flat_map_batches``: ``n`` lists, one per payload (a ``ListArray``, such as
  ``pyarrow.compute.utf8_split_whitespace`` returns, or a list of lists); a null is an
  empty list;
* ``filter_batches``: ``n`` booleans; a null is false;
* ``key_by_batches``: ``n`` keys (a null is None), of the types ``key_by`` allows.

A function must be deterministic on each payload alone: the runner may call it on any
split of the payloads, down to one payload at a time (after a failure, to find the payload
it failed on: that one goes to the dead-letter topic, the others on).

`apply` runs the function on one record (a batch of one), which is what the per-item
engine does; `framework.core.columns` runs it on whole columns.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.values import UserValue
from framework.errors import UserFunctionError


def as_array(values: UserValue) -> pa.Array:
    """``values`` (what a batch function takes or returns) as one Arrow array.

    Raises `UserFunctionError` if Arrow cannot hold them (mixed types, say)."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    if isinstance(values, pa.RecordBatch):
        return values.to_struct_array()
    if isinstance(values, pa.Table):
        return values.to_struct_array().combine_chunks()
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise UserFunctionError(
            f"payloads {reprlib.repr(values)} do not fit one Arrow array: {exc}"
        ) from exc


def lists_of(values: UserValue, name: str, count: int) -> pa.ListArray | pa.LargeListArray:
    """A flat_map_batches function's result as a list array of ``count`` lists."""
    array = as_array(values)
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise UserFunctionError(f"{name} must return one list per payload, got {array.type}")
    _check_length(name, len(array), count)
    return array


def _check_length(name: str, got: int, count: int) -> None:
    if got != count:
        raise UserFunctionError(f"{name} returned {got} results for {count} payloads")


def _call(name: str, fn: Callable[[pa.Array], UserValue], payloads: pa.Array) -> UserValue:
    try:
        return fn(payloads)
    except UserFunctionError:
        raise
    except Exception as exc:
        raise UserFunctionError(
            f"{name} failed on {reprlib.repr(payloads.to_pylist())}: {exc!r}"
        ) from exc


@dataclass(frozen=True, slots=True)
class MapBatchesOp:
    """``map_batches``: one output per payload, child id 0."""

    name: str
    op_id: int
    fn: Callable[[pa.Array], UserValue]

    def column(self, payloads: pa.Array) -> pa.Array:
        """The outputs of a column of payloads, one per payload."""
        out = as_array(_call(self.name, self.fn, payloads))
        _check_length(self.name, len(out), len(payloads))
        return out

    def apply(self, record: Record) -> list[Record]:
        (value,) = self.column(as_array([record.value])).to_pylist()
        return [Record(record.meta.child(self.op_id, 0), value)]


@dataclass(frozen=True, slots=True)
class FlatMapBatchesOp:
    """``flat_map_batches``: the ``i``-th value of a payload's list has child id ``i``."""

    name: str
    op_id: int
    fn: Callable[[pa.Array], UserValue]

    def column(self, payloads: pa.Array) -> pa.ListArray | pa.LargeListArray:
        """One list of outputs per payload."""
        return lists_of(_call(self.name, self.fn, payloads), self.name, len(payloads))

    def apply(self, record: Record) -> list[Record]:
        (values,) = self.column(as_array([record.value])).to_pylist()
        meta = record.meta
        return [Record(meta.child(self.op_id, i), v) for i, v in enumerate(values or ())]


@dataclass(frozen=True, slots=True)
class FilterBatchesOp:
    """``filter_batches``: the payload itself (child id 0) where the mask is true."""

    name: str
    op_id: int
    fn: Callable[[pa.Array], UserValue]

    def column(self, payloads: pa.Array) -> pa.BooleanArray:
        """The mask: true where a payload passes (a null is false)."""
        mask = as_array(_call(self.name, self.fn, payloads))
        if not pa.types.is_boolean(mask.type):
            raise UserFunctionError(f"{self.name} must return booleans, got {mask.type}")
        _check_length(self.name, len(mask), len(payloads))
        return pc.fill_null(mask, False)

    def apply(self, record: Record) -> list[Record]:
        (keep,) = self.column(as_array([record.value])).to_pylist()
        if not keep:
            return []
        return [Record(record.meta.child(self.op_id, 0), record.value)]


_HASHES = 1 << 16  # keys whose hash a key_by_batches remembers


@dataclass(frozen=True, slots=True)
class KeyByBatchesOp:
    """``key_by_batches``: each payload keyed by its value of the returned column; trace
    XOR only, as ``key_by``."""

    name: str
    op_id: int
    fn: Callable[[pa.Array], UserValue]
    hashes: dict[UserValue, int] = field(default_factory=dict, compare=False, repr=False)

    def column(self, payloads: pa.Array) -> tuple[list[UserValue], list[int]]:
        """Every payload's key and its stable hash, hashed once per distinct key."""
        keys = as_array(_call(self.name, self.fn, payloads))
        _check_length(self.name, len(keys), len(payloads))
        encoded = pc.dictionary_encode(keys, null_encoding="encode")
        distinct = encoded.dictionary.to_pylist()
        hashes = [self._hash(key) for key in distinct]
        indices = encoded.indices.to_pylist()
        return [distinct[i] for i in indices], [hashes[i] for i in indices]

    def _hash(self, key: object) -> int:
        known = self.hashes.get(key)
        if known is None:
            if len(self.hashes) >= _HASHES:
                self.hashes.clear()
            known = self.hashes[key] = key_hash(key)
        return known

    def apply(self, record: Record) -> list[Record]:
        (key,), (hash_,) = self.column(as_array([record.value]))
        gt, child_ids, trace, tombstone = record.meta
        meta = Meta(gt, child_ids, trace ^ self.op_id, tombstone)
        return [Record(meta, Keyed(key, hash_, record.value))]
