"""Codec: round trips, DecodeError for every malformed input, one evolution case."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.messages import (
    Ack,
    BundleHeader,
    Heartbeat,
    MinTimeNotification,
    NodeTime,
    PartitionOffset,
    SnapshotManifest,
)
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import DecodeError, EncodeError
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
manifests = st.builds(
    SnapshotManifest,
    i64,
    i64,
    st.lists(st.builds(PartitionOffset, text, i32, i64), max_size=3).map(tuple),
    st.lists(text, max_size=3).map(tuple),
    st.none() | gts,
    i64,
)

# (encode, decode, strategy of values)
PAIRS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any], st.SearchStrategy[Any]]] = {
    "global_time": (codec.encode_global_time, codec.decode_global_time, gts),
    "meta": (codec.encode_meta, codec.decode_meta, metas),
    "ack": (codec.encode_ack, codec.decode_ack, acks),
    "heartbeat": (codec.encode_heartbeat, codec.decode_heartbeat, beats),
    "node_time": (codec.encode_node_time, codec.decode_node_time, node_times),
    "acker_input": (
        codec.encode_acker_input,
        codec.decode_acker_input,
        acks | beats | node_times,
    ),
    "min_time": (codec.encode_min_time, codec.decode_min_time, notes),
    "bundle_header": (codec.encode_bundle_header, codec.decode_bundle_header, headers),
    "snapshot_manifest": (
        codec.encode_snapshot_manifest,
        codec.decode_snapshot_manifest,
        manifests,
    ),
}
DECODERS = [pair[1] for pair in PAIRS.values()] + [codec.decode_envelope]


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


@settings(max_examples=100, deadline=None)
@given(meta=metas, payload=st.binary(max_size=40))
def test_envelope_round_trip(meta: Meta, payload: bytes) -> None:
    encoded = codec.encode_envelope(meta, payload)
    assert codec.decode_envelope(encoded) == (meta, payload)
    assert codec.decode_envelope(bytearray(encoded)) == (meta, payload)


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
        (codec.decode_heartbeat, b"\x80" * 11),  # a varint that never ends
        (codec.decode_meta, b"\x02\x02\x02\xfe\xff\xff\xff\x0f"),  # 2**31 ids, 8 bytes
        (codec.decode_meta, b"\x02\x02\x02\x01\x80\x80\x80\x80\x08"),  # negative block
        (codec.decode_ack, b"\x7f"),  # a string longer than the input
        (codec.decode_ack, b"\x04\xff\xfe\x02\x02"),  # a string that is not UTF-8
        (codec.decode_min_time, b"\x06"),  # union branch 3 of 2
        (codec.decode_acker_input, b"\x08"),  # union branch 4 of 3
        (codec.decode_envelope, b"\x02\x02\x02\x00\x00\x00\x7f"),  # short payload
    ],
)
def test_crafted_inputs(decode: Callable[[bytes], Any], data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


def test_unsigned_and_range_checks_on_encode() -> None:
    with pytest.raises(EncodeError, match="unsigned"):
        codec.encode_ack(Ack("s", 1, -1))
    with pytest.raises(EncodeError, match="unsigned"):
        codec.encode_meta(Meta(GlobalTime(1, 1, 1), (), 1 << 64))
    with pytest.raises(EncodeError, match="cannot encode"):
        codec.encode_heartbeat(Heartbeat(1, 1 << 63))
    with pytest.raises(EncodeError, match="cannot encode"):
        codec.encode_ack(Ack(None, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="not an acker input"):
        codec.encode_acker_input("ack")  # type: ignore[arg-type]


HEARTBEAT_V2 = {
    "type": "record",
    "name": "Heartbeat",
    "namespace": "flamepipe",
    "fields": [
        {"name": "front", "type": "long"},
        {"name": "slot", "type": "long"},
        {"name": "wall_ms", "type": "long", "default": -1},
    ],
}


def test_schema_evolution_v2_reader_reads_v1_bytes() -> None:
    v1 = codec.encode_heartbeat(Heartbeat(7, 123))
    assert codec.decode_with("heartbeat", v1, HEARTBEAT_V2) == {
        "front": 7,
        "slot": 123,
        "wall_ms": -1,
    }


def test_incompatible_reader_schema_is_a_decode_error() -> None:
    retyped = dict(HEARTBEAT_V2, fields=[{"name": "front", "type": "string"}])
    with pytest.raises(DecodeError):
        codec.decode_with("heartbeat", codec.encode_heartbeat(Heartbeat(1, 2)), retyped)
    with pytest.raises(ValueError, match="bad reader schema"):
        codec.decode_with("heartbeat", b"", {"type": "nonsense"})


def test_schemas_load_as_package_data() -> None:
    assert set(codec.SCHEMA_NAMES) >= {"meta", "envelope", "min_time", "snapshot_manifest"}
    assert codec.schema("meta")["name"] == "flamepipe.Meta"
    node_times = codec.schema("min_time")["fields"][2]
    assert node_times["name"] == "node_times"
