"""Stateless physical ops: meta rules, tombstones, stable ids and key hashes."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.ids import stable_id
from framework.core.meta import Meta, Record
from framework.core.ops import (
    BroadcastOp,
    FilterOp,
    FlatMapOp,
    KeyByOp,
    Keyed,
    MapOp,
    MergeOp,
    key_bytes,
    key_from_bytes,
    key_hash,
    op_id_of,
)
from framework.core.time import GlobalTime
from framework.errors import DecodeError, UserFunctionError

META = Meta(GlobalTime(5, 7, 3), (1,), 0xABC)
OP = 0x1234_5678_9ABC_DEF0


def test_op_ids_are_deterministic_and_distinct() -> None:
    assert op_id_of("wc", "1:map") == op_id_of("wc", "1:map")
    assert op_id_of("wc", "1:map") != op_id_of("wc", "2:map")
    assert op_id_of("wc", "1:map") != op_id_of("other", "1:map")
    assert 0 <= op_id_of("wc", "1:map") < 2**64


def test_key_hash_is_stable_across_processes() -> None:
    code = "from framework.core.ops import key_hash; print(key_hash(('word', 3)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == key_hash(("word", 3))


def test_equal_keys_hash_equally() -> None:
    assert key_hash(1) == key_hash(1.0) == key_hash(True)
    assert key_hash([1, "a"]) == key_hash((1, "a"))
    assert key_hash("1") != key_hash(1)
    assert key_bytes(("a", "b")) != key_bytes(("ab",))
    assert key_hash(b"x") != key_hash("x")


def test_unhashable_key_type_is_a_user_function_error() -> None:
    with pytest.raises(UserFunctionError, match="no stable encoding"):
        key_hash(object())


KEYS = st.recursive(
    st.none() | st.integers() | st.text() | st.binary(), lambda k: st.lists(k).map(tuple)
)


@given(KEYS, KEYS)
@settings(max_examples=200, deadline=None)
def test_key_bytes_encode_equal_keys_equally_and_only_them(a: object, b: object) -> None:
    assert (key_bytes(a) == key_bytes(b)) == (a == b)


@given(KEYS | st.floats(allow_nan=False) | st.booleans())
@settings(max_examples=200, deadline=None)
def test_key_from_bytes_gives_back_an_equal_key(key: object) -> None:
    back = key_from_bytes(key_bytes(key))
    assert back == key and key_bytes(back) == key_bytes(key)


@given(st.binary(max_size=40))
@settings(max_examples=300, deadline=None)
def test_key_from_bytes_refuses_what_key_bytes_never_makes(data: bytes) -> None:
    try:
        key = key_from_bytes(data)
    except DecodeError:
        return
    assert key_bytes(key) == data


def test_only_a_keys_canonical_bytes_name_it() -> None:
    for other in (b"i+1;", b"i 1 ;", b"i1_0;", b"i01;", b"s+1:a", b"f" + struct.pack(">d", 1.0)):
        with pytest.raises(DecodeError, match="canonical"):
            key_from_bytes(other)


def test_map_appends_child_and_xors_trace() -> None:
    [out] = MapOp("m", OP, lambda v: v + 1).apply(Record(META, 1))
    assert out == Record(Meta(META.gt, (1, 0), 0xABC ^ OP), 2)


def test_flat_map_numbers_children() -> None:
    outs = FlatMapOp("f", OP, str.split).apply(Record(META, "a b c"))
    assert [o.value for o in outs] == ["a", "b", "c"]
    assert [o.meta.child_ids for o in outs] == [(1, 0), (1, 1), (1, 2)]
    assert {o.meta.trace for o in outs} == {0xABC ^ OP}


def test_filter_is_a_flat_map_of_zero_or_one() -> None:
    op = FilterOp("f", OP, lambda v: v > 0)
    assert op.apply(Record(META, -1)) == []
    assert op.apply(Record(META, 1)) == [Record(META.child(OP, 0), 1)]


def test_key_by_and_merge_only_xor() -> None:
    [keyed] = KeyByOp("k", OP, len).apply(Record(META, "abc"))
    assert keyed == Record(META.through(OP), Keyed(3, key_hash(3), "abc"))
    [merged] = MergeOp("m", OP).apply(Record(META, "x"))
    assert merged == Record(META.through(OP), "x")


def test_broadcast_copies_per_port() -> None:
    outs = BroadcastOp("b", OP, 3).apply(Record(META, "x"))
    assert [o.meta.child_ids for o in outs] == [(1, 0), (1, 1), (1, 2)]
    assert all(o.value == "x" for o in outs)


@pytest.mark.parametrize(
    "op",
    [
        MapOp("m", OP, lambda v: v * 2),
        FlatMapOp("f", OP, range),
        FilterOp("p", OP, lambda v: v % 2),
        KeyByOp("k", OP, lambda v: v % 3),
        MergeOp("g", OP),
        BroadcastOp("b", OP, 2),
    ],
)
@pytest.mark.parametrize("value", [0, 1, 4, 7])
def test_tombstone_yields_exactly_the_tombstones_of_the_items_outputs(
    op: MapOp | FlatMapOp | FilterOp | KeyByOp | MergeOp | BroadcastOp, value: int
) -> None:
    item = Record(META, value)
    assert op.apply(item.tombstone()) == [out.tombstone() for out in op.apply(item)]


def test_user_function_failure_names_the_op() -> None:
    with pytest.raises(UserFunctionError, match=r"map:boom failed on 0.*ZeroDivisionError"):
        MapOp("map:boom", OP, lambda v: 1 / v).apply(Record(META, 0))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_strings_hash_is_the_blake2b_of_its_canonical_bytes(key: str) -> None:
    assert key_hash(key) == stable_id(key_bytes(key), 64)


def test_key_hashes_do_not_change_between_versions() -> None:
    # Partitions, state and savepoints are placed by these: a change moves every key.
    assert key_hash("word") == stable_id(b"s4:word", 64)
    assert key_hash("w\u00f6rd") == stable_id("s5:w\u00f6rd".encode(), 64)
    assert key_hash(7) == stable_id(b"i7;", 64)
