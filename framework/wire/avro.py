"""Avro (schemaless, fastavro) encoding of meta, tracker messages and bundle headers.

Each ``schemas/*.avsc`` file is parsed once, in dependency order, into one set of named
types (``flamepipe.GlobalTime`` is shared by Meta, BundleHeader, MinTime...).
Bytes carry no schema id: the topic fixes the writer schema.

Unsigned 64-bit fields (``Meta.trace``, ``Ack.value``) travel as Avro ``long`` in two's
complement and decode back to ``[0, 2**64)``.

Decoding never raises anything but `DecodeError`: fastavro reports garbage with whatever
the byte that broke it triggered (EOFError, IndexError, UnicodeDecodeError, ...), so every
decoder wraps them all, and rejects trailing bytes, which a valid message never has.
Encoding an invalid message raises `EncodeError`.

Schema evolution. A field may be added only with a default, and nothing is ever renamed
or retyped. Readers that know a newer schema read older bytes by resolution against the
writer schema they were written with: `decode_with` does that, e.g. a v2 ``BundleHeader``
reader with ``{"name": "wall_ms", "type": "long", "default": -1}`` reads v1 bytes with
``wall_ms = -1``. New readers therefore roll out before new
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
)
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import ConfigError, DecodeError, EncodeError
from framework.wire import meta as meta_writer

# Dependency order: a schema only names types parsed before it.
SCHEMA_NAMES = (
    "global_time",
    "meta",
    "ack",
    "heartbeat",
    "node_time",
    "min_time",
    "bundle_header",
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
        raise ConfigError(f"bad reader schema: {exc}") from exc
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


def encode_meta(meta: Meta) -> bytes:
    """Avro bytes of a meta (written by `framework.wire.meta`: one per output item)."""
    return meta_writer.encode_meta(meta)


def encode_metas(metas: Iterable[Meta]) -> list[bytes]:
    """`encode_meta` of each of ``metas``, in one loop."""
    return meta_writer.encode_metas(metas)


def decode_meta(data: Buffer) -> Meta:
    """Inverse of `encode_meta`."""
    return _build("meta", _meta_in, _read("meta", data))


# -- tracker messages -------------------------------------------------------------------


def _ack_out(ack: Ack) -> dict[str, Any]:
    return {"segment": ack.segment, "slot": ack.slot, "value": _u64_out(ack.value)}


def _ack_in(r: dict[str, Any]) -> Ack:
    return Ack(r["segment"], r["slot"], r["value"] % _U64)


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


# -- ack batches -------------------------------------------


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
