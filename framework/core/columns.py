"""Items as columns: a payload column and the meta in framework columns.

What every item of a batch shares is stored once (after Apache Beam's ``WindowedBatch``),
the rest as columns (after Arroyo's framework columns). Items that came from one source
partition's batch through the same chain of stateless operations share their front, their
trace (the XOR of the chain's op ids) and their tombstone flag (a source record is never a
tombstone), and their child-id paths have one id per map-like operation. So `Columns`:

* ``values``: the payloads, a Python list, or an Arrow array after a batch operation;
* ``parents``: per item, the index of the input record it descends from, whose slot and
  offset are the input's columns (``slots``, ``offsets``);
* ``children``: per map-like operation, each item's child id there;
* ``trace``: one int for all; ``keys`` and ``hashes`` once a ``key_by`` ran.

Item ``i``'s meta is ``Meta(GlobalTime(slots[p], front, offsets[p]), (c[i] for c in
children), trace)`` with ``p = parents[i]``: exactly what the per-item operations build
(`framework.core.ops`, `framework.core.batches`). The input is in meta order and every
operation keeps a parent's outputs together and in child order, so the items stay in meta
order: the largest meta of any set of items is that of the last one.

`apply` runs one operation over all items; a user function that raises raises
`UserFunctionError` for the whole batch (the caller finds the item by running the batch
item by item).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from framework.core.batches import (
    FilterBatchesOp,
    FlatMapBatchesOp,
    KeyByBatchesOp,
    MapBatchesOp,
    as_array,
)
from framework.core.meta import Meta
from framework.core.ops import FilterOp, FlatMapOp, KeyByOp, MapOp, Operation, key_hash
from framework.core.time import GlobalTime
from framework.errors import PipelineError, UserFunctionError

Ints = npt.NDArray[np.int64]
_new = tuple.__new__
_HASHES = 1 << 16

COLUMN_OPS = (
    MapOp,
    FlatMapOp,
    FilterOp,
    KeyByOp,
    MapBatchesOp,
    FlatMapBatchesOp,
    FilterBatchesOp,
    KeyByBatchesOp,
)
"""The operations `apply` runs on columns."""


@dataclass(frozen=True, slots=True)
class Columns:
    """Items of one source partition's batch; see the module docstring."""

    values: list[Any] | pa.Array
    parents: Ints
    children: tuple[Ints, ...] = ()
    trace: int = 0
    keys: list[Any] | None = None
    hashes: list[int] | None = None

    @classmethod
    def of(cls, values: list[Any]) -> Columns:
        """The input records' payloads, one item per record."""
        return cls(values, np.arange(len(values), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.parents)

    def pylist(self) -> list[Any]:
        """The payloads as Python objects."""
        values = self.values
        return values.to_pylist() if isinstance(values, pa.Array) else values

    def array(self) -> pa.Array:
        """The payloads as one Arrow array (`UserFunctionError` if they do not fit one)."""
        values = self.values
        return values if isinstance(values, pa.Array) else as_array(values)

    def metas(self, slots: Ints, offsets: Ints, front: int) -> list[Meta]:
        """Every item's meta, given the input records' slots and offsets and their front."""
        parents = self.parents
        trace = self.trace
        gts = [
            _new(GlobalTime, (s, front, o))
            for s, o in zip(slots[parents].tolist(), offsets[parents].tolist(), strict=True)
        ]
        return [
            _new(Meta, (gt, path, trace, False)) for gt, path in zip(gts, self.paths(), strict=True)
        ]

    def paths(self) -> list[tuple[int, ...]]:
        """Every item's child-id path."""
        if not self.children:
            return [()] * len(self)
        return list(zip(*(c.tolist() for c in self.children), strict=True))

    def take(self, rows: Ints, values: list[Any] | pa.Array, child: Ints, op_id: int) -> Columns:
        """The items ``rows`` (ascending) with new ``values`` and one more child id."""
        return Columns(
            values,
            self.parents[rows],
            (*(c[rows] for c in self.children), child),
            self.trace ^ op_id,
        )


def apply(op: Operation, cols: Columns) -> Columns:
    """``op`` over every item of ``cols`` (`COLUMN_OPS`), in item order."""
    if cols.keys is not None:
        raise PipelineError(f"{op} after key_by: a keyed stream is grouped or aggregated")
    if isinstance(op, MapOp):
        fn, name = op.fn, op.name
        out = _each(fn, name, cols.pylist())
        return cols.take(_all(cols), out, _zeros(len(cols)), op.op_id)
    if isinstance(op, FlatMapOp):
        return _flat_map(op, cols)
    if isinstance(op, FilterOp):
        fn, name = op.fn, op.name
        values = cols.pylist()
        rows = np.flatnonzero(np.fromiter(map(bool, _each(fn, name, values)), bool, len(values)))
        kept = [values[i] for i in rows.tolist()]
        return cols.take(rows, kept, _zeros(len(rows)), op.op_id)
    if isinstance(op, KeyByOp):
        return _key_by(op, cols)
    if not len(cols) and isinstance(op, KeyByBatchesOp):
        return replace(cols, values=[], trace=cols.trace ^ op.op_id, keys=[], hashes=[])
    if not len(cols) and isinstance(op, MapBatchesOp | FlatMapBatchesOp | FilterBatchesOp):
        # No payloads, no call: an empty list has no Arrow type to give the function.
        return cols.take(_all(cols), [], _zeros(0), op.op_id)
    if isinstance(op, KeyByBatchesOp):
        keys, hashes = op.column(cols.array())
        return replace(cols, trace=cols.trace ^ op.op_id, keys=keys, hashes=hashes)
    if isinstance(op, MapBatchesOp):
        return cols.take(_all(cols), op.column(cols.array()), _zeros(len(cols)), op.op_id)
    if isinstance(op, FlatMapBatchesOp):
        return _flat_map_batches(op, cols)
    if isinstance(op, FilterBatchesOp):
        mask = op.column(cols.array())
        rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False)).astype(np.int64)
        values = cols.array().filter(mask)
        return cols.take(rows, values, _zeros(len(rows)), op.op_id)
    raise PipelineError(f"{op} does not run on columns")


def _each(fn: Any, name: str, values: list[Any]) -> list[Any]:
    """``fn`` of every value; one try for them all (the per-item path names the item)."""
    try:
        return list(map(fn, values))
    except Exception as exc:
        raise UserFunctionError(f"{name} failed on one of {len(values)} payloads") from exc


def _all(cols: Columns) -> Ints:
    return np.arange(len(cols), dtype=np.int64)


def _zeros(count: int) -> Ints:
    return np.zeros(count, dtype=np.int64)


def _flat_map(op: FlatMapOp, cols: Columns) -> Columns:
    fn, name = op.fn, op.name
    lists = [list(out) for out in _each(fn, name, cols.pylist())]
    lengths = np.fromiter(map(len, lists), np.int64, len(lists))
    return _spread(cols, lengths, list(chain.from_iterable(lists)), op.op_id)


def _flat_map_batches(op: FlatMapBatchesOp, cols: Columns) -> Columns:
    lists = op.column(cols.array())
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy().astype(np.int64)
    return _spread(cols, lengths, pc.list_flatten(lists), op.op_id)


def _spread(cols: Columns, lengths: Ints, values: list[Any] | pa.Array, op_id: int) -> Columns:
    """Each item ``i`` repeated ``lengths[i]`` times, the copies numbered from 0."""
    rows = np.repeat(np.arange(len(cols), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    child = np.arange(len(rows), dtype=np.int64) - np.repeat(starts, lengths)
    return cols.take(rows, values, child, op_id)


def _hash(cache: dict[Any, int], key: object) -> int:
    """``key``'s hash, remembered: a key seen earlier in the same batch is known now."""
    try:
        hash_ = cache.get(key)
        if hash_ is None:
            if len(cache) >= _HASHES:
                cache.clear()
            hash_ = cache[key] = key_hash(key)
    except TypeError:  # unhashable (a list)
        return key_hash(key)
    return hash_


def _key_by(op: KeyByOp, cols: Columns) -> Columns:
    fn, name, cache = op.fn, op.name, op.hashes
    values = cols.pylist()
    keys = _each(fn, name, values)
    try:
        # Each distinct key once (a batch of words repeats most of them), then the hashes
        # looked up in C: the per-item loop called `_hash` for every item of a fresh task.
        distinct: dict[Any, int] = dict.fromkeys(keys, 0)
    except TypeError:  # an unhashable key (a list): nothing to remember it by
        hashes = [_hash(cache, k) for k in keys]
    else:
        get = cache.get
        for key in distinct:
            hash_ = get(key)
            distinct[key] = _hash(cache, key) if hash_ is None else hash_
        hashes = list(map(distinct.__getitem__, keys))
    return replace(cols, values=values, trace=cols.trace ^ op.op_id, keys=keys, hashes=hashes)
