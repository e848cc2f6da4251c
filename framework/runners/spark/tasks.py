"""Executor side of a stage: one Spark task = one Kafka partition's batch = one transaction.

Protocol of `run_partition` (docs/runtime.md, "Acks, exactly once per task and batch"):

1. Read the task's rows (one Kafka partition's offset range of this micro-batch).
2. If the stage's consumer group already committed a position at or past the range's
   end, this batch was committed by an earlier attempt: do nothing. A source stage's
   records take their slots, moved by committed lifts and, when they arrived after their
   partition's heartbeat, by a new one (`lift_late`).
3. Bring the partition's state (grouping or aggregate) up to date: this worker's cached
   copy plus what the changelog gained since (another worker may have run the partition
   meanwhile).
4. Run the stage program with the min time the driver passed: it prunes a grouping and
   completes an aggregate's windows.
5. Commit outputs, dead letters, acks, changelog, a new lift and the new position in one
   transaction.
   On failure drop the cached state, which may be ahead of what was committed. On success
   the changelog reader skips the records just written when that is provably safe
   (`ChangelogReader.skip_own`): the cached state already holds them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from framework.core.ids import stable_id
from framework.core.panes import PaneAggregator
from framework.core.time import slot_of
from framework.errors import ProtocolViolation
from framework.kafka import security
from framework.kafka.cache import ProcessCache
from framework.kafka.changelog import ChangelogReader
from framework.kafka.transactions import TaskCommitter
from framework.logs import WorkerLog
from framework.plan.stage_spec import StageSpec
from framework.plan.stage_state import StageState, apply_changelog, prune
from framework.plan.task import StageProgram
from framework.wire.auth import Keyring, install
from framework.wire.lifts import Lift, LiftIndex
from framework.wire.records import InRecord, OutRecord

SUMMARY_SCHEMA = (
    "partition LONG, records_in LONG, items_in LONG, items_out LONG, dead_letters LONG, "
    "tombstones LONG, skipped BOOLEAN, last_offset LONG, min_timestamp_ms LONG, "
    "max_timestamp_ms LONG, next_due LONG, worker STRING, catchup_records LONG, "
    "catchup_bytes LONG, catchup_ms DOUBLE, source_row BOOLEAN, replayed LONG, "
    "least_slot LONG, lifted LONG"
)
"""One row per task: ``source_row`` rows describe a source partition (what fronts heartbeat
by), the others a partition or hash unit of a keyed stage (windows due, placement)."""
# Which Python worker ran a task: its cache of state is what placement keeps or loses.
WORKER = f"{socket.gethostname()}:{os.getpid()}"


def _keep(_: object) -> None:
    """Cached programs and states hold no resources of their own."""


_programs: ProcessCache[tuple[str, str, str], StageProgram] = ProcessCache(_keep)
_states: ProcessCache[tuple[str, str, int, str], tuple[StageState, ChangelogReader]] = ProcessCache(
    _keep, limit=1024
)


@dataclass(frozen=True)
class TaskContext:
    """What the driver sends with every micro-batch of a stage."""

    spec: StageSpec
    bootstrap: str
    run_id: str  # stable across restarts from the same checkpoint
    batch_id: int
    min_time: int  # min time of the stage's entry segment: prunes, completes windows
    # The pipeline's keys and Kafka client properties travel with the task (Spark's own
    # channel: docs/security.md).
    keyring: Keyring
    kafka_properties: tuple[tuple[str, str], ...] = ()
    # Source stages: per partition, the slot the driver heartbeated (or is heartbeating)
    # the partition's front up to; a record below it must not commit (`check_lag`).
    floors: tuple[tuple[int, int], ...] = ()
    front_lag_ms: int = 0
    worker_log: WorkerLog | None = None
    # Source stages: the committed lifts of the stage's topic (`framework.wire.lifts`),
    # which replays of their offsets apply.
    lifts: tuple[Lift, ...] = ()

    @property
    def group(self) -> str:
        """Consumer group whose committed positions mark committed task batches."""
        return f"{self.spec.graph.name}.{self.spec.stage.id}.{self.run_id}"


def sender_id(app: str, stage: str, partition: int, run_id: str) -> int:
    """Stable 63-bit acker sender id of a stage partition (its node time is the batch)."""
    return stable_id(f"{app}/{stage}/{partition}/{run_id}")


@contextlib.contextmanager
def on_worker(ctx: TaskContext) -> Iterator[None]:
    """What a task's body runs under in a Python worker: the keys, the Kafka client
    properties and the worker log installed, the cyclic collector off.

    A batch allocates a large graph of small objects; the cyclic collector would rescan it
    again and again (measured: half the task's time). Nothing here makes cycles, so it
    runs once after the task instead (`spare_the_collector`).
    """
    install(ctx.keyring)
    security.install(dict(ctx.kafka_properties))
    if ctx.worker_log is not None:
        ctx.worker_log.install()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def stage_task(ctx: TaskContext) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function Spark's ``mapInArrow`` runs for each partition of the batch."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        with on_worker(ctx):
            records = read_records(batches, ctx.spec.stage.topic)
            summary = run_partition(ctx, records) if records else None
        if summary is not None:
            yield pa.RecordBatch.from_pylist([summary])
        spare_the_collector()

    return run


_FULL_COLLECTION_EVERY = 64
_tasks_frozen = 0


def spare_the_collector() -> None:
    """Freeze the heap, so the full ``gc.collect()`` Spark's worker runs after every task
    skips it (measured: 80 % of a stateless stage's worker CPU at 1k records/s, more the
    larger the cached states). The cyclic collector then never sees frozen objects, so
    every `_FULL_COLLECTION_EVERY` tasks the heap is unfrozen and that collection is full:
    cyclic garbage (rare: nothing here makes cycles on purpose) waits at most that long."""
    global _tasks_frozen  # noqa: PLW0603 - one counter per worker process
    _tasks_frozen += 1
    if _tasks_frozen >= _FULL_COLLECTION_EVERY:
        _tasks_frozen = 0
        gc.unfreeze()
    else:
        gc.freeze()


def read_records(batches: Iterator[Any], topic: str | None) -> list[InRecord]:
    """Step 1: a task's rows as records of ``topic`` (None: each row's ``topic`` column, a
    query reading two topics). Column by column: to_pydict would build a dict per header
    and index every column per row; the headers column is split by its list offsets."""
    out: list[InRecord] = []
    for batch in batches:
        if not batch.num_rows:
            continue
        column = batch.column
        topics = repeat(topic, batch.num_rows) if topic else column("topic").to_pylist()
        out.extend(
            map(
                InRecord._make,
                zip(
                    topics,
                    column("partition").to_pylist(),
                    column("offset").to_pylist(),
                    column("ts").to_pylist(),
                    column("key").to_pylist(),
                    column("value").to_pylist(),
                    _headers(column("headers"))
                    if "headers" in batch.schema.names
                    else repeat((), batch.num_rows),
                    strict=True,
                ),
            )
        )
    return out


def _headers(column: Any) -> list[tuple[tuple[str, bytes], ...]]:
    """Each row's headers as ``(name, value)`` pairs (a null value as empty bytes)."""
    structs = column.values  # every row's header structs, indexed by the list offsets
    names = structs.field("key").to_pylist()
    values = [v or b"" for v in structs.field("value").to_pylist()]
    pairs = list(zip(names, values, strict=True))
    offsets = column.offsets.to_pylist()
    valid = column.is_valid().to_pylist()
    return [
        tuple(pairs[start:end]) if ok else ()
        for start, end, ok in zip(offsets, offsets[1:], valid, strict=False)
    ]


def run_partition(ctx: TaskContext, records: list[InRecord]) -> dict[str, Any]:
    """Steps 2-5 for one partition; returns the summary row."""
    spec = ctx.spec
    app, stage = spec.graph.name, spec.stage.id
    partition, topic = records[0].partition, records[0].topic
    end = max(r.offset for r in records) + 1
    committer = TaskCommitter.cached(ctx.bootstrap, f"{app}.{stage}.p{partition}")
    # Step 2
    if committer.is_committed(ctx.group, topic, partition, end):
        return summary_row(partition, records, skipped=True, source_row=spec.stage.is_source)
    slots, lift = lift_late(ctx, partition, records)
    program = program_for(ctx)
    # Fence a zombie attempt now: its open transaction would hold the changelog's end.
    committer.start()
    state_key = (app, stage, partition, ctx.run_id)
    state, reader, catchup = partition_state(ctx, program, state_key, partition)
    try:
        # Step 4
        prune(state, ctx.min_time)
        sender = sender_id(app, stage, partition, ctx.run_id)
        result = program.run(
            records, state, sender, ctx.batch_id + 1, min_time=ctx.min_time, slots=slots
        )
        # Step 5
        out: list[OutRecord] = list(result.records)
        if lift is not None:  # committed with the outputs it moved, or not at all
            out.append(OutRecord(spec.topics.lifts, 0, lift.key(), lift.encode()))
        offsets = committer.commit(out, ctx.group, {(topic, partition): end})
        if reader is not None and offsets is not None:
            changelog = spec.topics.state(stage)
            reader.skip_own([o for r, o in zip(out, offsets, strict=True) if r.topic == changelog])
    except BaseException:
        drop_state(state_key)
        raise
    return {
        **summary_row(partition, records, skipped=False, source_row=spec.stage.is_source),
        "items_in": result.items_in,
        "items_out": result.items_out,
        "dead_letters": result.dead_letters,
        "tombstones": result.tombstones,
        "replayed": result.replayed,
        "next_due": result.next_due,
        **catchup,
        "least_slot": _least_slot(records, slots, spec.graph.delta_ms)
        if spec.stage.is_source
        else -1,
        "lifted": len(slots),  # records whose slot a lift moved (a new one or a replay's)
    }


_NO_CATCHUP: dict[str, Any] = {"catchup_records": 0, "catchup_bytes": 0, "catchup_ms": 0.0}


def _least_slot(records: list[InRecord], slots: dict[int, int], delta_ms: int) -> int:
    """The least slot a source batch's records take (lifts applied)."""
    return min(slots.get(r.offset, slot_of(r.timestamp_ms, delta_ms)) for r in records)


def lift_late(
    ctx: TaskContext, partition: int, records: list[InRecord]
) -> tuple[dict[int, int], Lift | None]:
    """A source batch's moved slots (offset -> slot) and the new `Lift`, if any.

    1. Apply the committed lifts of the partition (a replay of lifted offsets).
    2. A record still below the slot the driver heartbeated the partition up to (its
       *floor*) took longer than ``front_lag_ms`` to become readable: min time may have
       passed its slot, and the barrier would drop its output. Every such record moves up
       to the floor, which min time cannot have passed (the partition's heartbeat holds it
       there), and the move becomes a `Lift` the caller commits with the batch's outputs
       (`framework.wire.lifts`: replays move the same records the same way).
    """
    delta = ctx.spec.graph.delta_ms
    # Step 1
    committed = [lift for lift in ctx.lifts if lift.partition == partition]
    slots = LiftIndex(committed).slots(partition, _stamps(records), delta) if committed else {}
    # Step 2
    floor = dict(ctx.floors).get(partition)
    if floor is None or slot_of(min(r.timestamp_ms for r in records), delta) >= floor:
        return slots, None
    late = [
        r.offset for r in records if slots.get(r.offset, slot_of(r.timestamp_ms, delta)) < floor
    ]
    if not late:
        return slots, None
    lift = Lift(records[0].topic, partition, min(late), max(late), floor)
    for r in records:
        slot = slots.get(r.offset, slot_of(r.timestamp_ms, delta))
        if lift.slot_of(r.offset, slot) > slot:
            slots[r.offset] = lift.slot
    return slots, lift


def _stamps(records: list[InRecord]) -> dict[int, int]:
    return {r.offset: r.timestamp_ms for r in records}


def check_lag(ctx: TaskContext, partition: int, records: list[InRecord]) -> dict[int, int]:
    """The committed lifts' slots (`lift_late` step 1) for a fused query's map side, which
    commits nothing of its own to record a new `Lift` in: a record that would need one
    fails the task with `ProtocolViolation` before anything commits (min time may have
    passed its slot, so its output would be dropped as a replay); a restart reads the
    batch again instead of skipping it."""
    slots, lift = lift_late(ctx, partition, records)
    if lift is None:
        return slots
    delta = ctx.spec.graph.delta_ms
    raise ProtocolViolation(
        f"a record of {lift.topic}[{partition}]@{lift.first} became readable after the "
        f"driver heartbeated the partition past {lift.slot * delta}: it took over "
        f"front_lag_ms={ctx.front_lag_ms} to become readable. Nothing of this batch was "
        "committed. A fused query cannot move it (split stages do: fuse_stages=false), or "
        "raise FLAMEPIPE_FRONT_LAG_MS (the broker's worst pause), and restart the pipeline."
    )


def partition_state(
    ctx: TaskContext, program: StageProgram, key: tuple[str, str, int, str], partition: int
) -> tuple[StageState | None, ChangelogReader | None, dict[str, Any]]:
    """The partition's state brought up to date, its reader, and what catching up cost
    (records, bytes and milliseconds read from the changelog: a move's price)."""
    # Step 3
    fresh = program.new_state()
    if fresh is None:
        return None, None, _NO_CATCHUP
    topic = ctx.spec.topics.state(ctx.spec.stage.id)
    cached = _states.peek(key)
    if cached is not None and cached[1].outlived_deletions:
        # Deletions it never read may be compacted away: only a read from the start is sure.
        _states.discard(key)
    state, reader = _states.get(
        key, lambda: (fresh, ChangelogReader(ctx.bootstrap, topic, partition))
    )
    started = time.perf_counter()
    try:
        records = reader.catch_up()
        apply_changelog(state, records)
    except BaseException:
        # Half applied, and the reader already past it: a retry must start over.
        _states.discard(key)
        raise
    state.take_changed()  # replayed state is already in the changelog
    if state is fresh and isinstance(state, PaneAggregator):
        state.settle()  # a deletion put off past the last commit (`changelog_records`)
    return (
        state,
        reader,
        {
            "catchup_records": len(records),
            "catchup_bytes": sum(len(k) + len(v or b"") for k, v in records),
            "catchup_ms": (time.perf_counter() - started) * 1000,
        },
    )


def program_for(ctx: TaskContext) -> StageProgram:
    """This worker's compiled program of the context's stage (made once per run)."""
    spec = ctx.spec
    return _programs.get((spec.graph.name, spec.stage.id, ctx.run_id), lambda: StageProgram(spec))


def drop_state(key: tuple[str, str, int, str]) -> None:
    """Forget a cached state after a failed task: it may be ahead of what committed."""
    _states.discard(key)


def summary_row(
    partition: int, records: list[InRecord], *, skipped: bool, source_row: bool
) -> dict[str, Any]:
    """A task's summary (`SUMMARY_SCHEMA`) before its program's counts are added."""
    return {
        "partition": partition,
        "records_in": len(records),
        "items_in": 0,
        "items_out": 0,
        "dead_letters": 0,
        "tombstones": 0,
        "skipped": skipped,
        "last_offset": max(r.offset for r in records),
        "min_timestamp_ms": min(r.timestamp_ms for r in records),
        "max_timestamp_ms": max(r.timestamp_ms for r in records),
        "next_due": -2,  # unknown: the driver keeps what it knew
        "worker": WORKER,
        **_NO_CATCHUP,
        "source_row": source_row,
        "replayed": 0,
        "least_slot": -1,  # unknown (skipped): the driver checks the timestamps
        "lifted": 0,
    }
