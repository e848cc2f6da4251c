"""Changelog records (`framework.wire.changelog`): a grouping item's key names its item."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.errors import DecodeError
from framework.wire.changelog import ITEM, item_record, read_item_key, read_record

_KEYS = st.recursive(st.none() | st.integers() | st.text(), lambda k: st.lists(k).map(tuple))
_I64 = st.integers(-(2**63), 2**63 - 1)
_METAS = st.tuples(
    st.tuples(_I64, _I64, _I64),
    st.lists(st.integers(0, 2**63 - 1), max_size=4).map(tuple),
    st.integers(0, 2**64 - 1),
)


@settings(max_examples=200, deadline=None)
@given(_KEYS, _METAS)
def test_an_item_key_names_its_key_and_meta(key: object, meta: tuple[Any, ...]) -> None:
    kafka_key, value = item_record(key, meta, [1], [])
    assert read_item_key(kafka_key) == (key, meta)
    assert value is not None and read_record(kafka_key, value) == (ITEM, key, (meta, [1], []))
    deleted_key, deleted = item_record(key, meta, [], [])
    assert deleted_key == kafka_key and deleted is None


def test_other_bytes_are_not_an_item_key() -> None:
    kafka_key, _ = item_record("k", ((1, 2, 3), (0,), 5), [1], [])
    for bad in (kafka_key[1:], kafka_key[:-1], kafka_key + b"\x00", b"\xfe", b"\xfes1:k"):
        with pytest.raises(DecodeError):
            read_item_key(bad)
