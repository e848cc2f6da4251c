"""Executor side of a fused query: a source stage and its keyed stage in one micro-batch.

The exactly-once argument: docs/decisions/fused-stages.md. The query is
``mapInArrow(map_task) -> repartition(units, pkey) -> mapInArrow(reduce_task)``.

Protocol of `map_task` (one source partition, or one partition of the keyed stage's tick
topic):

1. Read the task's rows. A tick row of unit ``u`` goes on as it is, for ``u``.
2. Source rows: refuse a record below its partition's heartbeat floor (nothing is
   committed yet), then run the source stage's program. Its frames for the keyed stage
   become rows for their unit, signed as a producer signs them; its dead letters become
   rows for unit ``partition % units``; it acks nothing (`StageSpec.unacked_exit`), and any
   other record is a `ProtocolViolation`. Its summary row travels to the same unit.
3. Nothing is written to Kafka: the rows exist only in Spark's shuffle.

Protocol of `reduce_task` (the rows of one or more units):

1. Per unit, in unit order: if the stage's consumer group already holds the unit's marker
   at ``batch_id + 1`` (offset of partition ``u`` of the keyed stage's changelog topic),
   an earlier attempt committed the unit's share of this batch: skip it.
2. Bring the unit's state up to date from its changelog, run the keyed stage's program
   over its frames and ticks (no receipt acks: `StageSpec.unacked_input`).
3. Commit outputs, acks of the outputs, changelog, the map side's dead letters and the
   marker in one transaction under ``<app>.<keyed stage>.p<u>``, the keyed stage's own
   transactional id.
4. Return a summary row per unit and the map side's summary rows as they came.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from framework.core.grouping import Grouping
from framework.errors import ProtocolViolation
from framework.kafka.transactions import TaskCommitter
from framework.runners.spark.tasks import (
    TaskContext,
    check_lag,
    drop_state,
    on_worker,
    partition_state,
    program_for,
    read_records,
    sender_id,
    spare_the_collector,
    summary_row,
)
from framework.wire.auth import signed
from framework.wire.records import InRecord, OutRecord

if TYPE_CHECKING:
    import pyarrow as pa

MAP_SCHEMA = (
    "unit INT, pkey INT, kind INT, topic STRING, part LONG, off LONG, ts LONG, "
    "key BINARY, value BINARY, headers BINARY"
)
"""The rows between the two sides (`kind`: `_FRAME`, `_DEAD` or `_SUMMARY`)."""

_FRAME, _DEAD, _SUMMARY = 0, 1, 2


@dataclass(frozen=True)
class FusedContext:
    """What the driver sends with every micro-batch of a fused query."""

    source: TaskContext  # the source stage (map side)
    keyed: TaskContext  # the keyed stage (reduce side): its spec, min time, group
    pkeys: tuple[int, ...]  # per unit, the value Spark's hash partitioning sends to it

    @property
    def units(self) -> int:
        """The keyed stage's hash units (partitions of its topic and changelog)."""
        return len(self.pkeys)


# -- Spark's hash partitioning ------------------------------------------------------------

_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (signed 32-bit), the hash of `repartition`."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl(k1, 15) * 0x1B873593 & _M32
    h1 = (seed & _M32) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_partition_keys(units: int) -> tuple[int, ...]:
    """Per unit ``u`` the least int ``k`` that ``repartition(units, k)`` puts in partition
    ``u``, so that each reduce task gets one unit (a miss would only cost balance: a reduce
    task handles any units it gets)."""
    keys: dict[int, int] = {}
    candidate = 0
    while len(keys) < units:
        keys.setdefault(_murmur3_int(candidate) % units, candidate)
        candidate += 1
    return tuple(keys[u] for u in range(units))


# -- rows -----------------------------------------------------------------------------

_HEADER = struct.Struct(">HI")


def _pack_headers(headers: tuple[tuple[str, bytes], ...]) -> bytes:
    out = bytearray()
    for name, value in headers:
        raw = name.encode()
        out += _HEADER.pack(len(raw), len(value)) + raw + value
    return bytes(out)


def _unpack_headers(data: bytes | None) -> tuple[tuple[str, bytes], ...]:
    headers: list[tuple[str, bytes]] = []
    at, view = 0, data or b""
    while at < len(view):
        name_len, value_len = _HEADER.unpack_from(view, at)
        at += _HEADER.size
        name = view[at : at + name_len].decode()
        at += name_len
        headers.append((name, bytes(view[at : at + value_len])))
        at += value_len
    return tuple(headers)


def _row(ctx: FusedContext, unit: int, kind: int, record: InRecord | OutRecord) -> dict[str, Any]:
    if isinstance(record, InRecord):
        part, off, ts = record.partition, record.offset, record.timestamp_ms
    else:
        part, off, ts = -1 if record.partition is None else record.partition, -1, -1
    return {
        "unit": unit,
        "pkey": ctx.pkeys[unit],
        "kind": kind,
        "topic": record.topic,
        "part": part,
        "off": off,
        "ts": ts,
        "key": record.key,
        "value": record.value,
        "headers": _pack_headers(record.headers),
    }


# -- the map side --------------------------------------------------------------------------


def _with_context(
    ctx: TaskContext, body: Callable[[Iterator[Any]], list[dict[str, Any]]], schema: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``body`` as a ``mapInArrow`` function: keys, client properties and worker log
    installed, the cyclic collector off while it runs (as for a stage task)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        with on_worker(ctx):
            rows = body(batches)
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=_arrow_schema(schema))
        spare_the_collector()

    return run


def _arrow_schema(ddl: str) -> pa.Schema:
    import pyarrow as pa

    types = {
        "INT": pa.int32(),
        "LONG": pa.int64(),
        "STRING": pa.string(),
        "BINARY": pa.binary(),
        "BOOLEAN": pa.bool_(),
        "DOUBLE": pa.float64(),
    }
    fields = (part.strip().split(" ") for part in ddl.split(","))
    return pa.schema([(name, types[kind]) for name, kind in fields])


def map_task(ctx: FusedContext) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The map side's ``mapInArrow`` function (module docstring)."""
    return _with_context(ctx.source, lambda batches: _map(ctx, batches), MAP_SCHEMA)


def _map(ctx: FusedContext, batches: Iterator[Any]) -> list[dict[str, Any]]:
    # Step 1
    records = read_records(batches, None)
    if not records:
        return []
    keyed_topic = ctx.keyed.spec.stage.topic
    if records[0].topic == keyed_topic:
        return [_row(ctx, r.partition, _FRAME, r) for r in records]
    # Step 2
    source = ctx.source
    partition = records[0].partition
    slots = check_lag(source, partition, records)
    result = program_for(source).run(records, None, 0, 0, min_time=source.min_time, slots=slots)
    dlq = source.spec.topics.dlq
    home = partition % ctx.units
    rows: list[dict[str, Any]] = []
    for record in result.records:
        if record.topic == keyed_topic and record.partition is not None:
            headers = signed(record.topic, record.key, record.value, record.headers)
            rows.append(_row(ctx, record.partition, _FRAME, record._replace(headers=headers)))
        elif record.topic == dlq:
            rows.append(_row(ctx, home, _DEAD, record))
        else:  # fusion planning rules it out; writing it would break exactly once
            raise ProtocolViolation(
                f"the map side of fused stage {source.spec.stage.id} wrote to {record.topic}"
            )
    summary = {
        **summary_row(partition, records, skipped=False, source_row=True),
        "items_in": result.items_in,
        "items_out": result.items_out,
        "dead_letters": result.dead_letters,
    }
    value = json.dumps(summary).encode()
    carrier = OutRecord(source.spec.stage.topic, partition, None, value)
    rows.append(_row(ctx, home, _SUMMARY, carrier))
    # Step 3: nothing was written; the rows go to the shuffle.
    return rows


# -- the reduce side -----------------------------------------------------------------------


def reduce_task(ctx: FusedContext) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The reduce side's ``mapInArrow`` function (module docstring)."""
    from framework.runners.spark.tasks import SUMMARY_SCHEMA

    return _with_context(ctx.keyed, lambda batches: _reduce(ctx, batches), SUMMARY_SCHEMA)


def _reduce(ctx: FusedContext, batches: Iterator[Any]) -> list[dict[str, Any]]:
    units: dict[int, tuple[list[InRecord], list[OutRecord]]] = {}
    summaries: list[dict[str, Any]] = []
    keyed_topic = ctx.keyed.spec.stage.topic
    for batch in batches:
        for row in batch.to_pylist():
            kind, unit = row["kind"], row["unit"]
            if kind == _SUMMARY:
                summaries.append(json.loads(row["value"]))
                continue
            frames, dead = units.setdefault(unit, ([], []))
            headers = _unpack_headers(row["headers"])
            if kind == _FRAME:
                off, ts, key, value = row["off"], row["ts"], row["key"], row["value"]
                frames.append(InRecord(keyed_topic, unit, off, ts, key, value, headers))
            else:
                part = None if row["part"] < 0 else row["part"]
                dead.append(OutRecord(row["topic"], part, row["key"], row["value"], headers))
    for unit in sorted(units):
        summaries.append(_reduce_unit(ctx.keyed, unit, *units[unit]))
    return summaries


def _reduce_unit(
    ctx: TaskContext, unit: int, records: list[InRecord], dead: list[OutRecord]
) -> dict[str, Any]:
    """Steps 1-3 for one unit; its summary row."""
    spec = ctx.spec
    app, stage = spec.graph.name, spec.stage.id
    committer = TaskCommitter.cached(ctx.bootstrap, f"{app}.{stage}.p{unit}")
    marker_topic, marker = spec.topics.state(stage), ctx.batch_id + 1
    # Step 1
    if committer.is_committed(ctx.group, marker_topic, unit, marker):
        return _unit_row(unit, records, skipped=True)
    committer.start()
    # Step 2
    program = program_for(ctx)
    state_key = (app, stage, unit, ctx.run_id)
    state, reader, catchup = partition_state(ctx, program, state_key, unit)
    try:
        out: list[OutRecord] = []
        result = None
        if records:
            if isinstance(state, Grouping):
                state.on_min_time(ctx.min_time)
            sender = sender_id(app, stage, unit, ctx.run_id)
            result = program.run(records, state, sender, marker, min_time=ctx.min_time)
            out.extend(result.records)
        out.extend(dead)
        # Step 3
        offsets = committer.commit(out, ctx.group, {(marker_topic, unit): marker})
        if reader is not None and offsets is not None:
            own = [o for r, o in zip(out, offsets, strict=True) if r.topic == marker_topic]
            reader.skip_own(own)
    except BaseException:
        drop_state(state_key)
        raise
    # Step 4
    row = _unit_row(unit, records, skipped=False)
    if result is not None:
        row.update(
            items_in=result.items_in,
            items_out=result.items_out,
            dead_letters=result.dead_letters,
            tombstones=result.tombstones,
            replayed=result.replayed,
            next_due=result.next_due,
        )
    row["dead_letters"] += len(dead)
    return {**row, **catchup}


def _unit_row(unit: int, records: list[InRecord], *, skipped: bool) -> dict[str, Any]:
    """A unit's summary; a unit that only committed the map side's dead letters read no
    record (its timestamps are -1)."""
    if records:
        return summary_row(unit, records, skipped=skipped, source_row=False)
    nothing = [InRecord("", unit, -1, -1, None, None)]
    return {**summary_row(unit, nothing, skipped=skipped, source_row=False), "records_in": 0}
