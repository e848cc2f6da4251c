"""Batch operations: per item they are their per-item twins; what a function must return."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from framework.core.batches import (
    FilterBatchesOp,
    FlatMapBatchesOp,
    KeyByBatchesOp,
    MapBatchesOp,
    as_array,
)
from framework.core.columns import Columns, apply
from framework.core.meta import Meta, Record
from framework.core.ops import FilterOp, FlatMapOp, KeyByOp, MapOp, key_hash
from framework.core.time import GlobalTime
from framework.errors import UserFunctionError

META = Meta(GlobalTime(5, 7, 9), (1,), 3)


def test_a_batch_op_on_one_record_is_its_per_item_twin() -> None:
    record = Record(META, "to be")
    assert MapBatchesOp("m", 11, pc.utf8_upper).apply(record) == MapOp("m", 11, str.upper).apply(
        record
    )
    assert FlatMapBatchesOp("f", 11, pc.utf8_split_whitespace).apply(record) == FlatMapOp(
        "f", 11, str.split
    ).apply(record)
    keep = FilterBatchesOp("k", 11, lambda a: pc.greater(pc.utf8_length(a), 3))
    assert keep.apply(record) == FilterOp("k", 11, lambda s: len(s) > 3).apply(record)
    assert keep.apply(Record(META, "to")) == []


def test_what_a_batch_function_returns_is_checked() -> None:
    two = pa.array(["a", "b"])
    with pytest.raises(UserFunctionError, match="returned 1 results for 2 payloads"):
        MapBatchesOp("m", 1, lambda a: a.slice(0, 1)).column(two)
    with pytest.raises(UserFunctionError, match="one list per payload"):
        FlatMapBatchesOp("f", 1, lambda a: a).column(two)
    with pytest.raises(UserFunctionError, match="must return booleans"):
        FilterBatchesOp("k", 1, lambda a: a).column(two)
    with pytest.raises(UserFunctionError, match="failed on"):
        MapBatchesOp("m", 1, lambda a: 1 / 0).column(two)


def test_results_may_be_numpy_lists_tables_or_chunked() -> None:
    assert as_array(np.array([1, 2])).to_pylist() == [1, 2]
    assert as_array([[1], []]).to_pylist() == [[1], []]
    assert as_array(pa.chunked_array([[1], [2]])).to_pylist() == [1, 2]
    assert as_array(pa.table({"w": ["a"], "n": [1]})).to_pylist() == [{"w": "a", "n": 1}]
    with pytest.raises(UserFunctionError, match="do not fit one Arrow array"):
        as_array([1, "a"])


def test_a_null_list_is_empty_and_a_null_mask_is_false() -> None:
    cols = Columns.of(["a b", "", "c"])
    lists = apply(FlatMapBatchesOp("f", 3, lambda a: pa.array([["a", "b"], None, ["c"]])), cols)
    assert lists.pylist() == ["a", "b", "c"]
    assert lists.parents.tolist() == [0, 0, 2]
    assert lists.children[0].tolist() == [0, 1, 0]
    kept = apply(FilterBatchesOp("k", 5, lambda a: pa.array([True, None, False])), lists)
    assert kept.pylist() == ["a"] and kept.trace == 3 ^ 5


def test_key_by_batches_keys_as_key_by_does_and_hashes_each_distinct_key_once() -> None:
    first = KeyByBatchesOp("k", 13, lambda a: pc.utf8_slice_codeunits(a, 0, 1))
    record = Record(META, "tea")
    assert first.apply(record) == KeyByOp("k", 13, lambda s: s[:1]).apply(record)
    keys, hashes = first.column(pa.array(["tea", "toast", None, "cake"]))
    assert keys == ["t", "t", None, "c"]
    assert hashes == [key_hash("t"), key_hash("t"), key_hash(None), key_hash("c")]
    assert set(first.hashes) == {"t", None, "c"}
