"""Serdes: round trips, deterministic bytes, DecodeError for bad bytes, picklable."""

from __future__ import annotations

import contextlib
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.errors import DecodeError, EncodeError, PipelineError
from framework.wire.serde import AvroSerde, Bytes, Json, Pickle, Serde, Utf8

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
clicks = st.fixed_dictionaries(
    {
        "user": st.text(max_size=8),
        "count": st.integers(-(1 << 63), (1 << 63) - 1),
        "tags": st.lists(st.text(max_size=4), max_size=3),
    }
)
SERDES: list[Serde] = [Utf8(), Json(), Bytes(), Pickle(), AvroSerde(SCHEMA)]


@pytest.mark.parametrize("serde", SERDES, ids=lambda s: type(s).__name__)
def test_every_builtin_is_a_serde_and_picklable(serde: Serde) -> None:
    assert isinstance(serde, Serde)
    copy = pickle.loads(pickle.dumps(serde))
    assert type(copy) is type(serde)


@given(st.text())
def test_utf8_round_trip(text: str) -> None:
    assert Utf8().loads(Utf8().dumps(text)) == text


def test_utf8_errors() -> None:
    with pytest.raises(DecodeError, match="not UTF-8"):
        Utf8().loads(b"\xff\xfe")
    with pytest.raises(EncodeError, match="Utf8 cannot encode int"):
        Utf8().dumps(3)
    with pytest.raises(EncodeError, match="Utf8 cannot encode"):
        Utf8().dumps("\ud800")


@given(json_values)
def test_json_round_trip(value: Any) -> None:
    assert Json().loads(Json().dumps(value)) == value


@given(st.dictionaries(st.text(max_size=5), st.integers(), min_size=2))
def test_json_bytes_do_not_depend_on_insertion_order(value: dict[str, int]) -> None:
    reversed_ = dict(reversed(list(value.items())))
    assert Json().dumps(value) == Json().dumps(reversed_)


def test_json_is_compact_and_sorted() -> None:
    assert Json().dumps({"b": [1, 2], "a": "é"}) == b'{"a":"\\u00e9","b":[1,2]}'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1j}, object()])
def test_json_refuses_what_it_cannot_encode_exactly(value: object) -> None:
    with pytest.raises(EncodeError, match="Json cannot encode"):
        Json().dumps(value)


@pytest.mark.parametrize("data", [b"", b"{", b"\xff", b"[1,]", b"NaN-ish"])
def test_json_bad_bytes(data: bytes) -> None:
    with pytest.raises(DecodeError, match="not JSON"):
        Json().loads(data)


@given(st.binary())
def test_bytes_round_trip(data: bytes) -> None:
    assert Bytes().loads(Bytes().dumps(data)) == data
    assert Bytes().dumps(bytearray(data)) == data


def test_bytes_refuses_text() -> None:
    with pytest.raises(EncodeError, match="Bytes cannot encode str"):
        Bytes().dumps("text")


@given(json_values | st.tuples(st.integers(), st.binary()))
def test_pickle_round_trip_with_protocol_5(value: Any) -> None:
    data = Pickle().dumps(value)
    assert data[:2] == b"\x80\x05"
    assert Pickle().loads(data) == value


@given(st.binary(max_size=32))
def test_pickle_garbage_is_decode_error(data: bytes) -> None:
    # Short byte strings are sometimes valid pickles (b"N." is None): only the error type
    # is the property.
    with contextlib.suppress(DecodeError):
        Pickle().loads(b"\x80\x05" + data)


def test_pickle_refuses_unpicklable() -> None:
    with pytest.raises(EncodeError, match="Pickle cannot encode"):
        Pickle().dumps(lambda: None)


@given(clicks)
def test_avro_round_trip(click: dict[str, Any]) -> None:
    serde = AvroSerde(SCHEMA)
    assert serde.loads(serde.dumps(click)) == click


def test_avro_errors() -> None:
    serde = AvroSerde(SCHEMA)
    data = serde.dumps({"user": "u", "count": 1, "tags": []})
    with pytest.raises(DecodeError, match="trailing"):
        serde.loads(data + b"\x00")
    with pytest.raises(DecodeError, match="not Avro"):
        serde.loads(data[:-2])
    with pytest.raises(EncodeError, match="AvroSerde cannot encode"):
        serde.dumps({"user": 3})
    with pytest.raises(PipelineError, match="bad Avro schema"):
        AvroSerde({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]})


@given(st.binary(max_size=40))
def test_avro_garbage_is_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        AvroSerde(SCHEMA).loads(data)


def test_avro_serde_survives_pickling() -> None:
    copy = pickle.loads(pickle.dumps(AvroSerde(SCHEMA)))
    click = {"user": "u", "count": -5, "tags": ["a"]}
    assert copy.loads(AvroSerde(SCHEMA).dumps(click)) == click
