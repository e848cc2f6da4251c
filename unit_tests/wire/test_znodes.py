"""Records stored in ZooKeeper: canonical JSON, versioned, frozen; the znode layout."""

from __future__ import annotations

import json

import pytest

from framework.coordination.paths import app_root, leader_path, snapshot_path
from framework.errors import DecodeError
from framework.wire.znodes import EpochRecord, SnapshotRecord


def _snapshot() -> SnapshotRecord:
    return SnapshotRecord(
        slot=170_000_000_123,
        offsets={"words": {0: 10, 11: 7}, "lines": {}},
        units={"count": ("app.count.p0", "app.count.p1")},
        epoch=3,
        created_ms=1_700_000_000_000,
    )


def test_snapshot_record_round_trips_as_canonical_json() -> None:
    record = _snapshot()
    data = record.to_json()
    assert SnapshotRecord.from_json(data, "here") == record
    assert SnapshotRecord.from_json(data, "here").offsets["words"][11] == 7
    body = json.loads(data)
    assert body["version"] == 1 and body["kind"] == "snapshot"
    assert body["offsets"] == {"words": {"0": 10, "11": 7}, "lines": {}}
    same = SnapshotRecord(
        record.slot, {"lines": {}, "words": {11: 7, 0: 10}}, record.units, 3, record.created_ms
    )
    assert same.to_json() == data  # equal records, equal bytes


def test_records_are_frozen_copies() -> None:
    offsets = {"words": {0: 1}}
    record = SnapshotRecord(1, offsets, {}, 0, 0)
    offsets["words"][0] = 99
    assert record.offsets["words"][0] == 1
    with pytest.raises(TypeError):
        record.offsets["words"][0] = 5  # type: ignore[index]
    with pytest.raises(AttributeError):
        record.slot = 2  # type: ignore[misc]


def test_epoch_record_round_trips_with_and_without_offsets() -> None:
    for record in (
        EpochRecord(1, "start", None, None, 5),
        EpochRecord(2, "recovery", 40, {"in": {0: 3}}, 6),
    ):
        assert EpochRecord.from_json(record.to_json(), "e") == record


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"{", "not a JSON snapshot record"),
        (b'{"kind":"epoch","version":1}', "not a snapshot record"),
        (b'{"kind":"snapshot","version":2}', "record version 2; this flamepipe reads version 1"),
        (b'{"kind":"snapshot","version":1,"slot":1}', "malformed snapshot record"),
        (
            b'{"kind":"snapshot","version":1,"slot":-1,"offsets":{},"units":{},"epoch":0,'
            b'"created_ms":0}',
            "malformed snapshot record",
        ),
    ],
)
def test_bad_bytes_say_where_and_what(data: bytes, needle: str) -> None:
    with pytest.raises(DecodeError, match=f"^/x/committed: .*{needle}"):
        SnapshotRecord.from_json(data, "/x/committed")


def test_invalid_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="slot=-1"):
        SnapshotRecord(-1, {}, {}, 0, 0)
    with pytest.raises(ValueError, match="offset of t"):
        SnapshotRecord(1, {"t": {0: -5}}, {}, 0, 0)
    with pytest.raises(ValueError, match="snapshot=True"):
        EpochRecord(1, "x", True, None, 0)


def test_znode_layout() -> None:
    assert app_root("wc-1") == "/flamepipe/wc-1"
    assert snapshot_path("wc", 42) == "/flamepipe/wc/snapshots/00000000000000000042"
    assert leader_path("wc", "acker") == "/flamepipe/wc/leaders/acker"
    for bad in ("", "a/b", "..", "."):
        with pytest.raises(ValueError, match="not a znode name"):
            app_root(bad)
