"""Committed positions carry a MAC: a forged one is refused, never resumed from."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from framework.errors import ProtocolViolation
from framework.kafka.clients import signed_positions, verified_metadata
from framework.wire import auth


def test_a_signed_position_verifies_and_keeps_its_metadata() -> None:
    (tp,) = signed_positions("g", [TopicPartition("t", 1, 42, metadata="fp1 ack=3")])
    assert (tp.topic, tp.partition, tp.offset) == ("t", 1, 42)
    assert verified_metadata("g", tp) == "fp1 ack=3"


def test_a_position_moved_reworded_or_unsigned_is_refused() -> None:
    (tp,) = signed_positions("g", [TopicPartition("t", 1, 42, metadata="fp1 ack=3")])
    text = tp.metadata
    forged = [
        TopicPartition("t", 1, 99, metadata=text),  # skipping ahead with a copied MAC
        TopicPartition("t", 2, 42, metadata=text),  # another partition
        TopicPartition("t", 1, 42, metadata=text.replace("ack=3", "ack=9")),
        TopicPartition("t", 1, 42, metadata="fp1 ack=3"),  # no MAC at all
        TopicPartition("t", 1, 42, metadata="fp1 ack=3 mac=zz"),
    ]
    for bad in forged:
        with pytest.raises(ProtocolViolation, match="no valid MAC"):
            verified_metadata("g", bad)
    with pytest.raises(ProtocolViolation):
        verified_metadata("another-group", tp)


def test_a_position_signed_with_a_retired_signing_key_still_verifies() -> None:
    old = auth.current()
    (tp,) = signed_positions("g", [TopicPartition("t", 0, 7)])
    auth.install(auth.Keyring((b"the-new-signing-key-0123456789abc", *old.keys)))
    try:
        assert verified_metadata("g", tp) == ""
    finally:
        auth.install(old)
