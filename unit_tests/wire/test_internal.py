"""Wire formats: item headers and ack batches round trip, garbage is a DecodeError, ack
batches group a router's output per shard in order, dead letters keep the original bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.core.acker.sharded import AckerShard, ShardRouter
from framework.core.messages import Ack, AckerInput, Heartbeat, NodeTime
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import DecodeError, EncodeError
from framework.wire.internal import (
    DLQ_HEADERS,
    ITEM_HEADER,
    HeaderValue,
    ack_batch_records,
    dead_letter,
    decode_ack_batch,
    decode_item_header,
    encode_ack_batch,
    encode_item_header,
    read_dead_letter,
)

i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u64 = st.integers(0, (1 << 64) - 1)
gts = st.builds(GlobalTime, i64, i64, i64)
metas = st.builds(Meta, gts, st.lists(i64, max_size=4).map(tuple), u64, st.booleans())
acks = st.builds(Ack, st.text(max_size=8), i64, u64)
beats = st.builds(Heartbeat, i64, i64)


def test_item_header_name() -> None:
    assert ITEM_HEADER == "fp.item"


@given(metas, u64)
def test_item_header_round_trip(meta: Meta, ack: int) -> None:
    assert decode_item_header(encode_item_header(meta, ack)) == (meta, ack)


@given(metas, u64)
def test_item_header_decodes_from_any_buffer(meta: Meta, ack: int) -> None:
    data = encode_item_header(meta, ack)
    assert decode_item_header(memoryview(bytearray(data))) == (meta, ack)


@given(st.binary(max_size=64))
def test_item_header_garbage_is_decode_error(data: bytes) -> None:
    try:
        meta, ack = decode_item_header(data)
    except DecodeError:
        return
    # Some short byte strings are valid Avro (not always in canonical form, e.g. a boolean
    # byte 0x02); what they decode to must then survive a round trip.
    assert decode_item_header(encode_item_header(meta, ack)) == (meta, ack)


@pytest.mark.parametrize("ack", [-1, 1 << 64])
def test_item_header_rejects_out_of_range_ack(ack: int) -> None:
    with pytest.raises(EncodeError, match="unsigned 64-bit"):
        encode_item_header(Meta(GlobalTime(0, 0, 0)), ack)


def test_item_header_rejects_trailing_bytes() -> None:
    data = encode_item_header(Meta(GlobalTime(1, 2, 3)), 7)
    with pytest.raises(DecodeError, match="trailing"):
        decode_item_header(data + b"\x00")


@given(i64, i64, st.lists(acks, max_size=5), st.lists(beats, max_size=5))
def test_ack_batch_round_trip(
    node: int, time: int, ack_list: list[Ack], beat_list: list[Heartbeat]
) -> None:
    decoded = decode_ack_batch(encode_ack_batch(node, time, ack_list, beat_list))
    assert decoded == [*ack_list, *beat_list, NodeTime(node, time)]


@given(st.binary(max_size=64))
def test_ack_batch_garbage_is_decode_error(data: bytes) -> None:
    try:
        decoded = decode_ack_batch(data)
    except DecodeError:
        return
    *messages, tick = decoded
    assert isinstance(tick, NodeTime)
    ack_list = [m for m in messages if isinstance(m, Ack)]
    beat_list = [m for m in messages if isinstance(m, Heartbeat)]
    # Valid but possibly non-canonical Avro (e.g. a padded varint): the meaning survives.
    assert decode_ack_batch(encode_ack_batch(tick.node, tick.time, ack_list, beat_list)) == decoded


def test_ack_batch_truncated_is_decode_error() -> None:
    data = encode_ack_batch(3, 4, [Ack("s", 1, 2)], [Heartbeat(5, 6)])
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            decode_ack_batch(data[:cut])


# -- ack_batch_records --------------------------------------------------------------------


def _by_shard(output: list[tuple[int, AckerInput]]) -> dict[int, list[AckerInput]]:
    split: dict[int, list[AckerInput]] = {}
    for shard, message in output:
        split.setdefault(shard, []).append(message)
    return split


def test_one_record_per_shard_in_shard_order() -> None:
    router = ShardRouter(node=7, shards=3)
    router.ack("s", 5, 11)  # shard 2
    router.ack("s", 3, 12)  # shard 0
    router.heartbeat(front=1, slot=4)
    router.ack("s", 2, 13)  # shard 2
    records = ack_batch_records(router.end_batch())
    assert [shard for shard, _ in records] == [0, 1, 2]
    decoded = {shard: decode_ack_batch(value) for shard, value in records}
    assert decoded[0] == [Ack("s", 3, 12), Heartbeat(1, 4), NodeTime(7, 1)]
    assert decoded[1] == [Heartbeat(1, 4), NodeTime(7, 1)]
    assert decoded[2] == [Ack("s", 5, 11), Ack("s", 2, 13), Heartbeat(1, 4), NodeTime(7, 1)]


batch_ops = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.integers(0, 40), st.integers(1, 1000)),
        st.tuples(st.just("beat"), st.integers(0, 2), st.integers(0, 40)),
    ),
    max_size=12,
)


@given(st.integers(1, 4), st.lists(batch_ops, min_size=1, max_size=4))
def test_records_carry_every_message_in_order(
    shards: int, batches: list[list[tuple[str, int, int]]]
) -> None:
    router = ShardRouter(node=2, shards=shards)
    output: list[tuple[int, AckerInput]] = []
    for batch in batches:
        for kind, a, b in batch:
            if kind == "ack":
                router.ack("s", a, b)
            else:
                router.heartbeat(a, b)
        output.extend(router.end_batch())
    records = ack_batch_records(output)
    # One record per batch and shard, in the order their node times were sent.
    assert len(records) == len(batches) * shards
    assert [shard for shard, _ in records] == list(range(shards)) * len(batches)
    received: dict[int, list[AckerInput]] = {}
    for shard, value in records:
        received.setdefault(shard, []).extend(decode_ack_batch(value))
    sent = _by_shard(output)
    for shard in range(shards):
        # Per batch: the same acks in order, the same heartbeats in order, then the tick.
        assert [m for m in received[shard] if isinstance(m, Ack)] == [
            m for m in sent[shard] if isinstance(m, Ack)
        ]
        assert [m for m in received[shard] if not isinstance(m, Ack)] == [
            m for m in sent[shard] if not isinstance(m, Ack)
        ]


@given(st.integers(1, 3), batch_ops)
def test_shards_fed_from_records_report_like_direct_delivery(
    shards: int, batch: list[tuple[str, int, int]]
) -> None:
    segments = {"s": ()}
    fronts = range(3)
    direct = [AckerShard(i, shards, segments, fronts) for i in range(shards)]
    via_kafka = [AckerShard(i, shards, segments, fronts) for i in range(shards)]
    router = ShardRouter(node=1, shards=shards)
    for kind, a, b in batch:
        if kind == "ack":
            router.ack("s", a, b)
        else:
            router.heartbeat(a, b)
    output = router.end_batch()
    reports_direct = [n for s, m in output for n in direct[s].receive(1, m)]
    reports_kafka = [
        n
        for s, value in ack_batch_records(output)
        for m in decode_ack_batch(value)
        for n in via_kafka[s].receive(1, m)
    ]
    assert reports_kafka == reports_direct


def test_unclosed_batch_is_rejected() -> None:
    router = ShardRouter(node=1, shards=2)
    output = router.end_batch()
    output.append((1, Ack("s", 1, 5)))
    with pytest.raises(EncodeError, match=r"shards \[1\]"):
        ack_batch_records(output)


def test_empty_output_has_no_records() -> None:
    assert ack_batch_records([]) == []


# -- dead letters -------------------------------------------------------------------------


@dataclass
class FakeMessage:
    k: bytes | None
    v: bytes | None
    h: Mapping[str, HeaderValue] | list[tuple[str, HeaderValue]] | None

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def headers(self) -> Mapping[str, HeaderValue] | list[tuple[str, HeaderValue]] | None:
        return self.h


def test_dead_letter_keeps_original_bytes_and_names_its_origin() -> None:
    value = b"\xff\x00not utf-8"
    key, out, headers = dead_letter(b"k", value, "bad", "s1", "in", 3, 42, "Trace\nError: x")
    assert key == b"k"
    assert out is value
    assert [name for name, _ in headers] == list(DLQ_HEADERS)
    assert dict(headers) == {
        "fp.dlq.reason": b"bad",
        "fp.dlq.stage": b"s1",
        "fp.dlq.topic": b"in",
        "fp.dlq.partition": b"3",
        "fp.dlq.offset": b"42",
        "fp.dlq.traceback": b"Trace\nError: x",
    }


letters = st.tuples(
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=20),
    st.text(max_size=30),
    st.text(max_size=10),
    st.integers(0, 1000),
    i64,
    st.text(max_size=50),
)


@given(letters)
def test_dead_letter_round_trip(
    letter: tuple[bytes | None, bytes | None, str, str, int, int, str],
) -> None:
    key, value, reason, stage, partition, offset, trace = letter
    k, v, headers = dead_letter(key, value, reason, stage, "topic.a", partition, offset, trace)
    read = read_dead_letter(FakeMessage(k, v, list(headers)))
    assert (read.key, read.value, read.reason, read.stage) == (key, value, reason, stage)
    assert (read.topic, read.partition, read.offset) == ("topic.a", partition, offset)
    assert read.traceback == trace


def test_long_reason_and_traceback_are_clipped_keeping_the_error() -> None:
    trace = "frame\n" * 5000 + "ValueError: the cause"
    _, _, headers = dead_letter(None, b"v", "r" * 5000, "s", "t", 0, 0, trace)
    texts = {name: raw.decode() for name, raw in headers}
    assert len(texts["fp.dlq.reason"]) == 1000
    assert len(texts["fp.dlq.traceback"]) == 8000
    assert texts["fp.dlq.traceback"].endswith("ValueError: the cause")
    assert texts["fp.dlq.traceback"].startswith("...\n")


def test_read_dead_letter_rejects_other_records() -> None:
    with pytest.raises(DecodeError, match=r"fp\.dlq\.reason"):
        read_dead_letter(FakeMessage(None, b"v", None))
    _, _, headers = dead_letter(None, b"v", "r", "s", "t", 0, 0, "")
    bad_offset = [(n, b"x" if n == "fp.dlq.offset" else v) for n, v in headers]
    with pytest.raises(DecodeError, match=r"fp\.dlq\.offset"):
        read_dead_letter(FakeMessage(None, b"v", list(bad_offset)))
    bad_text = [(n, b"\xff" if n == "fp.dlq.reason" else v) for n, v in headers]
    with pytest.raises(DecodeError, match="UTF-8"):
        read_dead_letter(FakeMessage(None, b"v", list(bad_text)))


def test_read_dead_letter_takes_header_mappings_and_text() -> None:
    _, _, headers = dead_letter(b"k", b"v", "why", "s", "t", 1, 2, "tb")
    as_text = {name: value.decode() for name, value in headers}
    letter = read_dead_letter(FakeMessage(b"k", b"v", as_text))
    assert (letter.reason, letter.partition, letter.offset) == ("why", 1, 2)
