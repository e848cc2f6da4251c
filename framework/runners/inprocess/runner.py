"""The in-process executor: runs a pipeline graph with the real acker and barrier.

Ack discipline (FlameStream runtime; the tracker paper), which every delivery mode keeps:

1. A front acks an item into the segment of the node it goes to when it ingests it, and
   heartbeats only slots that none of its remaining items is below.
2. An operation that receives an item acks each output as sent (into the output's
   segment), and only then acks the receipt of the input.
3. An aggregate acks a hold into its downstream segment for every slot it buffers items
   of, and acks it again after the results that needed them were sent.
4. An item bound for a barrier is not acked at all: on Kafka the transaction that writes
   it is its receipt. So before a min-time notification releases a barrier's bundle, the
   barrier takes every item still on its way to it (on Kafka: it reads its input to the
   end it asked the broker for after the notification). Min-time notifications of a
   segment prune its groupings, complete its aggregates' windows and release its
   barriers' bundles.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from framework.core.acker.tracker import Acker
from framework.core.barrier import Bundle
from framework.core.graph import Graph, Kind
from framework.core.messages import MinTimeNotification
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed
from framework.errors import EncodeError, PipelineError, ProtocolViolation, UserFunctionError
from framework.runners.inprocess.columns import Chain, run_chain
from framework.runners.inprocess.delivery import Delivery, InOrder, Late, Shuffled
from framework.runners.inprocess.routes import Front, Plan

_RUN = 64  # most items of one front a columnar ingest takes


class _Message(NamedTuple):
    node: str
    record: Record
    segment: str
    ack: int


class DeadLetter(NamedTuple):
    """An item a node could not process (its function raised, it was late): what a
    runner on Kafka would send to the dead-letter topic, with the reason. ``payload``:
    the item's payload (without its key, after a ``key_by``)."""

    node: str
    reason: str
    payload: object


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run released per sink (by sink name), and how much repair it took."""

    bundles: Mapping[str, tuple[Bundle, ...]]
    repairs: int  # tombstones emitted by groupings
    steps: int
    dead_letters: tuple[DeadLetter, ...] = ()  # as the dead-letter topic would hold them

    def records(self, sink: str | None = None) -> list[Record]:
        """Released records of ``sink`` (may be omitted when there is one) in order."""
        if sink is None:
            if len(self.bundles) != 1:
                raise PipelineError(f"name the sink, one of {sorted(self.bundles)}")
            [sink] = self.bundles
        return [record for bundle in self.bundles[sink] for record in bundle.records]

    def values(self, sink: str | None = None) -> list[object]:
        """Released payloads of ``sink`` in order."""
        return [record.value for record in self.records(sink)]


class _Run:
    """The mutable state of one run and its actions."""

    def __init__(self, plan: Plan, delivery: Delivery) -> None:
        self.plan = plan
        seed = _seed(delivery)
        self.rng = random.Random(seed) if seed is not None else None
        self.acks = random.Random(f"acks:{plan.graph.name}")
        self.acker = Acker(plan.segments.inbound, [front.id for front in plan.fronts])
        self.notes: deque[MinTimeNotification] = deque()
        self.acker.subscribe(self.notes.append)
        self.inflight: list[_Message] = []
        self.holds: dict[tuple[str, int], int] = {}
        self.dead_letters: list[DeadLetter] = []
        late = delivery.fronts if isinstance(delivery, Late) else 0
        split = len(plan.fronts) - min(late, len(plan.fronts))
        self.active, self.waiting = plan.fronts[:split], plan.fronts[split:]
        self.repairs = 0
        self.steps = 0

    def value(self) -> int:
        return self.acks.getrandbits(64) | 1

    def sent_ack(self, target: str) -> int:
        """The ack value an item sent to ``target`` is acked with; 0 (not acked) into a
        barrier (step 4)."""
        return 0 if self.plan.kinds[target] is Kind.SINK else self.value()

    # -- actions -----------------------------------------------------------------------

    def ingest(self, front: Front) -> None:
        # Step 1
        chain = self.plan.chains.get(front.target)
        if chain is not None and self.ingest_columns(front, chain):
            return
        gt, payload = front.items[front.next]
        front.next += 1
        segment = self.plan.segment(front.target)
        value = self.sent_ack(front.target)
        if value:
            self.acker.ack(segment, gt.slot, value)
        self.inflight.append(_Message(front.target, Record(Meta(gt), payload), segment, value))

    def ingest_columns(self, front: Front, chain: Chain) -> bool:
        """Step 1 and the chain after the source for a run of the front's items on
        columns (`framework.runners.inprocess.columns`); False: left to the per-item path."""
        items = front.items[front.next : front.next + self.run_length(front)]
        outputs = run_chain(chain, front.id, items)
        if outputs is None:
            return False
        front.next += len(items)
        segment = self.plan.segment(chain.exit)
        acks: list[tuple[str, int, int]] = []
        for out in outputs:
            value = self.sent_ack(chain.exit)
            if value:
                acks.append((segment, out.meta.gt.slot, value))
            self.inflight.append(_Message(chain.exit, out, segment, value))
        self.acker.ack_many(acks)
        return True

    def run_length(self, front: Front) -> int:
        """How many of the front's next items one columnar ingest takes: a random count
        (shuffled delivery), else those before any other front's next item (in order)."""
        left = len(front.items) - front.next
        if self.rng is not None:
            return self.rng.randint(1, min(left, _RUN))
        others = [
            f.items[f.next][0] for f in self.active if f is not front and f.next < len(f.items)
        ]
        bound = min(others, default=None)
        count = 1
        while count < min(left, _RUN) and (
            bound is None or front.items[front.next + count][0] < bound
        ):
            count += 1
        return count

    def heartbeat(self, front: Front) -> None:
        front.heartbeat = front.promised(self.plan.end)
        self.acker.heartbeat(front.id, front.heartbeat)

    def process(self, message: _Message) -> None:
        # Step 2
        plan, node, record = self.plan, message.node, message.record
        kind = plan.kinds[node]
        acks: list[tuple[str, int, int]] = []
        try:
            if kind is Kind.SINK:
                plan.barriers[node].push(record)
            elif kind is Kind.AGGREGATE:
                plan.aggregates[node].push(record)
                self.move_holds(node, acks)
            else:
                if kind is Kind.GROUP:
                    outputs = plan.groupings[node].push(record)
                    self.repairs += sum(1 for out in outputs if out.meta.tombstone)
                elif kind is Kind.CONVERGE:
                    outputs = plan.converges[node].push(record)
                else:
                    outputs = plan.ops[node].apply(record)
                self.send(node, outputs, acks)
        except (UserFunctionError, EncodeError) as exc:
            # The item is received (acked) and goes nowhere else, as on Kafka.
            payload = record.value
            if isinstance(payload, Keyed):
                payload = payload.value
            self.dead_letters.append(DeadLetter(node, str(exc), payload))
        if message.ack:  # step 4: an item for a barrier was never acked as sent
            acks.append((message.segment, record.meta.gt.slot, message.ack))
        self.acker.ack_many(acks)

    def send(self, node: str, outputs: list[Record], acks: list[tuple[str, int, int]]) -> None:
        routes = self.plan.routes[node]
        broadcast = len(routes) > 1
        for i, out in enumerate(outputs):
            target = routes[i] if broadcast else routes[0]
            segment = self.plan.segment(target)
            value = self.sent_ack(target)
            if value:
                acks.append((segment, out.meta.gt.slot, value))
            self.inflight.append(_Message(target, out, segment, value))

    def move_holds(self, node: str, acks: list[tuple[str, int, int]]) -> None:
        # Step 3
        segment = self.plan.segment(self.plan.routes[node][0])
        acquired, released = self.plan.aggregates[node].take_holds()
        for slot in acquired:
            value = self.holds[(node, slot)] = self.value()
            acks.append((segment, slot, value))
        for slot in released:
            acks.append((segment, slot, self.holds.pop((node, slot))))

    def notify(self, note: MinTimeNotification) -> None:
        # Step 4
        plan, slot = self.plan, note.slot
        if note.segment is None:
            return
        for node in plan.groupings:
            if plan.segment(node) == note.segment:
                plan.groupings[node].on_min_time(slot)
        for node, converge in plan.converges.items():
            if plan.segment(node) == note.segment:
                converge.on_min_time(slot)
        for node, aggregate in plan.aggregates.items():
            if plan.segment(node) == note.segment:
                acks: list[tuple[str, int, int]] = []
                self.send(node, aggregate.on_min_time(slot), acks)
                self.move_holds(node, acks)
                self.acker.ack_many(acks)
        for node, barrier in plan.barriers.items():
            if plan.segment(node) == note.segment:
                self.drain(node)
                bundle = barrier.on_min_time(slot)
                if bundle is not None:
                    plan.sinks[node].write(bundle)

    def drain(self, barrier: str) -> None:
        """Step 4: the barrier takes every item on its way to it, in any order."""
        inflight = self.inflight
        if self.rng is not None:
            self.rng.shuffle(inflight)
        kept = [message for message in inflight if message.node != barrier]
        for message in inflight:
            if message.node == barrier:
                self.process(message)
        inflight[:] = kept

    # -- scheduling --------------------------------------------------------------------

    def run(self) -> RunResult:
        for sink in self.plan.sinks.values():
            sink.clear()
        while self.step():
            self.steps += 1
        self.check_done()
        bundles = {
            self.plan.sinks[node].name: tuple(self.plan.sinks[node].bundles)
            for node in self.plan.barriers
        }
        return RunResult(bundles, self.repairs, self.steps, tuple(self.dead_letters))

    def step(self) -> bool:
        """Do one action; False when nothing is left to do."""
        if not self.idle():
            return self.pick_random() if self.rng else self.pick_in_order()
        if self.waiting:
            self.active, self.waiting = self.active + self.waiting, []
            return True
        return False

    def idle(self) -> bool:
        end = self.plan.end
        return not (
            self.inflight
            or self.notes
            or any(f.next < len(f.items) or f.heartbeat < end for f in self.active)
        )

    def pick_in_order(self) -> bool:
        if self.inflight:
            self.process(self.inflight.pop(0))
        elif self.notes:
            self.notify(self.notes.popleft())
        else:
            end = self.plan.end
            beating = [f for f in self.active if f.promised(end) > f.heartbeat]
            for front in beating:
                self.heartbeat(front)
            ready = [
                (f.items[f.next][0], i) for i, f in enumerate(self.active) if f.next < len(f.items)
            ]
            if ready:
                self.ingest(self.active[min(ready)[1]])
        return True

    def pick_random(self) -> bool:
        assert self.rng is not None
        end = self.plan.end
        ready = [f for f in self.active if f.next < len(f.items)]
        beating = [f for f in self.active if f.promised(end) > f.heartbeat]
        choice = self.rng.randrange(len(self.inflight) + len(ready) + len(beating) + 1)
        if choice < len(self.inflight):
            inflight = self.inflight
            inflight[choice], inflight[-1] = inflight[-1], inflight[choice]
            self.process(inflight.pop())
        elif (choice := choice - len(self.inflight)) < len(ready):
            self.ingest(ready[choice])
        elif (choice := choice - len(ready)) < len(beating):
            self.heartbeat(beating[choice])
        elif self.notes:
            self.notify(self.notes.popleft())
        return True

    def check_done(self) -> None:
        if self.acker.pending():
            raise ProtocolViolation(
                f"{self.acker.pending()} acker slot(s) did not XOR to zero after the input "
                "ended: an item was sent without being received, or the reverse"
            )
        for node, barrier in self.plan.barriers.items():
            if barrier.pending:
                raise ProtocolViolation(
                    f"barrier of {node} still holds {barrier.pending} record(s) after the "
                    f"input ended (min time {self.acker.min_time(self.plan.segment(node))})"
                )


def _seed(delivery: Delivery) -> int | None:
    if isinstance(delivery, Shuffled):
        return delivery.seed
    if isinstance(delivery, Late):
        return delivery.seed
    return None


class InProcessRunner:
    """Runs a pipeline graph in this process, with the given delivery mode."""

    def __init__(self, delivery: Delivery | None = None, *, columnar: bool = True) -> None:
        """``columnar``: runs of a front's items go through the stateless chain after
        their source on columns, as Spark source stage tasks do with ``columnar`` on."""
        self.delivery: Delivery = delivery if delivery is not None else InOrder()
        self.columnar = columnar

    def run(self, graph: Graph) -> RunResult:
        """Run ``graph`` over its `ListSource` inputs; fills its `ListSink` outputs."""
        return _Run(Plan(graph, columnar=self.columnar), self.delivery).run()


def run_local(pipeline: Any, delivery: Delivery | None = None) -> RunResult:
    """Run a `framework.pipeline.Pipeline` (or a `Graph`) in process."""
    graph = pipeline if isinstance(pipeline, Graph) else pipeline.graph()
    return InProcessRunner(delivery).run(graph)
