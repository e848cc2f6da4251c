"""Executor side of a continuous stage: one long-running Spark task per input partition.

A micro-batch stage task runs once per batch and returns; a continuous one runs until it
is killed, polling its partition and committing whenever it has something to commit, so
an item waits for no batch of its own stage. Everything a task commits is what a
micro-batch task commits (`framework.runners.spark.tasks`), so the acker, the barriers and
snapshots see no difference.

Protocol of `run_continuous` (docs/runtime.md, "Continuous stages"):

1. Start the partition's committer under the stage's transactional id: its
   init_transactions fences every earlier task of the partition and aborts its open
   transaction. Fencing is final here: a task fenced later stops, because a newer task
   owns the partition.
2. Read the partition's position (its latest committed position record,
   `framework.kafka.stage_positions`; none yet: the epoch's start offset, else the
   beginning) and, for a keyed stage, its state from
   the changelog; open a consumer at the position.
3. Loop until the task is killed:
   a. Take what arrived: at most ``max_batch_records``, waiting at most ``poll_ms`` for
      the first record.
   b. Keyed stages: read the min time of the stage's segment (the pipeline's min-time
      topic; a grouping's is capped by the committed snapshot, as the driver caps it).
   c. If records arrived, or min time moved past a window still to emit, or a grouping
      has state to prune: lift late source records (the floors are this task's own
      heartbeats), run the stage program, and commit outputs, dead letters, acks,
      changelog, a new lift and the new position (a record) in one transaction.
   d. Source stages: heartbeat the partition's front (`framework.runners.spark.fronts`,
      steps 1-4, for this partition alone): records taken when every record read before
      them is committed heartbeat the slot of the first of them at once (`ahead`: the
      acks it covers committed before it), every commit's ack batches carry the
      heartbeat its last record allows (it commits with the acks it covers), and every
      ``heartbeat_ms`` a round of its own adds the heartbeat of a partition read to its
      end (with nothing pending, read up to the consumer's position, past transaction
      markers).
Any failure ends the task, and with it the stage's Spark job; the driver starts the job
again (`framework.runners.spark.continuous`), and step 1 of the new tasks fences what is
left of the old ones.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from confluent_kafka import Consumer, Message, TopicPartition

from framework import failpoints
from framework.coordination.processes import process_age_s
from framework.core.graph import Kind
from framework.core.ids import stable_id
from framework.core.panes import PaneAggregator
from framework.core.windows import WindowAggregator
from framework.errors import PipelineError
from framework.kafka.clients import is_record, kafka_call, new_consumer, take
from framework.kafka.mintime import MinTimeView
from framework.kafka.stage_positions import position_record, read_positions
from framework.kafka.transactions import TaskCommitter
from framework.plan.stage_state import StageState, prune
from framework.plan.task import StageProgram
from framework.runners.snapshots import CommittedSlot
from framework.runners.spark.fronts import FrontHeartbeats
from framework.runners.spark.tasks import (
    TaskContext,
    drop_state,
    lift_late,
    on_worker,
    partition_state,
    program_for,
)
from framework.wire.lifts import Lift
from framework.wire.positions import TaskCounts
from framework.wire.records import InRecord, OutRecord

_log = logging.getLogger(__name__)

# Per partition and fetch request (librdkafka's default: 1 MB, two of a stage's ~512 KB
# frames). On a backlog a task takes what has arrived into one commit, and every commit of
# an aggregate rewrites the changelog bucket of each key it touched, so fewer, larger
# takes cost less. Windowed count from a 200 000-line backlog, peer harness, five
# alternating pairs: 26.7 s from launch and 33.2 CPU-s (medians) against 29.0 s and 35.3
# at 1 MB (docs/latency.md, "Fetch size of continuous tasks").
_FETCH_BYTES = 16 * 1024 * 1024


class TaskOrphaned(Exception):  # noqa: N818 - ends a task whose JVM is gone, never caught
    """The Python worker of a long-running task outlived the Spark process that ran it."""


@dataclass(frozen=True)
class ContinuousContext:
    """What the driver sends the long-running tasks of one stage, once."""

    task: TaskContext  # ``batch_id`` and ``min_time`` unused: the task finds its own
    zookeeper: str
    heartbeat_ms: int
    poll_ms: int
    commit_ms: int  # the least time between two commits
    max_records: int  # Kafka records per commit at most (frames on internal topics)
    # A source stage's start offsets in this epoch (a replay's), per partition.
    starts: tuple[tuple[int, int], ...] = ()
    # The driver's failpoints when it started the stage (`framework.failpoints`): the fronts
    # a driver heartbeats for micro-batches run in these tasks, and read them here.
    failpoints: str = ""

    @property
    def group(self) -> str:
        """The consumer group whose committed offsets are the partitions' positions."""
        return self.task.group

    @property
    def tasks(self) -> int:
        """The stage's long-lived tasks: one per partition of its input."""
        spec = self.task.spec
        return spec.partitions[spec.stage.topic]


def continuous_task(
    ctxs: Sequence[ContinuousContext],
) -> Callable[[int, Iterable[int]], Iterator[Any]]:
    """The function ``mapPartitionsWithIndex`` runs: partition ``index`` of each stage's
    input (of the stages that have one), until the task is killed."""
    points = next((ctx.failpoints for ctx in ctxs if ctx.failpoints), "")

    def run(index: int, _rows: Iterable[int]) -> Iterator[Any]:
        age_s = process_age_s()
        before = os.environ.get(failpoints.ENV)
        if points:  # the task's worker is its own for as long as it runs
            os.environ[failpoints.ENV] = points
        first = ctxs[0].task
        try:
            with on_worker(first):
                # What a task's start costs before `run_continuous` (fork, imports, unpickling).
                _log.info(
                    "%s %s[%d]: began %.2f s after its Python worker started",
                    first.spec.graph.name,
                    "+".join(ctx.task.spec.stage.id for ctx in ctxs if index < ctx.tasks),
                    index,
                    -1.0 if age_s is None else age_s,
                )
                run_continuous(ctxs, index)
        finally:
            if before is None:
                os.environ.pop(failpoints.ENV, None)
            else:
                os.environ[failpoints.ENV] = before
        return iter(())

    return run


class _Consumed:
    """What this task committed of its partition (`framework.runners.spark.fronts.Consumption`)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.offset: int | None = None
        self.stamp: int | None = None

    def consumed(self) -> tuple[dict[int, int], dict[int, int]]:
        offsets = {} if self.offset is None else {self.partition: self.offset}
        stamps = {} if self.stamp is None else {self.partition: self.stamp}
        return offsets, stamps


class _Loop:
    """Steps 1-3 for one partition of one stage."""

    def __init__(self, ctx: ContinuousContext, partition: int) -> None:
        task = ctx.task
        spec = task.spec
        self.ctx = ctx
        self.partition = partition
        self.topic = spec.stage.topic
        self.app, self.stage = spec.graph.name, spec.stage.id
        self.positions = spec.topics.positions(spec.stage.id)
        if self.positions not in spec.partitions:
            raise PipelineError(f"stage {self.stage}: the driver made no {self.positions}")
        self.positions_count = spec.partitions[self.positions]
        began = time.monotonic()
        # Step 1
        self.committer = TaskCommitter(
            task.bootstrap, f"{self.app}.{self.stage}.p{partition}", take_over=False
        )
        self.committer.start()
        fenced_at = time.monotonic()
        # An acker sender per task: its node time only has to grow while the task lives.
        self.sender = stable_id(
            f"{self.app}/{self.stage}/{partition}/{task.run_id}/{os.getpid()}/{time.time_ns()}"
        )
        self.node_time = 0
        self.program: StageProgram = program_for(task)
        # Step 2
        self.state_key = (self.app, self.stage, partition, task.run_id)
        self.state, _, catchup = partition_state(task, self.program, self.state_key, partition)
        restored_at = time.monotonic()
        self.position, self.counts = self._position()
        self.consumer = self._consumer(self.position)
        self.consumed = _Consumed(partition)
        # Consumed and committed up to the position: a partition with nothing new after a
        # restart heartbeats as read to its end, not only once it gets a record.
        self.consumed.offset = self.position if self.position is not None else self._first()
        self.fronts = self._fronts() if spec.stage.is_source else None
        positioned_at = time.monotonic()
        self.min_time = self._min_time()
        # An aggregate's earliest window end still to emit (-1: none): a restored state's
        # windows are due by min time alone, with no new record to run the program for.
        due = self.state.next_due() if isinstance(self.state, WindowAggregator) else None
        self.next_due = -1 if due is None else due
        # Step 3's own: a source task has nothing to do but read, so it may wait long for
        # a record (the wait ends when one comes); a keyed task looks at min time between
        # polls.
        self.idle_s = (ctx.heartbeat_ms if self.fronts is not None else ctx.poll_ms) / 1000
        self.pending: list[InRecord] = []
        self.committed_at = self.beaten = 0.0
        self.parent = os.getppid()
        # A restart's cost, piece by piece: what a recovery time is made of.
        _log.info(
            "%s %s[%d]: started in %.2f s (producer %.2f s, state %.2f s: %d "
            "changelog records in %.2f s, position %.2f s, min time %.2f s), at %s",
            self.app,
            self.stage,
            partition,
            time.monotonic() - began,
            fenced_at - began,
            restored_at - fenced_at,
            catchup.get("catchup_records", 0),
            catchup.get("catchup_ms", 0.0) / 1000,
            positioned_at - restored_at,
            time.monotonic() - positioned_at,
            "the start" if self.position is None else f"offset {self.position}",
        )

    def _position(self) -> tuple[int | None, TaskCounts]:
        """Step 2: where to read from, and what was counted up to there."""
        found = read_positions(
            self.ctx.task.bootstrap,
            self.positions,
            group=self.ctx.group,
            source=self.topic,
            partitions=[self.partition],
        )
        if self.partition not in found:
            return dict(self.ctx.starts).get(self.partition), TaskCounts()
        offset, metadata = found[self.partition]
        return offset, TaskCounts.decode(metadata, f"{self.ctx.group} on {self.topic}")

    def _consumer(self, position: int | None) -> Consumer:
        bootstrap = self.ctx.task.bootstrap
        # A long fetch wait adds no latency (the broker answers as soon as records or
        # commit markers land) and spares the broker a request every few milliseconds.
        consumer = new_consumer(
            bootstrap,
            None,
            {"enable.partition.eof": False, "max.partition.fetch.bytes": _FETCH_BYTES},
        )
        tp = TopicPartition(self.topic, self.partition, -2 if position is None else position)
        kafka_call(f"cannot read {self.topic}[{self.partition}]", lambda: consumer.assign([tp]))
        return consumer

    def _position_record(self, offset: int, counts: TaskCounts) -> OutRecord:
        return position_record(
            self.positions,
            self.positions_count,
            group=self.ctx.group,
            source=self.topic,
            partition=self.partition,
            offset=offset,
            text=counts.encode(),
        )

    def _first(self) -> int:
        """The partition's first offset: nothing below it was ever to be read."""
        tp = TopicPartition(self.topic, self.partition)
        what = f"cannot read the offsets of {self.topic}[{self.partition}]"
        low, _ = kafka_call(what, lambda: self.consumer.get_watermark_offsets(tp, timeout=10))
        return int(low)

    def _fronts(self) -> FrontHeartbeats:
        task = self.ctx.task
        spec = task.spec
        return FrontHeartbeats(
            task.bootstrap,
            self.app,
            acks_topic=spec.topics.acks,
            shards=spec.shards,
            sources={self.topic: self.consumed},
            delta_ms=spec.graph.delta_ms,
            interval_ms=self.ctx.heartbeat_ms,
            lag_ms=task.front_lag_ms,
        )

    def _min_time(self) -> Callable[[], int]:
        """Step 3b: the min time the stage prunes and completes windows by."""
        spec = self.ctx.task.spec
        if spec.stage.is_source:
            return lambda: 0
        graph = spec.graph
        segment = graph.segments().of_node[spec.stage.entry]
        view = MinTimeView(
            self.ctx.task.bootstrap,
            self.app,
            spec.shards,
            tuple(graph.segments().inbound),
            epoch=spec.epoch,
            poll_s=0.01,
        )
        view.start()
        if graph.node(spec.stage.entry).kind is Kind.AGGREGATE:
            return lambda: view.min_time(segment)
        committed = CommittedSlot(self.ctx.zookeeper, self.app)
        return lambda: min(view.min_time(segment), committed())

    def step(self, most_wait_s: float | None = None) -> bool:
        """One pass of step 3, waiting at most ``most_wait_s`` for records (None: as long
        as this loop alone would); whether it took or committed anything."""
        ctx = self.ctx
        if os.getppid() != self.parent:
            # Orphaned: Spark's JVM died (kill -9) and nothing will ever kill this
            # task; a new driver's tasks would fence it, but none may come.
            raise TaskOrphaned(f"stage {self.stage}: the Spark worker that ran it is gone")
        # Step 3a: what arrives before the next commit is due joins it
        now = time.monotonic()
        gap_s = ctx.commit_ms / 1000
        wait_s = max(0.0, gap_s - (now - self.committed_at)) if self.pending else self.idle_s
        if most_wait_s is not None:
            wait_s = min(wait_s, most_wait_s)
        took = False
        if len(self.pending) < ctx.max_records:
            room = ctx.max_records - len(self.pending)
            records = self._records(take(self.consumer, room, wait_s))
            took = bool(records)
            if records and not self.pending and self.fronts is not None:
                # Step 3d, ahead of the commit: everything read before is committed.
                self.fronts.ahead(self.topic, self.partition, records[0].timestamp_ms)
            self.pending.extend(records)
        # Step 3b
        min_time = self.min_time()
        # Step 3c
        now = time.monotonic()
        full = len(self.pending) >= ctx.max_records
        due = (self.pending and (full or now - self.committed_at >= gap_s)) or self._due(min_time)
        if due:
            self._commit(self.pending, min_time)
            self.pending, self.committed_at = [], now
        # Step 3d
        if self.fronts is not None and now - self.beaten >= ctx.heartbeat_ms / 1000:
            if not self.pending:
                self._past_markers()
            self.fronts.beat()
            self.beaten = now
        return took or bool(due)

    def _past_markers(self) -> None:
        """Step 3d: with nothing taken and not committed, the partition is consumed up to
        the consumer's position, which steps over transaction markers and aborted records:
        the offset after the last record stays below the end offset forever when a
        transaction's commit marker follows it, and the front would never heartbeat as
        read to its end (a transactional writer's last records would wait for more)."""
        tp = TopicPartition(self.topic, self.partition)
        what = f"cannot read the position in {self.topic}[{self.partition}]"
        (position,) = kafka_call(what, lambda: self.consumer.position([tp]))
        offset = position.offset
        if offset >= 0 and (self.consumed.offset is None or offset > self.consumed.offset):
            self.consumed.offset = offset

    def _records(self, messages: list[Message]) -> list[InRecord]:
        out: list[InRecord] = []
        for msg in messages:
            # An event, or an error the client gets over by itself; KafkaClientError (a
            # restart's matter) for one it cannot.
            if not is_record(msg, self.topic):
                continue
            headers = cast("list[tuple[str, bytes | None]]", msg.headers() or [])
            out.append(
                InRecord(
                    self.topic,
                    self.partition,
                    msg.offset() or 0,
                    msg.timestamp()[1],
                    msg.key(),
                    msg.value(),
                    tuple((k, v or b"") for k, v in headers),
                )
            )
        return out

    def _due(self, min_time: int) -> bool:
        """Whether min time alone gives the stage work: a window to emit, or the
        deletions an emission put off (`PaneAggregator.defer`), once the commit interval
        allows. (A grouping prunes with its next records, as a micro-batch task does.)"""
        if 0 <= self.next_due <= min_time:
            return True
        state = self.state
        waited = time.monotonic() - self.committed_at >= self.ctx.commit_ms / 1000
        return isinstance(state, PaneAggregator) and state.deferred > 0 and waited

    def _commit(self, records: list[InRecord], min_time: int) -> None:
        task, spec = self.ctx.task, self.ctx.task.spec
        slots: dict[int, int] = {}
        lift: Lift | None = None
        if records and spec.stage.is_source:
            floors = self.fronts.floors(self.topic) if self.fronts is not None else {}
            slots, lift = lift_late(_with_floors(task, floors), self.partition, records)
        state: StageState | None = self.state
        prune(state, min_time)
        # Step 3d, first half: the heartbeat its last record allows rides in the commit.
        stamp = max(r.timestamp_ms for r in records) if records else None
        beat = None
        if stamp is not None and self.fronts is not None:
            beat = self.fronts.carried(self.topic, self.partition, stamp)
        self.node_time += 1
        began = time.monotonic()
        result = self.program.run(
            records,
            state,
            self.sender,
            self.node_time,
            min_time=min_time,
            slots=slots,
            partition=self.partition,
            heartbeats=() if beat is None else (beat,),
            defer_deletions=True,
        )
        if result.next_due != -2:
            self.next_due = result.next_due
        out: list[OutRecord] = list(result.records)
        if lift is not None:  # committed with the outputs it moved, or not at all
            out.append(OutRecord(spec.topics.lifts, 0, lift.key(), lift.encode()))
        if records:
            self.position = records[-1].offset + 1
        counts = self.counts.add(
            TaskCounts(
                len(records),
                result.items_in,
                result.items_out,
                result.dead_letters,
                result.tombstones,
                lifted=len(slots),
                last_ms=-1 if stamp is None else stamp,
                clock_ahead_ms=_ahead(self.fronts),
            )
        )
        ran = time.monotonic()
        if out or records:
            # Every commit moves the counts, so every one commits the position (moved or
            # not) with them: they count exactly what committed. As a record of the
            # transaction, not the group's offsets (`framework.kafka.stage_positions`).
            if self.position is not None:
                out.append(self._position_record(self.position, counts))
            self.committer.commit(out, self.ctx.group, {})
            self.counts = counts
        # Where a backlog's time goes, commit by commit (docs/latency.md).
        _log.debug(
            "%s %s[%d]: %d records in, %d items out, %d records written, min time %d: "
            "program %.3f s, commit %.3f s",
            self.app,
            self.stage,
            self.partition,
            len(records),
            result.items_out,
            len(out),
            min_time,
            ran - began,
            time.monotonic() - ran,
        )
        if beat is not None and self.fronts is not None:
            self.fronts.sent_with(beat)
        if stamp is not None:
            self.consumed.offset, self.consumed.stamp = self.position, stamp


def _ahead(fronts: FrontHeartbeats | None) -> int:
    """How far ``fronts``' clock is ahead of the broker's (ms, 0 if behind or unknown)."""
    offset = None if fronts is None else fronts.broker_offset_ms
    return 0 if offset is None else max(0, -offset)


def _with_floors(task: TaskContext, floors: dict[int, int]) -> TaskContext:
    """``task`` with this task's own heartbeats as the floors `lift_late` checks."""
    return replace(task, floors=tuple(floors.items()))


def run_continuous(ctxs: Sequence[ContinuousContext], index: int) -> None:
    """Steps 1-3 for partition ``index`` of each stage in ``ctxs`` that has one; returns
    only by failing.

    Stages that share a task take turns in its one Python worker (one core at most), each
    loop with its own transactional id, consumer and state, so what each commits is what
    it would commit in a task of its own. A turn waits for records at most its share of
    ``poll_ms``, and not at all while the last round found work, so no loop's min time or
    records wait longer than alone by more than the others' turns.
    """
    loops: list[_Loop] = []
    try:
        for ctx in ctxs:
            if index < ctx.tasks:
                loops.append(_Loop(ctx, index))
        take_turns([loop.step for loop in loops], min(ctx.poll_ms for ctx in ctxs) / 1000)
    except BaseException:
        # The state may be ahead of what committed: a task after this one in the same
        # worker must read it back from the changelog.
        for loop in loops:
            drop_state(loop.state_key)
        raise


def take_turns(steps: Sequence[Callable[[float | None], bool]], poll_s: float) -> None:
    """Run each of ``steps`` in turn until one raises: alone, a step waits as long as its
    loop would; with others, at most its share of ``poll_s``, and not at all after a round
    in which any step found work (a busy loop's next records are likely there already)."""
    if len(steps) == 1:
        (step,) = steps
        while True:
            step(None)
    share_s = poll_s / max(1, len(steps))
    busy = True
    while True:
        worked = [step(0.0 if busy else share_s) for step in steps]
        busy = any(worked)
