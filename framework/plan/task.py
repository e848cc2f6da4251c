"""One stage task: a batch of Kafka records of one partition in, everything to commit out.

Pure with respect to I/O: the caller reads the records and commits the result in one Kafka
transaction. Per task and batch:

1. Decode each record. A source stage computes the global time from the record's own
   coordinates (it is the front); a shuffle stage reads a frame of items
   (`framework.wire.frames`) and acks the receipt of each by its own ack value.
   Undecodable user records become dead letters; a malformed frame fails the task.
2. Run the record through the stage's nodes in-process; items passed between nodes of one
   task need no acks (the send and the receipt would cancel in the local acker). A stage
   that starts with a grouping hands it the whole batch (`Grouping.push_batch`), then
   runs each of its outputs through the rest of the stage.
3. Every output leaving the stage gets a fresh random ack value and is acked as sent into
   the segment of the node it travels to, except an item bound for a sink: the barrier
   acks no receipt, the transaction that writes the item is its receipt (the barrier
   reads to the committed end before it applies a min time, `framework.barrier.service`).
   The outputs of the task to one partition of a topic are written as a few frames. An
   item bound for a sink leaves as the sink's output record (`Sink.encode_item`: a Kafka
   sink's key and value bytes with the item's meta header and tag), so the barrier only
   moves bytes; a payload the sink cannot encode is a dead letter here.
   Items that reach a ``map_async`` node wait there until the batch has run through the
   stage; then their calls run together (`framework.core.calls`) and each output goes on
   from the node, in the items' order, until no item waits.
4. A user function that raises turns the item it failed on into a dead letter (with the
   stage input's coordinates and the traceback), or fails the task in fail-fast mode.
5. An aggregate stage emits every window that the min time the driver passed completes,
   through the rest of the stage, and acks its holds into its downstream segment: a slot
   becomes held with a value fixed by (aggregate, partition, slot) and released with it.
6. Close the batch: the local acker's XOR per (segment, slot) goes to the acker shards as
   one record per shard, ending with this node's time, so the acks become visible exactly
   when the outputs do.
7. A grouping's, aggregate's or converge's changed buckets are appended to its changelog,
   in the same transaction (an aggregate's or converge's min time too).

Map-side combining: items bound for a ``combinable`` aggregate are pre-reduced per key
and window pane before they leave; the partial carries the largest meta of its payloads,
so the aggregate's result (meta of the window's last item) is the same either way.
"""

from __future__ import annotations

import os
import random
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from framework.core.acker.local import LocalAcker
from framework.core.aggregate import aggregator
from framework.core.batches import KeyByBatchesOp
from framework.core.calls import MapAsyncOp
from framework.core.columns import COLUMN_OPS
from framework.core.converge import Converge
from framework.core.graph import Kind, Port, Sink
from framework.core.grouping import Grouping, keyed_of
from framework.core.messages import Ack, Heartbeat
from framework.core.meta import Meta, Record
from framework.core.ops import KeyByOp, Keyed, Operation, key_bytes, op_id_of
from framework.core.panes import PaneAggregator
from framework.core.physical import stateless_operation
from framework.core.reducers import Reducer
from framework.core.time import GlobalTime, front_id, slot_of
from framework.core.windows import Aggregation, WindowAggregator
from framework.errors import (
    DecodeError,
    EncodeError,
    FlamepipeError,
    PipelineError,
    Unauthenticated,
    UserFunctionError,
)
from framework.plan.columnar import emit_results, flow_columns
from framework.plan.pane_intake import take_frames
from framework.plan.stage_spec import StageSpec, TaskResult
from framework.plan.stage_state import (
    StageState,
    changelog_records,
    hold_value,
)
from framework.plan.stages import Exit, ExitKind
from framework.wire.acks import shard_batches
from framework.wire.auth import MAC_HEADER, authentic
from framework.wire.bundles import barrier_instance
from framework.wire.dead_letters import dead_letter
from framework.wire.frames import FRAME_HEADERS, FrameBuilder, read_items
from framework.wire.records import InRecord, OutRecord
from framework.wire.serde import Pickle

_PICKLE = Pickle()
# Entries whose operation is the stage's state (`StageProgram.new_state`), or none.
_STATEFUL_ENTRIES = (Kind.SOURCE, Kind.GROUP, Kind.AGGREGATE, Kind.CONVERGE)
RECORD_ERRORS = (UserFunctionError, EncodeError)
"""Errors of one record (a user function failed on it, its output cannot be encoded): its
input becomes a dead letter, or, in fail-fast mode, the task fails."""


class _ExitRoute(NamedTuple):
    """Where an exit port's records go, resolved once per stage."""

    node: str
    target: str
    topic: str
    partitions: int
    segment: str  # the target's, which the item is acked as sent into
    shuffle: bool  # to a grouping: partitioned by key hash, keyed frames
    aggregation: Aggregation | None  # the target's, if it may be pre-reduced
    pane: int  # slots of the target's window panes (combining)
    encode: Callable[[Meta, Any], Any] | None  # a sink's: the item as its output record
    encode_many: Callable[[list[Meta], list[Any]], list[Any]] | None  # the same, in bulk
    sink_partitions: int  # a sink's with several barriers: its topic's partition count
    # False across a fused query's shuffle (the items never leave the batch) and into a
    # sink (the commit that writes them is their receipt)
    acked: bool


class StageProgram:
    """A stage compiled for execution: operations, routes inside the stage, exits."""

    def __init__(self, spec: StageSpec) -> None:
        self.spec = spec
        graph = spec.graph
        self._segment = graph.segments().of_node
        self._kinds = {node.id: node.kind for node in graph.nodes}
        consumers = graph.consumers()
        self._ops: dict[str, Operation] = {}
        self._routes: dict[str, list[str | None]] = {}
        for node_id in spec.stage.nodes:
            node = graph.node(node_id)
            if node.kind not in _STATEFUL_ENTRIES:
                self._ops[node_id] = stateless_operation(graph.name, node)
            self._routes[node_id] = [
                None if Port(node_id, p) in spec.stage.exits else consumers[Port(node_id, p)].id
                for p in range(node.ports)
            ]
        self._exits = {port: self._route(port, exit_) for port, exit_ in spec.stage.exits.items()}
        entry = graph.node(spec.stage.entry)
        self.window = entry.window if entry.kind is Kind.GROUP else 0
        self.aggregation = entry.aggregation if entry.kind is Kind.AGGREGATE else None
        self.entry_op_id = op_id_of(graph.name, entry.id)
        # The segment an aggregate's results start (its holds live there).
        self.hold_segment = ""
        if self.aggregation is not None:
            self.hold_segment = self._segment[consumers[Port(entry.id, 0)].id]
        self.chain = self._column_chain() if spec.columnar else None
        self.results_chain = self._results_chain() if spec.columnar else None

    def _column_chain(self) -> tuple[list[Operation], _ExitRoute] | None:
        """A source stage's operations and exit, if they form one chain that runs on
        columns (`framework.plan.columnar`)."""
        if not self.spec.stage.is_source or self.spec.source is None:
            return None
        return self._chain(COLUMN_OPS)

    def _results_chain(self) -> tuple[list[Operation], _ExitRoute] | None:
        """An aggregate's operations after it and the sink its results leave for, if they
        form one chain that runs on columns (`framework.plan.columnar.emit_results`)."""
        if self.aggregation is None:
            return None
        chain = self._chain(COLUMN_OPS, refused=(KeyByOp, KeyByBatchesOp))
        return chain if chain is not None and chain[1].encode_many is not None else None

    def _chain(
        self, kinds: tuple[type, ...], refused: tuple[type, ...] = ()
    ) -> tuple[list[Operation], _ExitRoute] | None:
        """The operations after the stage's entry and its exit, if each node has one way on
        and every operation is one of ``kinds`` and none of ``refused``."""
        ops: list[Operation] = []
        node_id = self.spec.stage.entry
        while True:
            routes = self._routes[node_id]
            if len(routes) != 1:
                return None
            target = routes[0]
            if target is None:
                return ops, self._exits[Port(node_id, 0)]
            op = self._ops.get(target)
            if op is None or not isinstance(op, kinds) or isinstance(op, refused):
                return None
            ops.append(op)
            node_id = target

    def _route(self, port: Port, exit_: Exit) -> _ExitRoute:
        target = self.spec.graph.node(exit_.target)
        aggregation = target.aggregation
        combining = aggregation is not None and aggregation.combinable
        sink_partitions = 0
        if isinstance(target.endpoint, Sink) and self.spec.partitions[exit_.topic] > 1:
            sink_partitions = self._sink_partitions(target.endpoint)
        return _ExitRoute(
            port.node,
            exit_.target,
            exit_.topic,
            self.spec.partitions[exit_.topic],
            self._segment[exit_.target],
            exit_.kind is ExitKind.SHUFFLE,
            aggregation if combining else None,
            aggregation.pane_slots(self.spec.graph.delta_ms) if combining and aggregation else 0,
            target.endpoint.encode_item if isinstance(target.endpoint, Sink) else None,
            target.endpoint.encode_items if isinstance(target.endpoint, Sink) else None,
            sink_partitions,
            exit_.target != self.spec.unacked_exit and exit_.kind is not ExitKind.SINK,
        )

    def _sink_partitions(self, sink: Sink) -> int:
        """The partition count of a sink with several barriers: each item goes to the
        pre-barrier partition of its output partition's barrier (`barrier_instance`)."""
        count = self.spec.partitions.get(sink.name)
        if count is None:
            raise PipelineError(f"stage {self.spec.stage.id}: no partition count for {sink.name}")
        return count

    def new_state(self) -> StageState | None:
        """Fresh state for one hash unit, if this stage starts with a grouping or aggregate."""
        if self.window:
            return Grouping(self.entry_op_id, self.window)
        if self.aggregation is not None:
            return aggregator(self.entry_op_id, self.aggregation, self.spec.graph.delta_ms)
        entry = self.spec.graph.node(self.spec.stage.entry)
        if entry.kind is Kind.CONVERGE:
            join: Any = entry.fn  # a node's fn is typed for one argument; a join takes two
            return Converge(self.entry_op_id, join)
        return None

    def _in_bulk(self, run: _TaskRun, records: list[InRecord], state: StageState | None) -> bool:
        """Steps 1-3 without a record per item, if the batch allows: a source stage's
        chain on columns (`framework.plan.columnar`), or frames into the cells of a
        combinable window (`framework.plan.pane_intake`). False: nothing was done."""
        if self.chain is not None:
            return flow_columns(run, *self.chain, records)
        if self.spec.columnar and isinstance(state, PaneAggregator):
            return take_frames(run, state, records)
        return False

    def _flow_items(self, run: _TaskRun, records: list[InRecord], state: StageState | None) -> None:
        """Steps 1-4 item by item."""
        decoded: list[tuple[Record, InRecord, int]] = []
        for record in records:
            run.decode(record, decoded)
        run.result.items_in = len(decoded)
        # Any order gives the same output; global-time order spares the grouping repairs
        # for disorder inside one batch (a shuffle partition interleaves upstream tasks).
        decoded.sort(key=_by_meta)
        if isinstance(state, Grouping):
            run.flow_grouped(state, decoded)
        else:
            for item, record, index in decoded:
                run.flow(item, record, index)

    def run(
        self,
        records: Iterable[InRecord],
        state: StageState | None,
        sender: int,
        node_time: int,
        rng: Callable[[], int] | None = None,
        *,
        min_time: int = 0,
        slots: Mapping[int, int] | None = None,
        partition: int = -1,
        heartbeats: Sequence[Heartbeat] = (),
        defer_deletions: bool = False,
    ) -> TaskResult:
        """Process one partition's batch; see the module docstring for the steps.

        ``min_time``: the min time of the stage's segment, which completes an aggregate's
        windows. ``slots``: a source batch's records whose slot is not their timestamp's,
        by offset (lifted: `framework.wire.lifts`). ``partition``: the input partition,
        which a batch without records (windows completed by min time alone) cannot tell:
        its state's changelog partition and its windows' hold acks are that partition's.
        ``heartbeats``: front heartbeats the batch's ack batches carry (a continuous
        source task's, covering what the batch read: they commit with its acks).
        ``defer_deletions``: a combinable window's emitted keys are deleted from the
        changelog by the next run's commit, not this one's (`changelog_records`): a
        continuous task, whose next commit comes at once.
        """
        run = _TaskRun(self, state, rng or _ack_value)
        try:
            run.partition = partition
            run.slots = slots or {}
            result = run.result
            records = records if isinstance(records, list) else list(records)
            result.records_in = len(records)
            if records:
                result.last_offset = max(r.offset for r in records)
                result.max_timestamp_ms = max(r.timestamp_ms for r in records)
            if records and self._in_bulk(run, records, state):
                result.columnar = True
            else:
                self._flow_items(run, records, state)
            if isinstance(state, WindowAggregator):
                # Step 5
                replayed = state.replayed
                run.emit_windows(state, min_time)
                result.replayed = state.replayed - replayed
                due = state.next_due()
                result.next_due = -1 if due is None else due
            run.call_services()
            run.write_frames()
            # Step 6
            run.close(sender, node_time, heartbeats)
            # Step 7
            if state is not None:
                run.changelog(state, run.partition, defer_deletions)
            return result
        finally:
            # The run's closures refer back to it and the cyclic collector is off in a
            # task (`framework.runners.spark.tasks.on_worker`), for good in a long-running
            # one: the cycle would keep every batch's run and outputs alive.
            run.release()


def _batch_only(record: Record) -> list[Record]:
    # A grouping is always its stage's entry and takes the whole batch (`flow_grouped`).
    raise PipelineError("a grouping takes a batch, not one record at a time")


def _by_meta(entry: tuple[Record, InRecord, int]) -> Meta:
    return entry[0].meta


_ACKS = [np.random.default_rng()]
"""Where ack values come from, seeded from the OS: two processes must never draw the same
values (two lost items with equal ack values would cancel and hide each other), so a forked
child seeds its own, as `random` does for `_ack_value`."""
os.register_at_fork(after_in_child=lambda: _ACKS.__setitem__(0, np.random.default_rng()))


def _ack_value() -> int:
    # Never 0: a zero ack would leave the XOR unchanged and hide an item from the acker.
    return random.getrandbits(64) | 1


class _TaskRun:
    """The mutable part of one task execution."""

    def __init__(
        self, program: StageProgram, state: StageState | None, rng: Callable[[], int]
    ) -> None:
        self.program = program
        self.spec = program.spec
        self.state = state
        self.rng = rng
        self.acker = LocalAcker()
        self.result = TaskResult()
        self.partition = -1
        self.frames: dict[tuple[str, int], FrameBuilder] = {}
        self._fronts: dict[tuple[str, int], int] = {}
        self.slots: Mapping[int, int] = {}  # lifted source records (`StageProgram.run`)
        # Combining: (exit, key, pane) -> [largest meta, key hash, reduced value, route]
        self._partials: dict[tuple[str, object, int], list[Any]] = {}
        entry = self.spec.stage.entry
        self.entry_segment = program._segment[entry]
        self._appliers: dict[str, Callable[[Record], list[Record]]] = {}
        self._pushers: dict[str, Callable[[Record], None]] = {}
        for node_id in self.spec.stage.nodes:
            kind = program._kinds[node_id]
            if kind is Kind.SOURCE:
                self._appliers[node_id] = _alone
            elif kind is Kind.GROUP:
                self._appliers[node_id] = _batch_only
            elif kind is Kind.AGGREGATE:
                self._appliers[node_id] = self._aggregate
            elif kind is Kind.CONVERGE:
                self._appliers[node_id] = self._converge
            elif kind is Kind.MAP_ASYNC:
                self._appliers[node_id] = partial(self._wait_for_call, node_id)
            else:
                self._appliers[node_id] = program._ops[node_id].apply
        # Step 3, map_async: items waiting for their calls, with the input they are due to
        # (None: a window's result).
        self._origin: tuple[Record, InRecord, int] | None = None
        self._waiting: list[tuple[str, Record, tuple[Record, InRecord, int] | None]] = []
        # Window results for sinks, made into output records in bulk once all are out
        # (`emit_windows`); None while input items flow (an item's error is its own).
        self._for_sinks: list[tuple[_ExitRoute, Meta, Any]] | None = None

    def release(self) -> None:
        """Drop the per-node closures (bound to this run): no reference cycle is left."""
        self._appliers.clear()
        self._pushers.clear()

    def decode(self, record: InRecord, into: list[tuple[Record, InRecord, int]]) -> None:
        """Step 1 for one input record: its items, with their index in a frame, ``into``."""
        self.partition = record.partition
        if not self.spec.stage.is_source:
            self._decode_frame(record, into)
            return
        try:
            into.append((self._decode_source(record), record, -1))
        except DecodeError as exc:
            self._dead(record, f"undecodable record: {exc}", exc)

    def flow(self, item: Record, record: InRecord, index: int) -> None:
        """Steps 2-4 for one decoded item (``index``: its place in a frame, else -1)."""
        self._origin = (item, record, index)
        try:
            self._flow(self.spec.stage.entry, item)
        except RECORD_ERRORS as exc:
            self.failed(exc, item, record, index)
        finally:
            self._origin = None

    def _wait_for_call(self, node_id: str, record: Record) -> list[Record]:
        self._waiting.append((node_id, record, self._origin))
        return []

    def call_services(self) -> None:
        """Step 3, map_async: run the waiting items' calls, one node's batch at a time, and
        send each output on; outputs may reach another map_async node, which waits next."""
        while self._waiting:
            node_id = self._waiting[0][0]
            batch = [w for w in self._waiting if w[0] == node_id]
            self._waiting = [w for w in self._waiting if w[0] != node_id]
            op = self.program._ops[node_id]
            assert isinstance(op, MapAsyncOp)
            outcomes = op.apply_batch([record for _, record, _ in batch])
            for (_, record, origin), outcome in zip(batch, outcomes, strict=True):
                self._origin = origin
                try:
                    if isinstance(outcome, UserFunctionError):
                        raise outcome
                    self._forward(node_id, outcome)
                except RECORD_ERRORS as exc:
                    if origin is None:
                        letter = _item_record(self._result_record(), record)
                        self._dead(letter, f"{exc} (a window's result)", exc.__cause__ or exc)
                    else:
                        self.failed(exc, *origin)
                finally:
                    self._origin = None

    def _result_record(self) -> InRecord:
        """Where a dead letter of a window's result says it was: the stage's input."""
        return InRecord(self.spec.stage.topic, self.partition, -1, 0, None, None)

    def flow_grouped(self, grouping: Grouping, decoded: list[tuple[Record, InRecord, int]]) -> None:
        """Steps 2-4 for a stage that starts with a grouping: the grouping takes the whole
        batch (`Grouping.push_batch`: a key out of order is repaired once, not once per
        item), then each output goes through the rest of the stage. A failure there is a
        dead letter of the input item the output is due to."""
        entry = self.spec.stage.entry
        batch: list[tuple[Record, InRecord, int]] = []
        for one in decoded:
            try:
                keyed_of(one[0])
            except RECORD_ERRORS as exc:
                self.failed(exc, *one)
            else:
                batch.append(one)
        outputs = grouping.push_batch([item for item, _, _ in batch])
        self.result.tombstones += sum(1 for _, out in outputs if out.meta.tombstone)
        for cause, out in outputs:
            try:
                self._forward(entry, [out])
            except RECORD_ERRORS as exc:
                self.failed(exc, *batch[cause])

    def failed(self, exc: FlamepipeError, item: Record, record: InRecord, index: int) -> None:
        """Step 4: the input of a failed item becomes a dead letter (or fails the task)."""
        if index < 0:
            self._dead(record, str(exc), exc.__cause__ or exc)
        else:
            reason = f"{exc} (item {index} of a frame)"
            self._dead(_item_record(record, item), reason, exc.__cause__ or exc)

    def _decode_source(self, record: InRecord) -> Record:
        # Step 1
        spec = self.spec
        if spec.source is None:
            raise PipelineError(f"source stage {spec.stage.id} has no decoder")
        front = self.front_of(record.topic, record.partition)
        slot = slot_of(record.timestamp_ms, spec.graph.delta_ms)
        if self.slots:
            slot = self.slots.get(record.offset, slot)
        gt = GlobalTime(slot, front, record.offset)
        return Record(Meta(gt), spec.source.payload(record))

    def front_of(self, topic: str, partition: int) -> int:
        """The front id of a source partition."""
        # A task reads one partition: its front id (a blake2b digest) is computed once.
        front = self._fronts.get((topic, partition))
        if front is None:
            front = self._fronts[(topic, partition)] = front_id(topic, partition)
        return front

    def _decode_frame(self, record: InRecord, into: list[tuple[Record, InRecord, int]]) -> None:
        # Step 1
        where = f"{record.topic}[{record.partition}]@{record.offset}"
        if not authentic(
            "stage task", record.topic, record.key, record.value, record.headers, where=where
        ):
            reason = f"unauthenticated: no valid {MAC_HEADER}, never decoded"
            self._dead(record, reason, Unauthenticated(f"{where}: {reason}"))
            return
        items = read_items(record.headers, record.value, where)
        append = into.append
        if self.spec.unacked_input:  # no receipt: the items were never sent-acked
            for index, (meta, _, payload) in enumerate(items):
                append((Record(meta, payload), record, index))
            return
        segment = self.entry_segment
        ack = self.acker.ack
        for index, (meta, value, payload) in enumerate(items):
            ack(segment, meta[0][0], value)
            append((Record(meta, payload), record, index))

    def _flow(self, node_id: str, record: Record) -> None:
        """Step 2: depth-first through the stage, so outputs keep their causal order.

        A node's outputs leaving the stage are emitted first, then each output staying in
        it is followed to the end before the next one.
        """
        push = self._pushers.get(node_id)
        if push is None:
            push = self._pushers[node_id] = self._pusher(node_id)
        push(record)

    def _pusher(self, node_id: str) -> Callable[[Record], None]:
        """``node_id`` applied and its outputs sent on, resolved once per node and task.

        A chain of one-port nodes becomes nested closures: per item, no route lookups.
        """
        apply = self._appliers[node_id]
        routes = self.program._routes[node_id]
        if len(routes) != 1:
            return lambda record: self._forward(node_id, apply(record))
        target = routes[0]
        send: Callable[[Record], None]
        if target is None:
            route = self.program._exits[Port(node_id, 0)]
            send = partial(self._combine if route.aggregation is not None else self._emit, route)
        else:
            send = self._pushers.get(target) or self._pushers.setdefault(
                target, self._pusher(target)
            )

        def push(record: Record) -> None:
            for out in apply(record):
                send(out)

        return push

    def _forward(self, node_id: str, outputs: list[Record]) -> None:
        routes = self.program._routes[node_id]
        if len(routes) == 1:  # the common case: one port, one way on
            target = routes[0]
            if target is None:
                route = self.program._exits[Port(node_id, 0)]
                send = self._combine if route.aggregation is not None else self._emit
                for out in outputs:
                    send(route, out)
            else:
                for out in outputs:
                    self._flow(target, out)
            return
        staged: list[tuple[str, Record]] = []
        for port, out in enumerate(outputs):
            target = routes[port]
            if target is None:
                route = self.program._exits[Port(node_id, port)]
                (self._combine if route.aggregation is not None else self._emit)(route, out)
            else:
                staged.append((target, out))
        for target, out in staged:
            self._flow(target, out)

    def _converge(self, record: Record) -> list[Record]:
        assert isinstance(self.state, Converge)
        return self.state.push(record)

    def _aggregate(self, record: Record) -> list[Record]:
        assert isinstance(self.state, WindowAggregator)
        return self.state.push(record)

    def emit_windows(self, state: WindowAggregator, min_time: int) -> None:
        """Step 5: the windows ``min_time`` completes, then the holds that moved."""
        entry = self.spec.stage.entry
        results = state.advance(min_time)
        chain = self.program.results_chain
        self._for_sinks = []
        try:
            if chain is None or not emit_results(self, *chain, results):
                self._forward(entry, results)
                self._send_for_sinks(self._for_sinks)
        except RECORD_ERRORS as exc:
            # A window's result is no input record: nothing to send to the dead letters.
            raise UserFunctionError(f"after {entry}: {exc}") from exc
        finally:
            self._for_sinks = None
        acquired, released = state.take_holds()
        segment, ack = self.program.hold_segment, self.acker.ack
        for slot in acquired + released:
            ack(segment, slot, hold_value(self.program.entry_op_id, self.partition, slot))

    def _combine(self, route: _ExitRoute, record: Record) -> None:
        """Step 3 for a combinable aggregate: fold the item into its key's pane partial."""
        keyed = record.value
        meta = record.meta
        if not isinstance(keyed, Keyed) or meta.tombstone:
            self._emit(route, record)  # the error, or a case validation rules out
            return
        index = (route.target, keyed.key, meta.gt.slot // route.pane)
        pending = self._partials.get(index)
        reduce = route.aggregation.reduce if route.aggregation is not None else None
        assert reduce is not None
        if pending is None:
            value = reduce.start(keyed.value) if isinstance(reduce, Reducer) else keyed.value
            self._partials[index] = [meta, keyed.hash, value, route]
            return
        try:
            pending[2] = reduce(pending[2], keyed.value)
        except Exception as exc:
            raise UserFunctionError(f"reduce of {route.target} failed on {keyed.value!r}") from exc
        pending[0] = max(pending[0], meta)

    def _send_for_sinks(self, items: list[tuple[_ExitRoute, Meta, Any]]) -> None:
        """Step 3 for window results into sinks: each sink's output records made in bulk
        (`Sink.encode_items`: a Kafka sink signs them in one loop), then sent in order."""
        by_route: dict[int, tuple[_ExitRoute, list[Meta], list[Any]]] = {}
        for route, meta, payload in items:
            found = by_route.get(id(route))  # a route's tuple is long: hashing it costs
            if found is None:
                found = by_route[id(route)] = (route, [], [])
            found[1].append(meta)
            found[2].append(payload)
        send = self.send
        for route, metas, payloads in by_route.values():
            assert route.encode_many is not None
            for meta, value in zip(metas, route.encode_many(metas, payloads), strict=True):
                send(route, meta, value)

    def _emit(self, route: _ExitRoute, record: Record) -> None:
        # Step 3
        meta = record.meta
        if self._for_sinks is not None and route.encode_many is not None:
            self._for_sinks.append((route, meta, record.value))
            return
        value = record.value if route.encode is None else route.encode(meta, record.value)
        self.send(route, meta, value)

    def send(self, route: _ExitRoute, meta: Meta, value: Any) -> None:
        """Step 3 for an item leaving as ``value`` (a sink's record, else its payload)."""
        ack = self.rng()
        if route.acked:
            self.acker.ack(route.segment, meta.gt.slot, ack)
        if route.shuffle:
            if not isinstance(value, Keyed):
                raise UserFunctionError(f"{route.node} must key its output before {route.target}")
            partition = value.hash % route.partitions
        elif route.sink_partitions:  # the value is the output record (key, value, meta, mac)
            key: bytes | None = value[0]
            partition = barrier_instance(key, meta, route.sink_partitions, route.partitions)
        else:
            partition = meta.gt.front % route.partitions
        self.builder(route, partition).add(meta, ack, value)
        self.result.items_out += 1

    def builder(self, route: _ExitRoute, partition: int) -> FrameBuilder:
        """The frames of ``route``'s topic to ``partition``, in the order first used."""
        builder = self.frames.get((route.topic, partition))
        if builder is None:
            builder = self.frames[(route.topic, partition)] = FrameBuilder(route.shuffle)
        return builder

    def ack_values(self, count: int) -> list[int]:
        """``count`` fresh ack values, drawn as ``count`` calls of the task's would."""
        if self.rng is _ack_value:
            drawn = _ACKS[0].integers(0, 1 << 64, count, np.uint64, endpoint=False)
            return (drawn | np.uint64(1)).tolist()  # type: ignore[no-any-return]
        return [self.rng() for _ in range(count)]

    def write_frames(self) -> None:
        """Step 3, at the end: partials, then every partition's items as frames (no key)."""
        for (_, key, _), (meta, hash_, value, route) in self._partials.items():
            self._emit(route, Record(meta, Keyed(key, hash_, value)))
        self._partials.clear()
        records = self.result.records
        for (topic, partition), builder in self.frames.items():
            for value in builder.frames():
                records.append(OutRecord(topic, partition, None, value, FRAME_HEADERS))
        self.frames.clear()

    def _dead(self, record: InRecord, reason: str, exc: BaseException) -> None:
        # Step 4
        if self.spec.fail_fast:
            failure = type(exc) if isinstance(exc, FlamepipeError) else UserFunctionError
            raise failure(
                f"{reason} at {record.topic}[{record.partition}]@{record.offset} "
                "(fail_fast is on; turn it off to send such records to the dead-letter topic)"
            ) from exc
        trace = "".join(traceback.format_exception(exc))
        key, value, headers = dead_letter(
            record.key,
            record.value,
            reason,
            self.spec.stage.id,
            record.topic,
            record.partition,
            record.offset,
            trace,
        )
        topic = self.spec.topics.dlq
        self.result.records.append(OutRecord(topic, None, key, value, tuple(headers)))
        self.result.dead_letters += 1

    def close(self, sender: int, node_time: int, heartbeats: Sequence[Heartbeat] = ()) -> None:
        """Step 6: one ack batch per shard, closed by this sender's node time."""
        acks = [a for a in self.acker.flush() if isinstance(a, Ack)]
        if not acks and not heartbeats:
            return
        topic = self.spec.topics.acks
        batches = shard_batches(sender, node_time, acks, self.spec.shards, heartbeats)
        for shard, value in batches:
            self.result.records.append(OutRecord(topic, shard, None, value))

    def changelog(self, state: StageState, record_partition: int, defer: bool = False) -> None:
        """Step 7: the new state of every changed bucket (None: deleted), the min time."""
        topic = self.spec.topics.state(self.spec.stage.entry)
        for key, value in changelog_records(state, defer_deletions=defer):
            self.result.records.append(OutRecord(topic, record_partition, key, value))


def _alone(record: Record) -> list[Record]:
    """A source node passes its record on as it is."""
    return [record]


def _item_record(frame: InRecord, item: Record) -> InRecord:
    """What a dead letter keeps of one item of a frame: the record it had before frames.

    Key and value are the item's own (the key's canonical bytes, the pickled payload), so
    the letter holds that item alone; the coordinates are the frame's.
    """
    payload = item.value
    key = key_bytes(payload.key) if isinstance(payload, Keyed) else None
    return frame._replace(key=key, value=_PICKLE.dumps(payload), headers=())
