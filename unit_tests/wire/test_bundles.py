"""The output topic's wire format and the bundle rules a consumer checks."""

from __future__ import annotations

import pytest

from framework.core.barrier import Bundle
from framework.core.messages import BundleHeader
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation
from framework.wire.avro import decode_meta, encode_bundle_header, encode_meta
from framework.wire.bundles import (
    BUNDLE_HEADER,
    META_HEADER,
    BundleVerifier,
    bundle_records,
    header_value,
    last_header,
    output_partition,
    read_bundle_header,
)


def meta(slot: int, offset: int = 0) -> Meta:
    return Meta(GlobalTime(slot, 5, offset))


def encode(payload: object) -> tuple[bytes | None, bytes]:
    text = str(payload)
    return (text.encode() if text.startswith("k") else None), text.encode()


def test_a_bundle_is_items_then_a_header_on_every_partition() -> None:
    items_in = (Record(meta(8), encode("a")), Record(meta(9), encode("kb")))
    records = bundle_records(Bundle(3, GlobalTime.slot_end(9), items_in), "out", 3)
    items, headers = records[:2], records[2:]
    assert [(r.topic, r.value) for r in items] == [("out", b"a"), ("out", b"kb")]
    assert items[0].partition == output_partition(None, meta(8), 3) == 5 % 3
    assert items[1].key == b"kb"
    assert [decode_meta(dict(r.headers)[META_HEADER]) for r in items] == [meta(8), meta(9)]
    assert [r.partition for r in headers] == [0, 1, 2]
    assert all(r.key is None and r.value is None for r in headers)
    counts = [0, 0, 0]
    for record in items:
        assert record.partition is not None
        counts[record.partition] += 1
    assert [read_bundle_header(r.headers) for r in headers] == [
        BundleHeader(3, GlobalTime.slot_end(9), count) for count in counts
    ]


@pytest.mark.parametrize("payload", ["a", ["k", b"v"], (b"k", "v"), (b"k", b"v", b"x")])
def test_a_payload_that_is_no_output_record_is_refused(payload: object) -> None:
    bundle = Bundle(0, GlobalTime.slot_end(9), (Record(meta(8), payload),))
    with pytest.raises(ProtocolViolation, match="older flamepipe"):
        bundle_records(bundle, "out", 1)


def test_headers_are_read_from_lists_and_dicts() -> None:
    header = BundleHeader(1, GlobalTime(2, 3, 4), 0)
    raw = encode_bundle_header(header)
    assert read_bundle_header([("x", b"1"), (BUNDLE_HEADER, raw)]) == header
    assert read_bundle_header({BUNDLE_HEADER: raw}) == header
    assert header_value([("a", None)], "a") == b""
    assert header_value(None, "a") is None
    assert last_header([None, [(BUNDLE_HEADER, raw)], [(META_HEADER, b"")]]) == header
    assert last_header([]) is None


def item(slot: int, offset: int = 0, *, tombstone: bool = False) -> list[tuple[str, bytes]]:
    return [(META_HEADER, encode_meta(Meta(GlobalTime(slot, 5, offset), (), 0, tombstone)))]


def close(verifier: BundleVerifier, seq: int, last: int, count: int) -> None:
    verifier.header(BundleHeader(seq, GlobalTime.slot_end(last), count), 99)


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


def test_item_count_must_match() -> None:
    verifier = BundleVerifier("out[0]")
    verifier.item(item(1), 0)
    with pytest.raises(ProtocolViolation, match=r"header counts 2 item\(s\), 1 arrived"):
        close(verifier, 0, 1, 2)


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
    with pytest.raises(ProtocolViolation, match=r"neither fp\.meta nor fp\.bundle"):
        verifier.item([("other", b"")], 1)
    with pytest.raises(ProtocolViolation, match=r"unreadable fp\.meta header"):
        verifier.item([(META_HEADER, b"\xff")], 2)
