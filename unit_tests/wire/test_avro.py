"""Avro formats: round trips, DecodeError for every malformed input, one evolution case."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.messages import Ack, BundleHeader, Heartbeat, MinTimeNotification, NodeTime
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import ConfigError, DecodeError, EncodeError
from framework.wire import avro as codec

i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u64 = st.integers(0, (1 << 64) - 1)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
text = st.text(max_size=12)
gts = st.builds(GlobalTime, i64, i64, i64)
metas = st.builds(Meta, gts, st.lists(i64, max_size=4).map(tuple), u64, st.booleans())
acks = st.builds(Ack, text, i64, u64)
beats = st.builds(Heartbeat, i64, i64)
node_times = st.builds(NodeTime, i64, i64)
notes = st.builds(
    MinTimeNotification,
    st.none() | text,
    i64,
    st.lists(node_times, max_size=3).map(tuple),
    st.booleans(),
    i32,
)
headers = st.builds(BundleHeader, i64, gts, i64)
batches = st.tuples(i64, i64, st.lists(acks, max_size=3), st.lists(beats, max_size=3))


def _encode_batch(batch: tuple[int, int, list[Ack], list[Heartbeat]]) -> bytes:
    return codec.encode_ack_batch(*batch)


def _decode_batch(data: bytes) -> tuple[int, int, list[Ack], list[Heartbeat]]:
    *messages, closing = codec.decode_ack_batch(data)
    assert isinstance(closing, NodeTime)
    acked = [m for m in messages if isinstance(m, Ack)]
    beats = [m for m in messages if isinstance(m, Heartbeat)]
    return closing.node, closing.time, acked, beats


# (encode, decode, strategy of values)
PAIRS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any], st.SearchStrategy[Any]]] = {
    "meta": (codec.encode_meta, codec.decode_meta, metas),
    "min_time": (codec.encode_min_time, codec.decode_min_time, notes),
    "bundle_header": (codec.encode_bundle_header, codec.decode_bundle_header, headers),
    "ack_batch": (_encode_batch, _decode_batch, batches),
}
DECODERS = [codec.decode_meta, codec.decode_min_time, codec.decode_bundle_header]
DECODERS += [codec.decode_ack_batch]


@settings(max_examples=60, deadline=None)
@pytest.mark.parametrize("name", sorted(PAIRS))
@given(data=st.data())
def test_round_trip_and_truncation(name: str, data: st.DataObject) -> None:
    encode, decode, values = PAIRS[name]
    value = data.draw(values)
    encoded = encode(value)
    assert decode(encoded) == value
    for cut in range(len(encoded)):  # every strict prefix is missing bytes
        with pytest.raises(DecodeError):
            decode(encoded[:cut])
    with pytest.raises(DecodeError):
        decode(encoded + b"\x00")


@settings(max_examples=400, deadline=None)
@given(garbage=st.binary(max_size=64), index=st.integers(0, len(DECODERS) - 1))
def test_garbage_decodes_or_raises_decode_error(garbage: bytes, index: int) -> None:
    with contextlib.suppress(DecodeError):
        DECODERS[index](garbage)


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("bad", ["text", None, 12, object(), [1, 2]])
def test_wrong_input_types_raise_decode_error(decode: Callable[[Any], Any], bad: object) -> None:
    with pytest.raises(DecodeError):
        decode(bad)


@pytest.mark.parametrize(
    ("decode", "data"),
    [
        (codec.decode_bundle_header, b"\x80" * 11),  # a varint that never ends
        (codec.decode_meta, b"\x02\x02\x02\xfe\xff\xff\xff\x0f"),  # 2**31 ids, 8 bytes
        (codec.decode_meta, b"\x02\x02\x02\x01\x80\x80\x80\x80\x08"),  # negative block
        (codec.decode_ack_batch, b"\x02\x02\x02\x7f"),  # a string longer than the input
        (codec.decode_ack_batch, b"\x02\x02\x02\x04\xff\xfe\x02\x02\x00\x00"),  # not UTF-8
        (codec.decode_min_time, b"\x06"),  # union branch 3 of 2
    ],
)
def test_crafted_inputs(decode: Callable[[bytes], Any], data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


def test_unsigned_and_range_checks_on_encode() -> None:
    with pytest.raises(EncodeError, match="unsigned"):
        codec.encode_ack_batch(1, 1, [Ack("s", 1, -1)], [])
    with pytest.raises(EncodeError, match="unsigned"):
        codec.encode_meta(Meta(GlobalTime(1, 1, 1), (), 1 << 64))
    with pytest.raises(EncodeError, match="cannot encode"):
        codec.encode_ack_batch(1, 1, [], [Heartbeat(1, 1 << 63)])
    with pytest.raises(EncodeError, match="cannot encode"):
        codec.encode_ack_batch(1, 1, [Ack(None, 1, 1)], [])  # type: ignore[arg-type]


HEADER_V2 = {
    "type": "record",
    "name": "BundleHeader",
    "namespace": "flamepipe",
    "fields": [
        {"name": "seq", "type": "long"},
        {
            "name": "gt_last",
            "type": {
                "type": "record",
                "name": "GlobalTime",
                "fields": [
                    {"name": "slot", "type": "long"},
                    {"name": "front", "type": "long"},
                    {"name": "offset", "type": "long"},
                ],
            },
        },
        {"name": "item_count", "type": "long"},
        {"name": "wall_ms", "type": "long", "default": -1},
    ],
}


def test_schema_evolution_v2_reader_reads_v1_bytes() -> None:
    v1 = codec.encode_bundle_header(BundleHeader(7, GlobalTime(1, 2, 3), 5))
    assert codec.decode_with("bundle_header", v1, HEADER_V2) == {
        "seq": 7,
        "gt_last": {"slot": 1, "front": 2, "offset": 3},
        "item_count": 5,
        "wall_ms": -1,
    }


def test_incompatible_reader_schema_is_a_decode_error() -> None:
    retyped = dict(HEADER_V2, fields=[{"name": "seq", "type": "string"}])
    v1 = codec.encode_bundle_header(BundleHeader(7, GlobalTime(1, 2, 3), 5))
    with pytest.raises(DecodeError):
        codec.decode_with("bundle_header", v1, retyped)
    with pytest.raises(ConfigError, match="bad reader schema"):
        codec.decode_with("bundle_header", b"", {"type": "nonsense"})


def test_schemas_load_as_package_data() -> None:
    assert set(codec.SCHEMA_NAMES) >= {"meta", "min_time", "bundle_header", "ack_batch"}
    assert codec.schema("meta")["name"] == "flamepipe.Meta"
    node_times = codec.schema("min_time")["fields"][2]
    assert node_times["name"] == "node_times"
