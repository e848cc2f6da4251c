"""Unit snapshots: names, the bytes saved in a state backend, and changelog records.

A unit is one hash unit of a grouping or aggregate node: partition ``p`` of its changelog
(and of its shuffle topic), named ``"<node>/<p>"`` in the backend and in
`SnapshotRecord.units`.

What is saved for a grouping is `Grouping.snapshot(below=slot)`; for an aggregate, its
changelog image cut at the slot (`ChangelogImage.cut`) with the min time of the batch the
cut stopped before, and the aggregation's shape (`aggregate_shape`). Every meta is a plain
tuple, so the bytes do not depend on where flamepipe's classes live, pickled with a format number,
behind the MAC of the pipeline's keyring over the pickle and the unit's label
``<app>/<unit>@<slot>`` (`framework.wire.auth`): a file written by anyone else, or
moved to another unit or slot, is refused before it is unpickled::

    b"fpu1" || u16 len(mac) || mac || pickle
`changelog_records` / `aggregate_records` turn it back into the records a stage task
would have written (layout: `framework.wire.changelog`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from framework.core.graph import Kind, Node
from framework.core.windows import Aggregation
from framework.errors import DecodeError, Unauthenticated
from framework.plan.stage_state import plain_meta
from framework.wire.auth import MAC_HEADER, current
from framework.wire.changelog import (
    PlainMeta,
    bucket_record,
    floor_record,
    item_record,
    min_time_record,
)
from framework.wire.serde import Pickle

UNIT_FORMAT = 1
"""Version of the saved unit bytes; `decode_unit` reads this version only."""

_PICKLE = Pickle()
_MAGIC = b"fpu1"
_U16 = struct.Struct(">H")


def unit_name(node: str, partition: int) -> str:
    """``"<node>/<partition>"``: the backend key of one hash unit of ``node``."""
    if not node or "/" in node:
        raise ValueError(f"node id {node!r} must be non-empty and hold no '/'")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition {partition!r} must be an int >= 0")
    return f"{node}/{partition}"


def parse_unit(unit: str) -> tuple[str, int]:
    """Inverse of `unit_name`; `ValueError` for anything else."""
    node, sep, partition = unit.rpartition("/")
    if not sep or not node or not partition.isdigit():
        raise ValueError(f"unit {unit!r} is not '<node>/<partition>'")
    return node, int(partition)


def _plain_meta(meta: Any) -> tuple[Any, ...]:
    # The same plain form stage tasks write to changelogs (`meta_from_plain` reads both).
    return (tuple(meta[0]), tuple(meta[1]), int(meta[2]), bool(meta[3]))


def unit_label(app: str, unit: str, slot: int) -> str:
    """What a unit's MAC binds it to: the application, the unit and the slot."""
    return f"{app}/{unit}@{slot}"


def encode_unit(state: Mapping[str, Any], label: str) -> bytes:
    """The bytes to save for a `Grouping.snapshot` result labelled `unit_label`."""
    buckets = [
        (
            key,
            [(_plain_meta(m), v) for m, v in items],
            [(_plain_meta(m), v) for m, v in early],
        )
        for key, items, early in state["buckets"]
    ]
    return _signed({"format": UNIT_FORMAT, "window": state["window"], "buckets": buckets}, label)


def aggregate_shape(aggregation: Aggregation, delta_ms: int) -> str:
    """What an aggregate's saved state depends on: a restore needs the same (its functions
    cannot be compared; like a grouping's, they are the user's to keep compatible)."""
    a = aggregation
    return (
        f"{a.window!r} delta={delta_ms} rolling={a.rolling} ttl_ms={a.ttl_ms} "
        f"step={type(a.step).__name__ if a.step else None} "
        f"event_time={a.event_time is not None} lateness_ms={a.lateness_ms} "
        f"updates_ms={a.updates_ms}"
    )


def state_shape(node: Node, delta_ms: int) -> str | None:
    """What a bucketed node's saved state depends on (`aggregate_shape` of an aggregate;
    a converge's is its join's alone, the user's to keep compatible); None for a grouping,
    whose window says it."""
    if node.aggregation is not None:
        return aggregate_shape(node.aggregation, delta_ms)
    return "converge" if node.kind is Kind.CONVERGE else None


def encode_aggregate_unit(
    buckets: list[tuple[object, tuple[Any, ...]]], min_time: int, shape: str, label: str
) -> bytes:
    """The bytes to save for an aggregate unit: its image's buckets cut at the slot
    (`ChangelogImage.cut`), the image's min time and `aggregate_shape`."""
    state = {"format": UNIT_FORMAT, "aggregate": shape, "min_time": min_time, "buckets": buckets}
    return _signed(state, label)


def resign_unit(state: Mapping[str, Any], label: str) -> bytes:
    """A `decode_unit` result signed again for another ``label`` (a renamed operator)."""
    return _signed({"format": UNIT_FORMAT, **state}, label)


def _signed(state: dict[str, Any], label: str) -> bytes:
    data = _PICKLE.dumps(state)
    mac = current().sign(label, None, data)
    return _MAGIC + _U16.pack(len(mac)) + mac + data


def decode_unit(data: bytes, label: str, where: str) -> dict[str, Any]:
    """The snapshot saved by `encode_unit` (as `Grouping.restore` takes it) or
    `encode_aggregate_unit` (keys ``aggregate``, ``min_time``, ``buckets``).

    `Unauthenticated` if its MAC does not verify for ``label`` (nothing is unpickled),
    `DecodeError` naming ``where`` if the bytes are not a unit snapshot of this format.
    """
    if not isinstance(data, bytes) or not data.startswith(_MAGIC) or len(data) < 6:
        raise Unauthenticated(f"{where}: not a signed unit snapshot, not decoded")
    (size,) = _U16.unpack_from(data, 4)
    mac, body = data[6 : 6 + size], data[6 + size :]
    if not current().verify(label, None, body, [(MAC_HEADER, mac)]):
        raise Unauthenticated(
            f"{where}: its MAC does not verify (written with another key, or for another "
            "unit or slot), not decoded"
        )
    try:
        state = _PICKLE.loads(body)
    except DecodeError as exc:
        raise DecodeError(f"{where}: not a unit snapshot: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != UNIT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise DecodeError(
            f"{where}: unit snapshot format {found!r}; this flamepipe reads format "
            f"{UNIT_FORMAT} only"
        )
    if "aggregate" in state:
        return {k: state[k] for k in ("aggregate", "min_time", "buckets")}
    return {"window": state["window"], "buckets": state["buckets"]}


def changelog_records(state: Mapping[str, Any]) -> list[tuple[bytes, bytes | None]]:
    """``(key, value)`` changelog records that rebuild a grouping's ``state``, one per
    item meta of each bucket.

    Byte for byte the format of a stage task's changelog (`item_record`), so
    `apply_changelog` reads them like any task's records.
    """
    return [record for _, record in keyed_records(state, aggregate=False)]


def keyed_records(
    state: Mapping[str, Any], *, aggregate: bool
) -> list[tuple[object, tuple[bytes, bytes | None]]]:
    """Per bucket of a decoded unit: its key with each changelog record that rebuilds it
    (a grouping's items, one record per meta, or an aggregate's bucket as saved)."""
    records: list[tuple[object, tuple[bytes, bytes | None]]] = []
    for key, *parts in state["buckets"]:
        if aggregate:
            (bucket,) = parts
            records.append((key, bucket_record(key, bucket)))
            continue
        items, early = parts
        at: dict[PlainMeta, tuple[list[Any], list[Any]]] = {}
        for meta, value in items:
            at.setdefault(plain_meta(meta), ([], []))[0].append(value)
        for meta, value in early:
            at.setdefault(plain_meta(meta), ([], []))[1].append(value)
        records.extend((key, item_record(key, meta, *found)) for meta, found in at.items())
    return records


def aggregate_records(
    buckets: list[tuple[object, tuple[Any, ...]]], min_time: int, floor: int
) -> list[tuple[bytes, bytes]]:
    """Changelog records that rebuild an aggregate unit restored from a snapshot at slot
    ``floor``: the floor, the min time, then one record per bucket."""
    records = [floor_record(floor)]
    if min_time:
        records.append(min_time_record(min_time))
    records.extend(bucket_record(key, bucket) for key, bucket in buckets)
    return records
