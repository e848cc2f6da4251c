"""Avro (schemaless, fastavro) encoding of meta, data envelopes and tracker messages.

Each ``schemas/*.avsc`` file is parsed once, in dependency order, into one set of named
types (``flamepipe.GlobalTime`` is shared by Meta, BundleHeader, SnapshotManifest...).
Bytes carry no schema id: the topic fixes the writer schema.

Unsigned 64-bit fields (``Meta.trace``, ``Ack.value``) travel as Avro ``long`` in two's
complement and decode back to ``[0, 2**64)``.

Decoding never raises anything but `DecodeError`: fastavro reports garbage with whatever
the byte that broke it triggered (EOFError, IndexError, UnicodeDecodeError, ...), so every
decoder wraps them all, and rejects trailing bytes, which a valid message never has.
Encoding an invalid message raises `EncodeError`.

Schema evolution. A field may be added only with a default, and nothing is ever renamed
or retyped. Readers that know a newer schema read older bytes by resolution against the
writer schema they were written with: `decode_with` does that, e.g. a v2 ``Heartbeat``
reader with ``{"name": "wall_ms", "type": "long", "default": -1}`` reads v1 bytes as
``{"front": ..., "slot": ..., "wall_ms": -1}``. New readers therefore roll out before new
writers.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any, TypeVar

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from framework.core.messages import (
    Ack,
    AckerInput,
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
from framework.wire import meta as meta_writer

__all__ = [
    "SCHEMA_NAMES",
    "decode_ack",
    "decode_ack_batch",
    "decode_acker_input",
    "decode_bundle_header",
    "decode_envelope",
    "decode_global_time",
    "decode_heartbeat",
    "decode_item_header",
    "decode_meta",
    "decode_min_time",
    "decode_node_time",
    "decode_snapshot_manifest",
    "decode_with",
    "encode_ack",
    "encode_ack_batch",
    "encode_acker_input",
    "encode_bundle_header",
    "encode_envelope",
    "encode_global_time",
    "encode_heartbeat",
    "encode_item_header",
    "encode_meta",
    "encode_min_time",
    "encode_node_time",
    "encode_snapshot_manifest",
    "schema",
]

# Dependency order: a schema only names types parsed before it.
SCHEMA_NAMES = (
    "global_time",
    "meta",
    "envelope",
    "ack",
    "heartbeat",
    "node_time",
    "acker_input",
    "min_time",
    "bundle_header",
    "snapshot_manifest",
    "item_header",
    "ack_batch",
)
_U64 = 1 << 64
_I64 = 1 << 63
T = TypeVar("T")
Buffer = bytes | bytearray | memoryview


def _load() -> dict[str, Any]:
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    package = resources.files("schemas")
    for name in SCHEMA_NAMES:
        text = package.joinpath(f"{name}.avsc").read_text(encoding="utf-8")
        parsed[name] = parse_schema(json.loads(text), named_schemas=named)
    return parsed


_SCHEMAS = _load()


def schema(name: str) -> Any:
    """The parsed schema ``name`` (one of `SCHEMA_NAMES`), e.g. as a writer schema."""
    return _SCHEMAS[name]


# -- generic write / read ---------------------------------------------------------------


def _write(name: str, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    try:
        schemaless_writer(out, _SCHEMAS[name], record)
    except (TypeError, ValueError, OverflowError, KeyError, AttributeError) as exc:
        raise EncodeError(f"cannot encode {name}: {exc}") from exc
    return out.getvalue()


def _read(name: str, data: Buffer, reader: Any = None) -> Any:
    try:
        buf = io.BytesIO(data)
        record = schemaless_reader(buf, _SCHEMAS[name], reader)
    except Exception as exc:  # fastavro signals bad bytes with many exception types
        raise DecodeError(f"malformed {name}: {type(exc).__name__}: {exc}") from exc
    if buf.tell() != len(buf.getbuffer()):
        raise DecodeError(f"malformed {name}: {len(data) - buf.tell()} trailing bytes")
    return record


def _build(name: str, build: Callable[[Any], T], record: Any) -> T:
    """Turn a decoded record into a message; shape errors are decode errors too."""
    try:
        return build(record)
    except (TypeError, ValueError, KeyError) as exc:
        raise DecodeError(f"malformed {name}: {exc}") from exc


def _u64_out(value: int) -> int:
    if not 0 <= value < _U64:
        raise EncodeError(f"{value} is not an unsigned 64-bit value")
    return value - _U64 if value >= _I64 else value


def decode_with(name: str, data: Buffer, reader_schema: dict[str, Any]) -> Any:
    """Decode bytes written with schema ``name`` as ``reader_schema`` (Avro resolution)."""
    try:
        reader = parse_schema(reader_schema, named_schemas={})
    except Exception as exc:  # an unparseable reader schema is the caller's error
        raise ValueError(f"bad reader schema: {exc}") from exc
    return _read(name, data, reader)


# -- global time and meta ---------------------------------------------------------------


def _gt_out(gt: GlobalTime) -> dict[str, int]:
    return {"slot": gt.slot, "front": gt.front, "offset": gt.offset}


def _gt_in(record: dict[str, int]) -> GlobalTime:
    return GlobalTime(record["slot"], record["front"], record["offset"])


def _meta_out(meta: Meta) -> dict[str, Any]:
    return {
        "gt": _gt_out(meta.gt),
        "child_ids": list(meta.child_ids),
        "trace": _u64_out(meta.trace),
        "tombstone": meta.tombstone,
    }


def _meta_in(record: dict[str, Any]) -> Meta:
    return Meta(
        _gt_in(record["gt"]),
        tuple(record["child_ids"]),
        record["trace"] % _U64,
        record["tombstone"],
    )


def encode_global_time(gt: GlobalTime) -> bytes:
    """Avro bytes of a global time."""
    return _write("global_time", _gt_out(gt))


def decode_global_time(data: Buffer) -> GlobalTime:
    """Inverse of `encode_global_time`."""
    return _build("global_time", _gt_in, _read("global_time", data))


def encode_meta(meta: Meta) -> bytes:
    """Avro bytes of a meta (written by `framework.wire.meta`: one per output item)."""
    return meta_writer.encode_meta(meta)


def decode_meta(data: Buffer) -> Meta:
    """Inverse of `encode_meta`."""
    return _build("meta", _meta_in, _read("meta", data))


def encode_envelope(meta: Meta, payload: bytes) -> bytes:
    """Avro bytes of a data record: its meta and its already encoded payload."""
    return _write("envelope", {"meta": _meta_out(meta), "payload": payload})


def decode_envelope(data: Buffer) -> tuple[Meta, bytes]:
    """Inverse of `encode_envelope`: ``(meta, payload)``."""
    record = _read("envelope", data)
    return _build("envelope", lambda r: (_meta_in(r["meta"]), bytes(r["payload"])), record)


# -- tracker messages -------------------------------------------------------------------


def _ack_out(ack: Ack) -> dict[str, Any]:
    return {"segment": ack.segment, "slot": ack.slot, "value": _u64_out(ack.value)}


def _ack_in(r: dict[str, Any]) -> Ack:
    return Ack(r["segment"], r["slot"], r["value"] % _U64)


def encode_ack(ack: Ack) -> bytes:
    """Avro bytes of an ack."""
    return _write("ack", _ack_out(ack))


def decode_ack(data: Buffer) -> Ack:
    """Inverse of `encode_ack`."""
    return _build("ack", _ack_in, _read("ack", data))


def encode_heartbeat(beat: Heartbeat) -> bytes:
    """Avro bytes of a heartbeat."""
    return _write("heartbeat", {"front": beat.front, "slot": beat.slot})


def decode_heartbeat(data: Buffer) -> Heartbeat:
    """Inverse of `encode_heartbeat`."""
    return _build("heartbeat", lambda r: Heartbeat(r["front"], r["slot"]), _read("heartbeat", data))


def encode_node_time(node_time: NodeTime) -> bytes:
    """Avro bytes of a node time."""
    return _write("node_time", {"node": node_time.node, "time": node_time.time})


def decode_node_time(data: Buffer) -> NodeTime:
    """Inverse of `encode_node_time`."""
    return _build("node_time", lambda r: NodeTime(r["node"], r["time"]), _read("node_time", data))


def encode_acker_input(message: AckerInput) -> bytes:
    """Avro bytes of an ack, heartbeat or node time, tagged so one topic can carry all."""
    body: tuple[str, dict[str, Any]]
    if isinstance(message, Ack):
        body = ("flamepipe.Ack", _ack_out(message))
    elif isinstance(message, Heartbeat):
        body = ("flamepipe.Heartbeat", {"front": message.front, "slot": message.slot})
    elif isinstance(message, NodeTime):
        body = ("flamepipe.NodeTime", {"node": message.node, "time": message.time})
    else:
        raise EncodeError(f"not an acker input: {message!r}")
    return _write("acker_input", {"message": body})


def _acker_input_in(record: dict[str, Any]) -> AckerInput:
    # The reader returns the union branch as a plain record; field names tell them apart.
    body = record["message"]
    if "segment" in body:
        return _ack_in(body)
    if "front" in body:
        return Heartbeat(body["front"], body["slot"])
    return NodeTime(body["node"], body["time"])


def decode_acker_input(data: Buffer) -> AckerInput:
    """Inverse of `encode_acker_input`."""
    return _build("acker_input", _acker_input_in, _read("acker_input", data))


def encode_min_time(note: MinTimeNotification) -> bytes:
    """Avro bytes of a min-time notification, vector clock included."""
    record = {
        "segment": note.segment,
        "slot": note.slot,
        "node_times": [{"node": nt.node, "time": nt.time} for nt in note.node_times],
        "snapshot": note.snapshot,
        "shard": note.shard,
    }
    return _write("min_time", record)


def _min_time_in(r: dict[str, Any]) -> MinTimeNotification:
    node_times = tuple(NodeTime(nt["node"], nt["time"]) for nt in r["node_times"])
    return MinTimeNotification(r["segment"], r["slot"], node_times, r["snapshot"], r["shard"])


def decode_min_time(data: Buffer) -> MinTimeNotification:
    """Inverse of `encode_min_time`."""
    return _build("min_time", _min_time_in, _read("min_time", data))


# -- barrier and snapshots --------------------------------------------------------------


def encode_bundle_header(header: BundleHeader) -> bytes:
    """Avro bytes of a bundle header."""
    record = {
        "seq": header.seq,
        "gt_last": _gt_out(header.gt_last),
        "item_count": header.item_count,
    }
    return _write("bundle_header", record)


def decode_bundle_header(data: Buffer) -> BundleHeader:
    """Inverse of `encode_bundle_header`."""
    return _build(
        "bundle_header",
        lambda r: BundleHeader(r["seq"], _gt_in(r["gt_last"]), r["item_count"]),
        _read("bundle_header", data),
    )


def encode_snapshot_manifest(manifest: SnapshotManifest) -> bytes:
    """Avro bytes of a snapshot manifest."""
    record = {
        "snapshot_id": manifest.snapshot_id,
        "slot": manifest.slot,
        "offsets": [
            {"topic": po.topic, "partition": po.partition, "offset": po.offset}
            for po in manifest.offsets
        ],
        "state_keys": list(manifest.state_keys),
        "gt_last": None if manifest.gt_last is None else _gt_out(manifest.gt_last),
        "next_seq": manifest.next_seq,
    }
    return _write("snapshot_manifest", record)


def _manifest_in(r: dict[str, Any]) -> SnapshotManifest:
    return SnapshotManifest(
        r["snapshot_id"],
        r["slot"],
        tuple(PartitionOffset(o["topic"], o["partition"], o["offset"]) for o in r["offsets"]),
        tuple(r["state_keys"]),
        None if r["gt_last"] is None else _gt_in(r["gt_last"]),
        r["next_seq"],
    )


def decode_snapshot_manifest(data: Buffer) -> SnapshotManifest:
    """Inverse of `encode_snapshot_manifest`."""
    return _build("snapshot_manifest", _manifest_in, _read("snapshot_manifest", data))


# -- Kafka wire: item headers and ack batches -------------------------------------------


def encode_item_header(meta: Meta, ack: int) -> bytes:
    """Avro bytes of an item's header on an internal topic: its meta and its ack value."""
    return _write("item_header", {"meta": _meta_out(meta), "ack": _u64_out(ack)})


def decode_item_header(data: Buffer) -> tuple[Meta, int]:
    """Inverse of `encode_item_header`: ``(meta, ack)``."""
    record = _read("item_header", data)
    return _build("item_header", lambda r: (_meta_in(r["meta"]), r["ack"] % _U64), record)


def encode_ack_batch(
    node: int, time: int, acks: Iterable[Ack], heartbeats: Iterable[Heartbeat]
) -> bytes:
    """Avro bytes of one sender batch for one shard, closed by ``NodeTime(node, time)``."""
    record = {
        "node": node,
        "time": time,
        "acks": [_ack_out(ack) for ack in acks],
        "heartbeats": [{"front": beat.front, "slot": beat.slot} for beat in heartbeats],
    }
    return _write("ack_batch", record)


def _ack_batch_in(r: dict[str, Any]) -> list[AckerInput]:
    out: list[AckerInput] = [_ack_in(ack) for ack in r["acks"]]
    out.extend(Heartbeat(beat["front"], beat["slot"]) for beat in r["heartbeats"])
    out.append(NodeTime(r["node"], r["time"]))
    return out


def decode_ack_batch(data: Buffer) -> list[AckerInput]:
    """Inverse of `encode_ack_batch`: acks, heartbeats, then the closing `NodeTime`."""
    return _build("ack_batch", _ack_batch_in, _read("ack_batch", data))
