"""Ack batches: round trips, garbage is a DecodeError, every shard hears every batch."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.core.acker.sharded import AckerShard, shard_of
from framework.core.messages import Ack, Heartbeat, NodeTime
from framework.errors import DecodeError
from framework.wire.acks import shard_batches
from framework.wire.avro import decode_ack_batch, encode_ack_batch

i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u64 = st.integers(0, (1 << 64) - 1)
acks = st.builds(Ack, st.text(max_size=8), i64, u64)
beats = st.builds(Heartbeat, i64, i64)


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


def test_one_batch_per_shard_acks_by_slot_heartbeats_to_all() -> None:
    sent = [Ack("s", 5, 11), Ack("s", 3, 12), Ack("s", 2, 13)]
    records = shard_batches(7, 1, sent, 3, [Heartbeat(1, 4)])
    assert [shard for shard, _ in records] == [0, 1, 2]
    decoded = {shard: decode_ack_batch(value) for shard, value in records}
    for shard in range(3):
        mine = [a for a in sent if shard_of(a.slot, 3) == shard]
        assert decoded[shard] == [*mine, Heartbeat(1, 4), NodeTime(7, 1)]


@given(
    st.integers(1, 3),
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 1000)), max_size=12),
)
def test_shards_fed_from_batches_report_like_direct_delivery(
    shards: int, pairs: list[tuple[int, int]]
) -> None:
    segments: dict[str, tuple[str, ...]] = {"s": ()}
    fronts = range(3)
    direct = [AckerShard(i, shards, segments, fronts) for i in range(shards)]
    via_kafka = [AckerShard(i, shards, segments, fronts) for i in range(shards)]
    sent = [Ack("s", slot, value) for slot, value in pairs]
    reports_direct = []
    for ack in sent:
        reports_direct += direct[shard_of(ack.slot, shards)].receive(1, ack)
    for shard in range(shards):
        reports_direct += direct[shard].receive(1, NodeTime(1, 1))
    reports_kafka = [
        n
        for shard, value in shard_batches(1, 1, sent, shards)
        for m in decode_ack_batch(value)
        for n in via_kafka[shard].receive(1, m)
    ]
    assert sorted(map(repr, reports_kafka)) == sorted(map(repr, reports_direct))


def test_no_acks_still_closes_every_shard() -> None:
    records = shard_batches(2, 9, [], 2)
    assert [decode_ack_batch(v) for _, v in records] == [[NodeTime(2, 9)], [NodeTime(2, 9)]]
