"""The output topic's wire format and the bundle rules a consumer checks."""

from __future__ import annotations

import pytest

from framework.core.barrier import Bundle
from framework.core.messages import BundleHeader
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import DecodeError, ProtocolViolation
from framework.wire import auth
from framework.wire.avro import decode_meta, encode_bundle_header, encode_meta
from framework.wire.bundles import (
    META_HEADER,
    BundleVerifier,
    bundle_records,
    bundles_topic,
    header_value,
    item_records,
    output_partition,
    read_bundle_header,
    signed_item,
    signed_items,
)


def meta(slot: int, offset: int = 0) -> Meta:
    return Meta(GlobalTime(slot, 5, offset))


def encode(payload: object) -> tuple[bytes | None, bytes]:
    text = str(payload)
    return (text.encode() if text.startswith("k") else None), text.encode()


def signed(m: Meta, payload: object) -> Record:
    """An output item as a last stage sends it to the barrier."""
    return Record(m, signed_item(m, *encode(payload), "out"))


def test_a_bundle_is_items_on_the_output_and_a_header_per_partition_on_its_bundle_topic() -> None:
    items_in = (signed(meta(8), "a"), signed(meta(9), "kb"))
    records = bundle_records(Bundle(3, GlobalTime.slot_end(9), items_in), "out", 3)
    items, headers = records[:2], records[2:]
    # The output topic holds only the user's records, keyed as the user keyed them.
    assert [(r.topic, r.key, r.value) for r in items] == [
        ("out", None, b"a"),
        ("out", b"kb", b"kb"),
    ]
    assert items[0].partition == output_partition(None, meta(8), 3) == 5 % 3
    assert [decode_meta(dict(r.headers)[META_HEADER]) for r in items] == [meta(8), meta(9)]
    assert [(r.topic, r.partition, r.key) for r in headers] == [
        ("out.bundles", p, None) for p in range(3)
    ]
    counts = [0, 0, 0]
    for record in items:
        assert record.partition is not None
        counts[record.partition] += 1
    assert [read_bundle_header(r.value) for r in headers] == [
        BundleHeader(3, GlobalTime.slot_end(9), count) for count in counts
    ]
    assert bundles_topic("out") == "out.bundles"


def test_a_stage_signed_item_is_written_as_it_came() -> None:
    """The last stage makes the output record (`signed_item`); the barrier moves it as it
    is: a tag that verifies on the output topic only. Anything else is refused."""
    items = [signed(meta(8, 1), "a"), signed(meta(9, 2), "kb")]
    new = bundle_records(Bundle(3, GlobalTime.slot_end(9), tuple(items)), "out", 3)
    assert [(r.key, r.value) for r in new[:2]] == [(None, b"a"), (b"kb", b"kb")]
    for record in new[:2]:
        # Already signed: produced as it is, and only where it was signed for.
        assert auth.signed(record.topic, record.key, record.value, record.headers) == (
            record.headers
        )
        assert auth.current().verify("out", record.key, record.value, record.headers)
        assert not auth.current().verify("out2", record.key, record.value, record.headers)
    counts = [0, 0, 0]
    assert item_records(items, "out", counts) == new[:2] and sum(counts) == 2
    unsigned = Record(meta(8), encode("a"))
    with pytest.raises(ProtocolViolation, match="not a signed output record"):
        item_records([unsigned], "out", [0])


def test_a_tombstone_carries_its_items_signed_record_so_the_two_cancel() -> None:
    item = meta(8, 1)
    tombstone = item.as_tombstone()
    assert signed_item(tombstone, b"k", b"v", "out") == signed_item(item, b"k", b"v", "out")
    assert decode_meta(signed_item(tombstone, b"k", b"v", "out")[2]) == item


def test_items_signed_in_bulk_are_the_items_signed_one_by_one() -> None:
    metas = [meta(8, 1), meta(8, 1).as_tombstone(), Meta(GlobalTime(9, 7, 2), (3, 0), 11), meta(2)]
    keys = [b"k", b"k", None, b""]
    values = [b"v", b"v", b"w", b""]
    one_by_one = [signed_item(*item, "out") for item in zip(metas, keys, values, strict=True)]
    assert signed_items(metas, keys, values, "out") == one_by_one
    assert signed_items([], [], [], "out") == []


@pytest.mark.parametrize(
    "payload", ["a", ["k", b"v"], (b"k", "v"), (b"k", b"v"), (b"k", b"v", b"x")]
)
def test_a_payload_that_is_no_output_record_is_refused(payload: object) -> None:
    bundle = Bundle(0, GlobalTime.slot_end(9), (Record(meta(8), payload),))
    with pytest.raises(ProtocolViolation, match="not a signed output record"):
        bundle_records(bundle, "out", 1)


def test_headers_are_values_and_header_values_are_read_from_lists_and_dicts() -> None:
    header = BundleHeader(1, GlobalTime(2, 3, 4), 0)
    assert read_bundle_header(encode_bundle_header(header)) == header
    with pytest.raises(DecodeError):
        read_bundle_header(None)
    assert header_value([("a", None)], "a") == b""
    assert header_value({"a": b"x"}, "a") == b"x"
    assert header_value(None, "a") is None


def item(slot: int, offset: int = 0, *, tombstone: bool = False) -> list[tuple[str, bytes]]:
    return [(META_HEADER, encode_meta(Meta(GlobalTime(slot, 5, offset), (), 0, tombstone)))]


def close(verifier: BundleVerifier, seq: int, last: int, count: int) -> int | None:
    return verifier.header(BundleHeader(seq, GlobalTime.slot_end(last), count), 99)


def test_consecutive_bundles_pass() -> None:
    verifier = BundleVerifier("out[0]")
    verifier.item(item(1), 0)
    verifier.item(item(2), 1)
    close(verifier, 0, 2, 2)
    close(verifier, 1, 3, 0)  # an empty bundle still moves gt_last
    verifier.item(item(4), 4)
    verifier.item(item(4), 5)  # the same meta twice (a repaired output) is allowed
    close(verifier, 2, 4, 2)
    assert (verifier.next_seq, verifier.gt_last, verifier.pending) == (3, GlobalTime.slot_end(4), 0)


def test_resuming_takes_any_first_seq_when_told_so() -> None:
    verifier = BundleVerifier("out[0]", next_seq=None)
    close(verifier, 7, 1, 0)
    with pytest.raises(ProtocolViolation, match="expected bundle 8"):
        close(verifier, 9, 2, 0)


@pytest.mark.parametrize(
    ("seq", "match"),
    [
        (2, "bundle 2: expected bundle 1 \\(gap\\)"),
        (0, "bundle 0: expected bundle 1 \\(duplicate\\)"),
    ],
)
def test_seq_must_be_consecutive(seq: int, match: str) -> None:
    verifier = BundleVerifier("out[0]")
    close(verifier, 0, 1, 0)
    with pytest.raises(ProtocolViolation, match=match):
        close(verifier, seq, 2, 0)


def test_gt_last_must_increase() -> None:
    verifier = BundleVerifier("out[0]", 4, GlobalTime.slot_end(3))
    with pytest.raises(ProtocolViolation, match=r"gt_last .* does not increase"):
        close(verifier, 4, 3, 0)


def test_items_must_come_after_the_previous_gt_last() -> None:
    verifier = BundleVerifier("out[2]", 4, GlobalTime.slot_end(3))
    with pytest.raises(ProtocolViolation, match=r"out\[2\]@7: item at .* not after .* duplicate"):
        verifier.item(item(3), 7)


def test_items_must_be_within_their_bundle() -> None:
    verifier = BundleVerifier("out[0]")
    verifier.item(item(5), 0)
    with pytest.raises(ProtocolViolation, match=r"item at .*slot=5.* is after gt_last"):
        close(verifier, 0, 4, 1)


def test_a_header_waits_for_its_items_and_takes_only_its_own() -> None:
    verifier = BundleVerifier("out[0]")
    verifier.item(item(1), 0)
    assert close(verifier, 0, 1, 2) is None  # one of two items so far: wait
    verifier.item(item(1, 1), 1)
    verifier.item(item(3), 2)  # the next bundle's, read before the header closing this one
    assert close(verifier, 0, 1, 2) == 2
    assert verifier.pending == 1
    assert close(verifier, 1, 3, 1) == 1


def test_an_item_missing_once_the_partition_was_read_to_its_end_is_lost() -> None:
    verifier = BundleVerifier("out[0]")
    verifier.item(item(1), 0)
    header = BundleHeader(0, GlobalTime.slot_end(1), 2)
    assert verifier.header(header, 5) is None
    with pytest.raises(ProtocolViolation, match=r"header counts 2 item\(s\), 1 arrived"):
        verifier.check_complete(header, 5)


def test_an_extra_item_breaks_the_next_bundle() -> None:
    verifier = BundleVerifier("out[0]")
    verifier.item(item(1), 0)
    verifier.item(item(1, 1), 1)  # one more than the header counts: a duplicate
    assert close(verifier, 0, 1, 1) == 1
    with pytest.raises(ProtocolViolation, match="not after the previous bundle's gt_last"):
        close(verifier, 1, 3, 1)


def test_items_of_a_bundle_may_come_in_any_order() -> None:
    verifier = BundleVerifier("out[0]")
    verifier.item(item(2, 1), 0)
    verifier.item(item(1, 0), 1)
    close(verifier, 0, 2, 2)
    assert (verifier.next_seq, verifier.pending) == (1, 0)


def test_no_tombstone_or_bare_record_leaves_the_barrier() -> None:
    verifier = BundleVerifier("out[0]")
    with pytest.raises(ProtocolViolation, match="a tombstone left the barrier"):
        verifier.item(item(1, tombstone=True), 0)
    with pytest.raises(ProtocolViolation, match=r"an output record without fp\.meta"):
        verifier.item([("other", b"")], 1)
    with pytest.raises(ProtocolViolation, match=r"unreadable fp\.meta header"):
        verifier.item([(META_HEADER, b"\xff")], 2)


def test_barrier_instances_own_every_nth_partition_and_head_only_those() -> None:
    from framework.wire.bundles import barrier_instance, header_records, owned_partitions

    assert [list(owned_partitions(5, 2, k)) for k in (0, 1)] == [[0, 2, 4], [1, 3]]
    key = b"k-word"
    assert barrier_instance(key, meta(1), 5, 2) == output_partition(key, meta(1), 5) % 2
    headers = header_records(4, GlobalTime.slot_end(9), [2, 0, 1, 0, 0], "out", range(0, 5, 2))
    assert [(h.topic, h.partition) for h in headers] == [("out.bundles", p) for p in (0, 2, 4)]
    assert [read_bundle_header(h.value).item_count for h in headers] == [2, 1, 0]
    # An item on another instance's partition would break that partition's bundle sequence.
    with pytest.raises(ProtocolViolation, match=r"items for partitions \[1\]"):
        header_records(4, GlobalTime.slot_end(9), [2, 1, 0, 0, 0], "out", range(0, 5, 2))
