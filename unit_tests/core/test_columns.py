"""Items as columns: the metas and payloads the per-item operations would make."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.columns import Columns, apply
from framework.core.meta import Meta, Record
from framework.core.ops import FilterOp, FlatMapOp, KeyByOp, MapOp, Operation, key_hash
from framework.core.time import GlobalTime

FRONT = 77

MAKERS: dict[str, Callable[[int], Operation]] = {
    "map": lambda i: MapOp("m", i, lambda s: s[::-1]),
    "flat_map": lambda i: FlatMapOp("f", i, lambda s: s.split("a")),
    "filter": lambda i: FilterOp("k", i, lambda s: len(s) != 1),
}


def per_item(ops: list[Operation], records: list[Record]) -> list[Record]:
    for op in ops:
        records = [out for record in records for out in op.apply(record)]
    return records


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(st.sampled_from(sorted(MAKERS)), max_size=5),
    texts=st.lists(st.text("ab", max_size=5), max_size=8),
    keyed=st.booleans(),
)
def test_columns_hold_the_items_of_the_per_item_ops(
    names: list[str], texts: list[str], keyed: bool
) -> None:
    ops = [MAKERS[name](1 << i) for i, name in enumerate(names)]
    if keyed:
        ops.append(KeyByOp("key", 1 << 20, lambda s: s[:1]))
    slots = np.arange(len(texts), dtype=np.int64) // 3
    offsets = np.arange(len(texts), dtype=np.int64) + 1000
    records = [
        Record(Meta(GlobalTime(int(slots[i]), FRONT, int(offsets[i]))), text)
        for i, text in enumerate(texts)
    ]
    expected = per_item(ops, records)
    cols = Columns.of(list(texts))
    for op in ops:
        cols = apply(op, cols)
    assert cols.metas(slots, offsets, FRONT) == [r.meta for r in expected]
    payloads: list[Any] = cols.pylist()
    if keyed:
        assert cols.keys is not None and cols.hashes is not None
        payloads = [(k, h, v) for k, h, v in zip(cols.keys, cols.hashes, payloads, strict=True)]
    assert payloads == [tuple(r.value) if keyed else r.value for r in expected]  # type: ignore[arg-type]


def test_hashes_are_the_stable_key_hashes_and_unhashable_keys_work() -> None:
    cols = apply(KeyByOp("k", 1, lambda s: [s]), Columns.of(["a", "a", "b"]))
    assert cols.hashes == [key_hash(["a"]), key_hash(["a"]), key_hash(["b"])]
    op = KeyByOp("k", 1, lambda s: s)
    cols = apply(op, Columns.of(["a", "a", "b"]))
    assert cols.hashes == [key_hash("a"), key_hash("a"), key_hash("b")]
    assert op.hashes == {"a": key_hash("a"), "b": key_hash("b")}
