"""Position records: what a continuous task commits its input position as, and how a
reader verifies one (`framework.kafka.stage_positions`, step 3)."""

from __future__ import annotations

import json

import pytest

from framework.errors import ProtocolViolation
from framework.kafka.stage_positions import _verified, position_record


def _record(group: str = "g", partition: int = 3, offset: int = 120) -> bytes:
    record = position_record(
        "wc.s.positions",
        2,
        group=group,
        source="wc.s",
        partition=partition,
        offset=offset,
        text="fp1 in=5",
    )
    assert record.value is not None
    return bytes(record.value)


def test_a_record_goes_to_its_partition_modulo_the_topic_keyed_by_the_input_partition() -> None:
    record = position_record(
        "wc.s.positions", 2, group="g", source="wc.s", partition=3, offset=1, text=""
    )
    assert (record.topic, record.partition, record.key) == ("wc.s.positions", 1, b"3")


def test_a_record_verifies_into_its_offset_and_metadata() -> None:
    assert _verified(_record(), "g", "wc.s", 3, "t") == (120, "fp1 in=5")


def test_a_record_of_another_run_is_no_position_of_this_one() -> None:
    assert _verified(_record(group="an-earlier-run"), "g", "wc.s", 3, "t") is None


def test_a_moved_reworded_misplaced_or_unparsable_record_is_refused() -> None:
    group, source, partition, offset, text = json.loads(_record())
    forged = [
        [group, source, partition, offset + 50, text],  # skipping ahead with a copied MAC
        [group, source, partition, offset, text.replace("in=5", "in=9")],
        ["another-group", source, partition, offset, text],  # the MAC names the group
    ]
    for bad in forged:
        with pytest.raises(ProtocolViolation, match="no valid MAC"):
            _verified(json.dumps(bad).encode(), "g", "wc.s", 3, "t")
    with pytest.raises(ProtocolViolation, match=r"names wc\.s\[4\]"):
        _verified(_record(partition=4), "g", "wc.s", 3, "t")
    for garbage in (b"not json", b"[1, 2]", b'{"a": 1}'):
        with pytest.raises(ProtocolViolation, match="is no position record"):
            _verified(garbage, "g", "wc.s", 3, "t")
