"""Frames on internal topics: round trips, size bounds, bad frames, per-item records."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.meta import Meta
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation
from framework.wire.frames import (
    FRAME_BYTES,
    FRAME_HEADER,
    FRAME_HEADERS,
    FRAME_ITEMS,
    FrameBuilder,
    FrameItem,
    decode_frame,
    read_items,
)

U64 = (1 << 64) - 1


def items(n: int, keyed: bool, size: int = 3) -> list[FrameItem]:
    out: list[FrameItem] = []
    for i in range(n):
        meta = Meta(GlobalTime(100 + i % 3, 7, i), (i % 4, 1), (i * 0x9E3779B97F4A7C15) & U64)
        if i % 5 == 0:
            meta = meta.as_tombstone()
        word = f"w{i % 7}" * size
        payload = Keyed(word, key_hash(word), [word, i]) if keyed else (word, i)
        out.append((meta, (i * 31 + 1) & U64 | 1, payload))
    return out


def frames_of(
    batch: list[FrameItem], keyed: bool, max_bytes: int = FRAME_BYTES, max_items: int = FRAME_ITEMS
) -> list[bytes]:
    builder = FrameBuilder(keyed)
    for meta, ack, payload in batch:
        builder.add(meta, ack, payload)
    assert len(builder) == len(batch)
    return builder.frames(max_bytes, max_items)


def decode_all(frames: list[bytes]) -> list[FrameItem]:
    return [item for data in frames for item in read_items(FRAME_HEADERS, data, "t[0]@1")]


@pytest.mark.parametrize("keyed", [True, False])
def test_items_round_trip_in_order_with_their_types(keyed: bool) -> None:
    batch = items(200, keyed)
    (frame,) = frames_of(batch, keyed)
    back = decode_all([frame])
    assert back == batch
    meta, _, payload = back[0]
    assert type(meta) is Meta and type(meta.gt) is GlobalTime
    assert isinstance(payload, Keyed) is keyed


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 400),
    size=st.integers(1, 60),
    max_bytes=st.integers(200, 20_000),
    max_items=st.integers(1, 500),
)
def test_frames_stay_under_the_limits_and_keep_every_item(
    n: int, size: int, max_bytes: int, max_items: int
) -> None:
    batch = items(n, keyed=True, size=size)
    frames = frames_of(batch, keyed=True, max_bytes=max_bytes, max_items=max_items)
    assert decode_all(frames) == batch
    for data in frames:  # over the byte limit only as a frame of one item
        count = len(pickle.loads(data)[1])
        assert (len(data) <= max_bytes or count == 1) and count <= max_items


def test_an_item_larger_than_the_limit_travels_alone() -> None:
    big = (Meta(GlobalTime(1, 2, 3)), 5, "x" * 5_000)
    small = (Meta(GlobalTime(1, 2, 4)), 7, "y")
    frames = frames_of([small, big, small], keyed=False, max_bytes=1_000)
    assert [len(pickle.loads(f)[1]) for f in frames] == [1, 1, 1]
    assert decode_all(frames) == [small, big, small]


def test_a_large_batch_fills_frames_up_to_the_item_limit() -> None:
    frames = frames_of(items(10_000, keyed=True), keyed=True)
    assert [len(pickle.loads(f)[1]) for f in frames] == [FRAME_ITEMS, FRAME_ITEMS, 1808]


def test_an_empty_builder_writes_no_frame() -> None:
    assert FrameBuilder(keyed=False).frames() == []


def test_unknown_versions_and_garbage_are_protocol_violations() -> None:
    (frame,) = frames_of(items(3, keyed=False), keyed=False)
    with pytest.raises(ProtocolViolation, match=r"t\[0\]@1: frame version b'2' is unknown"):
        decode_frame(b"2", frame, "t[0]@1")
    with pytest.raises(ProtocolViolation, match="upgrade every reader"):
        read_items([(FRAME_HEADER, b"0")], frame, "t[0]@1")
    bad = [
        b"not a pickle",
        pickle.dumps((False, [])),  # empty
        pickle.dumps((True, [(1, 2, 3)])),  # short rows
        pickle.dumps(("yes", [])),
        pickle.dumps([1, 2, 3]),
        frame[:-3],
    ]
    for value in bad:
        with pytest.raises(ProtocolViolation, match="malformed frame"):
            decode_frame(b"1", value, "t[0]@1")


def test_records_without_a_frame_header_or_value_are_refused() -> None:
    (frame,) = frames_of(items(1, keyed=False), keyed=False)
    for headers, value in (
        (None, frame),
        ([("other", b"1")], frame),
        (FRAME_HEADERS, None),
    ):
        with pytest.raises(ProtocolViolation, match=r"no fp\.frame header or no value"):
            read_items(headers, value, "t[0]@1")


def test_header_values_may_come_as_text() -> None:
    (frame,) = frames_of(items(2, keyed=False), keyed=False)
    assert read_items([(FRAME_HEADER, "1")], frame, "here") == items(2, keyed=False)
