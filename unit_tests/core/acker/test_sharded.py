"""Sharded tracker: the listener never accepts a false min time, whatever the order."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.acker.local import LocalAcker
from framework.core.acker.sharded import (
    AckerShard,
    MinTimeListener,
    ShardedAcker,
    ShardRouter,
    shard_of,
)
from framework.core.messages import (
    Ack,
    AckerInput,
    Heartbeat,
    MinTimeNotification,
    NodeTime,
)
from framework.errors import ProtocolViolation
from unit_tests.core.acker.test_tracker import Item, Segments, dag_maps, segment_graphs

# -- the seed's scenario ----------------------------------------------------------------


def _two_shards() -> tuple[MinTimeListener, Callable[[int, int, AckerInput], None]]:
    """Two shards of segment ``s`` (one front), a listener of both, and ``send(shard,
    node, message)``: a message to one shard, whose reports the listener receives."""
    shards = [AckerShard(i, 2, {"s": []}, fronts=[0]) for i in range(2)]
    listener = MinTimeListener(2, ["s"])

    def send(shard: int, node: int, message: AckerInput) -> None:
        for note in shards[shard].receive(node, message):
            listener.receive(note)

    return listener, send


def test_seed_t_and_t_plus_1_scenario() -> None:
    """Element t+1 is done on shard 1, t is in flight on shard 0; processing t re-opens t+1.

    The ack clearing t reaches shard 0 (and its report reaches the listener) before the ack
    re-opening t+1 reaches shard 1. Node 0 is the front, node 1 the worker.
    """
    t = 10
    listener, send = _two_shards()
    published: list[int] = []
    listener.subscribe(lambda note: published.append(note.slot) if note.segment is None else None)

    def tick(node: int, time: int, order: tuple[int, ...] = (0, 1)) -> None:
        for shard in order:
            send(shard, node, NodeTime(node, time))

    # The front emits t (shard 0) and t+1 (shard 1), then promises nothing below t+5.
    send(0, 0, Ack("s", t, 0xA))
    send(1, 0, Ack("s", t + 1, 0xB))
    for shard in (0, 1):
        send(shard, 0, Heartbeat(0, t + 5))
    tick(0, 1)
    assert listener.min_time() == t
    # The worker fully processes t+1 first (its receive-ack clears it on shard 1).
    send(1, 1, Ack("s", t + 1, 0xB))
    tick(1, 1)
    assert listener.min_time() == t
    # Processing t: the repaired output at t+1 goes to shard 1, the receive-ack of t to 0.
    send(0, 1, Ack("s", t, 0xA))  # clears t on shard 0 ...
    send(0, 1, NodeTime(1, 2))  # ... and shard 0 reports "nothing below t+5"
    assert listener.min_time() == t  # not accepted: shard 1 has not seen time 2 yet
    send(1, 1, Ack("s", t + 1, 0xC))  # now t+1 re-opens on shard 1
    send(1, 1, NodeTime(1, 2))
    assert listener.min_time() == t + 1  # the seed's expected result
    send(1, 1, Ack("s", t + 1, 0xC))
    tick(1, 3)
    assert listener.min_time() == t + 5
    assert published == [t, t + 1, t + 5]


def test_pending_reports_bound_the_accepted_one() -> None:
    """Shards at different cuts: the last report ``<= B`` alone would publish a false time.

    Shard 1 applies node 2's batches 1..3 before node 1's batch 2; shard 0 applies node 1's
    batch 2 (clearing t) and node 2's batches up to 2. ``B`` then holds node 1 at 2 and
    node 2 at 2, and shard 1's last report ``<= B`` predates the ack that re-opened t+1.
    """
    t = 4
    listener, send = _two_shards()

    send(0, 0, Ack("s", t, 1))
    for shard in (0, 1):
        send(shard, 0, Heartbeat(0, t + 5))
        send(shard, 0, NodeTime(0, 1))
    for shard in (0, 1):
        send(shard, 1, NodeTime(1, 1))
    # Node 1 processes t: output at t+1 (shard 1), receive of t (shard 0), then time 2.
    send(0, 1, Ack("s", t, 1))
    send(0, 1, NodeTime(1, 2))
    # Node 2 (idle) closes batches 1..3; shard 1 sees them before node 1's batch 2.
    for time in (1, 2, 3):
        send(1, 2, NodeTime(2, time))
    for time in (1, 2):
        send(0, 2, NodeTime(2, time))
    assert listener.min_time() <= t + 1
    send(1, 1, Ack("s", t + 1, 2))
    send(1, 1, NodeTime(1, 2))
    assert listener.min_time() <= t + 1


def test_shards_report_whole_batches_only() -> None:
    """An ack that arrived ahead of its batch's NodeTime must not show in a report.

    Worker 1's batch (output at t+1 to shard 1, receive of t to shard 0) is half delivered
    when idle worker 2 ticks: if shard 0 applied the receive-ack at once, both shards would
    report vectors equal to ``B`` with t and t+1 clear.
    """
    t = 0
    listener, send = _two_shards()

    send(0, 0, Ack("s", t, 1))
    for shard in (0, 1):
        send(shard, 0, Heartbeat(0, 5))
        send(shard, 0, NodeTime(0, 1))
    assert listener.min_time() == t
    send(0, 1, Ack("s", t, 1))  # worker 1's receive-ack of t; its t+1 output is in transit
    for shard in (0, 1):
        send(shard, 2, NodeTime(2, 1))
    assert listener.min_time() == t
    send(0, 1, NodeTime(1, 1))
    send(1, 1, Ack("s", t + 1, 2))
    send(1, 1, NodeTime(1, 1))
    assert listener.min_time() == t + 1


# -- adversarial interleavings ----------------------------------------------------------


@dataclass
class ShardSim:
    """Fronts and workers send through routers; every channel is FIFO, nothing else is.

    Channels: one per (sender, shard) and one per shard to the listener; each step picks
    any non-empty channel, so shards and the listener see every possible interleaving.
    """

    segments: Segments
    fronts: int
    nodes: int
    shards: int
    seed: int
    items: list[Item] = field(default_factory=list)
    notes: list[MinTimeNotification] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        senders = self.fronts + self.nodes
        self.promise = [0] * self.fronts
        self.routers = [ShardRouter(i, self.shards) for i in range(senders)]
        self.shard = [
            AckerShard(i, self.shards, self.segments, range(self.fronts))
            for i in range(self.shards)
        ]
        self.listener = MinTimeListener(self.shards, self.segments)
        self.listener.subscribe(self.notes.append)
        self.wires: dict[tuple[int, int], deque[AckerInput]] = {}
        self.outboxes: list[deque[MinTimeNotification]] = [deque() for _ in range(self.shards)]
        self.sources, self.downstream, self.upstream = dag_maps(self.segments)

    def _value(self) -> int:
        return self.rng.getrandbits(64) or 1

    def emit(self, front: int, lag: int, hops: int) -> None:
        item = Item(self.rng.choice(self.sources), self.promise[front] + lag, self._value(), hops)
        self.items.append(item)
        self.routers[front].ack(item.segment, item.slot, item.value)

    def beat(self, front: int, step: int) -> None:
        self.promise[front] += step
        self.routers[front].heartbeat(front, self.promise[front])

    def process(self, index: int, node: int, children: int, lag: int | None = None) -> None:
        """Receive an item; outputs land ``lag`` slots later (random 0 or 1 if None)."""
        item = self.items.pop(index % len(self.items))
        router = self.routers[self.fronts + node % self.nodes]
        if item.hops > 0:
            targets = [item.segment, *self.downstream[item.segment]]
            for _ in range(children):
                slot = item.slot + (self.rng.randint(0, 1) if lag is None else lag)
                child = Item(self.rng.choice(targets), slot, self._value(), item.hops - 1)
                self.items.append(child)
                router.ack(child.segment, child.slot, child.value)
        router.ack(item.segment, item.slot, item.value)

    def end_batch(self, sender: int) -> None:
        for shard, message in self.routers[sender].end_batch():
            self.wires.setdefault((sender, shard), deque()).append(message)

    def to_shard(self, pick: int, count: int) -> None:
        busy = sorted(key for key, wire in self.wires.items() if wire)
        if busy:
            sender, shard = busy[pick % len(busy)]
            wire = self.wires[sender, shard]
            for _ in range(min(count, len(wire))):
                self.outboxes[shard].extend(self.shard[shard].receive(sender, wire.popleft()))

    def to_listener(self, pick: int, count: int) -> None:
        busy = [box for box in self.outboxes if box]
        if busy:
            box = busy[pick % len(busy)]
            for _ in range(min(count, len(box))):
                self.listener.receive(box.popleft())

    def step(self, action: tuple[int, int, int]) -> None:
        kind, a, b = action
        if kind == 0:
            self.emit(a % self.fronts, b % 2, 1 + b // 2)
        elif kind == 1:
            self.beat(a % self.fronts, 1 + b % 3)
        elif kind == 2 and self.items:
            self.process(a, b, b % 3)
        elif kind == 3:
            self.end_batch(a % len(self.routers))
        elif kind == 4:
            self.to_shard(a, 1 + b % 3)
        else:
            self.to_listener(a, 1 + b % 3)

    def true_bound(self, segment: str | None) -> int:
        scope = self.upstream[segment] if segment is not None else set(self.segments)
        return min([i.slot for i in self.items if i.segment in scope] + self.promise)

    def check_safe(self) -> None:
        for segment in [*self.segments, None]:
            assert self.listener.min_time(segment) <= self.true_bound(segment), segment

    def drain(self) -> None:
        while self.items:
            self.process(0, 0, 0)
        for sender in range(len(self.routers)):
            self.end_batch(sender)
        while any(self.wires.values()) or any(self.outboxes):
            self.to_shard(0, 1 << 30)
            self.to_listener(0, 1 << 30)


@st.composite
def shard_sims(draw: st.DrawFn) -> ShardSim:
    return ShardSim(
        draw(segment_graphs()),
        fronts=draw(st.integers(1, 2)),
        nodes=draw(st.integers(1, 3)),
        shards=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**32)),
    )


shard_actions = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 7), st.integers(0, 7)),
    min_size=20,
    max_size=150,
)


@settings(max_examples=250, deadline=None)
@given(sim=shard_sims(), steps=shard_actions)
def test_listener_never_publishes_a_false_min_time(
    sim: ShardSim, steps: list[tuple[int, int, int]]
) -> None:
    for action in steps:
        sim.step(action)
        sim.check_safe()
    sim.drain()
    target = min(sim.promise)
    for segment in [*sim.segments, None]:
        assert sim.listener.min_time(segment) == target
    last: dict[str | None, int] = {}
    for note in sim.notes:  # published times only go up
        assert note.slot > last.get(note.segment, -1)
        last[note.segment] = note.slot


@dataclass
class HeartbeatSim(ShardSim):
    """`ShardSim` with heartbeat-only senders (negative ids), as a driver's front
    heartbeats: a round repeats what each front promised in the batches it ended, reaches
    a shard only after those batches (Kafka's log order: the acks a heartbeat covers are
    committed before it is written), and a kill may cut it short (some shards only). Its
    sender then never sends again, and a new one takes over."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ended = [0] * self.fronts  # each front's promise as of its last ended batch
        self.hb_node, self.hb_time = -1, 0
        self.queued: dict[tuple[int, int], int] = {}
        self.delivered: dict[tuple[int, int], int] = {}
        self.marks: dict[tuple[int, int], deque[dict[int, int]]] = {}

    def end_batch(self, sender: int) -> None:
        if sender < self.fronts:
            self.ended[sender] = self.promise[sender]
        for shard, message in self.routers[sender].end_batch():
            self.wires.setdefault((sender, shard), deque()).append(message)
            self.queued[sender, shard] = self.queued.get((sender, shard), 0) + 1

    def heartbeat_round(self, reach: int) -> None:
        """A round to every shard, or (``reach`` > 0) to the shards of bitmask ``reach``
        only, after which its sender is dead."""
        node = self.hb_node
        self.hb_time += 1
        shards = [k for k in range(self.shards) if not reach or reach >> k & 1]
        for shard in shards:
            mark = {f: self.queued.get((f, shard), 0) for f in range(self.fronts)}
            messages = [Heartbeat(f, self.ended[f]) for f in range(self.fronts)]
            for message in [*messages, NodeTime(node, self.hb_time)]:
                self.wires.setdefault((node, shard), deque()).append(message)
                self.marks.setdefault((node, shard), deque()).append(mark)
        if reach and len(shards) < self.shards:
            self.hb_node, self.hb_time = node - 1, 0

    def _ready(self, key: tuple[int, int]) -> bool:
        sender, shard = key
        if sender >= 0:
            return True
        mark = self.marks[key][0]
        return all(self.delivered.get((f, shard), 0) >= n for f, n in mark.items())

    def to_shard(self, pick: int, count: int) -> None:
        busy = sorted(key for key, wire in self.wires.items() if wire and self._ready(key))
        if busy:
            key = busy[pick % len(busy)]
            sender, shard = key
            wire = self.wires[key]
            for _ in range(count):
                if not wire or not self._ready(key):
                    break
                message = wire.popleft()
                if sender < 0:
                    self.marks[key].popleft()
                self.delivered[key] = self.delivered.get(key, 0) + 1
                self.outboxes[shard].extend(self.shard[shard].receive(sender, message))

    def step(self, action: tuple[int, int, int]) -> None:
        kind, a, b = action
        if kind == 6:
            self.heartbeat_round(0 if b % 2 else a % (1 << self.shards))
        else:
            super().step(action)


@settings(max_examples=250, deadline=None)
@given(
    sim=shard_sims(),
    steps=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 7), st.integers(0, 7)),
        min_size=20,
        max_size=150,
    ),
)
def test_heartbeat_only_senders_killed_mid_round_keep_min_time_true_and_moving(
    sim: ShardSim, steps: list[tuple[int, int, int]]
) -> None:
    """Safety and liveness with heartbeat-only senders whose rounds a kill cuts short."""
    hb = HeartbeatSim(sim.segments, sim.fronts, sim.nodes, sim.shards, sim.seed)
    for action in steps:
        hb.step(action)
        hb.check_safe()
    hb.drain()
    hb.heartbeat_round(0)  # the last sender's round, whole
    hb.drain()
    for segment in [*hb.segments, None]:
        assert hb.listener.min_time(segment) == min(hb.promise)


def repair_script(sim: ShardSim) -> list[Callable[[], None]]:
    """The seed's workload: t and t+1 enter, t+1 finishes, t re-opens t+1, repair finishes.

    Items are located by slot and hops, so the script does not depend on list positions.
    """

    def find(slot: int, hops: int) -> int:
        return next(i for i, it in enumerate(sim.items) if (it.slot, it.hops) == (slot, hops))

    return [
        lambda: sim.emit(0, 0, 1),  # t = 0, may emit one output
        lambda: sim.emit(0, 1, 0),  # t + 1
        lambda: sim.beat(0, 5),
        lambda: sim.process(find(1, 0), 0, 0),  # t+1 completes on worker 0
        lambda: sim.process(find(0, 1), 1, 1, lag=1),  # worker 1: t re-opens t+1
        lambda: sim.process(find(1, 0), 0, 0),  # the repair completes
        lambda: sim.beat(0, 5),
    ]


Actor = tuple[str, int, int]


def run_prioritised(
    sim: ShardSim,
    script: list[Callable[[], None]],
    order: list[Actor],
    changes: set[tuple[Actor, int]],
) -> None:
    """Run to quiescence, always stepping the enabled actor of highest priority (PCT).

    Actors: the script, each sender closing a batch (an empty one at most once per script
    step, so idle senders keep ticking all along), each (sender, shard) wire and each
    shard's outbox. ``order`` ranks them; an actor that has just taken its ``n``-th step
    with ``(actor, n)`` in ``changes`` drops to the lowest priority: that is how one wire
    ends up stalled in the middle of a batch while everything else moves on.
    """
    rank = {actor: i for i, actor in enumerate(order)}
    steps = dict.fromkeys(order, 0)
    total = len(script)
    idle = dict.fromkeys(range(len(sim.routers)), 0)

    def enabled(actor: Actor) -> bool:
        kind, a, b = actor
        if kind == "script":
            return bool(script)
        if kind == "batch":
            return sim.routers[a].pending > 0 or idle[a] <= total - len(script)
        if kind == "wire":
            return bool(sim.wires.get((a, b)))
        return bool(sim.outboxes[a])

    for step in range(10_000):
        ready = [actor for actor in order if enabled(actor)]
        if not ready:
            return
        actor = min(ready, key=rank.__getitem__)
        kind, a, b = actor
        if kind == "script":
            script.pop(0)()
        elif kind == "batch":
            idle[a] += sim.routers[a].pending == 0
            sim.end_batch(a)
        elif kind == "wire":
            sim.to_shard(sorted(k for k, w in sim.wires.items() if w).index((a, b)), 1)
        else:
            sim.to_listener([i for i, box in enumerate(sim.outboxes) if box].index(a), 1)
        sim.check_safe()
        steps[actor] += 1
        if (actor, steps[actor]) in changes:
            rank[actor] = len(rank) + step
    raise AssertionError("no quiescence")


def all_actors(senders: int, shards: int) -> list[Actor]:
    return [
        ("script", 0, 0),
        *[("batch", s, 0) for s in range(senders)],
        *[("wire", s, k) for s in range(senders) for k in range(shards)],
        *[("box", k, 0) for k in range(shards)],
    ]


@st.composite
def schedules(
    draw: st.DrawFn, senders: int, shards: int
) -> tuple[list[Actor], set[tuple[Actor, int]]]:
    actors = all_actors(senders, shards)
    order = draw(st.permutations(actors))
    changes = draw(st.sets(st.tuples(st.sampled_from(actors), st.integers(1, 3)), max_size=5))
    return list(order), changes


@settings(max_examples=500, deadline=None)
@given(data=st.data(), shards=st.integers(2, 3))
def test_seed_scenario_under_adversarial_orders(data: st.DataObject, shards: int) -> None:
    """The repair workload, 3 workers (one idle), every channel FIFO and nothing else."""
    sim = ShardSim({"s": []}, fronts=1, nodes=3, shards=shards, seed=0)
    order, changes = data.draw(schedules(len(sim.routers), shards))
    run_prioritised(sim, repair_script(sim), order, changes)
    for sender in range(len(sim.routers)):
        sim.end_batch(sender)
    sim.drain()
    assert sim.listener.min_time() == 10


# -- components -------------------------------------------------------------------------


def test_sharded_acker_with_local_acker() -> None:
    acker = ShardedAcker({"a": [], "b": ["a"]}, shards=3, fronts=[0])
    front, worker = LocalAcker(), LocalAcker({"a": [], "b": ["a"]})
    front.ack("a", 5, 0x11)
    front.heartbeat(0, 9)
    front.flush_to(acker.router(0))
    acker.end_batch(0)
    assert (acker.min_time("a"), acker.min_time()) == (5, 5)
    worker.ack("b", 6, 0x22)  # output at slot 6, on another shard
    worker.ack("a", 5, 0x11)
    worker.flush_to(acker.router(1))
    acker.end_batch(1)
    assert (acker.min_time("a"), acker.min_time("b"), acker.min_time()) == (9, 6, 6)
    acker.router(1).ack("b", 6, 0x22)
    acker.end_batch(1)
    assert acker.min_time() == 9
    assert acker.router(1).time == 2


def test_router_routes_by_slot_and_broadcasts() -> None:
    router = ShardRouter(node=4, shards=2)
    router.ack_many([("s", 3, 1), ("s", 4, 2)])
    router.heartbeat(7, 8)
    assert router.end_batch() == [
        (1, Ack("s", 3, 1)),
        (0, Ack("s", 4, 2)),
        (0, Heartbeat(7, 8)),
        (1, Heartbeat(7, 8)),
        (0, NodeTime(4, 1)),
        (1, NodeTime(4, 1)),
    ]
    assert router.end_batch() == [(0, NodeTime(4, 2)), (1, NodeTime(4, 2))]
    assert [shard_of(s, 3) for s in range(4)] == [0, 1, 2, 0]


def test_shard_reports_changed_segments_then_global() -> None:
    shard = AckerShard(0, 1, {"a": [], "b": ["a"]}, fronts=[0])
    shard.receive(0, Heartbeat(0, 3))
    shard.receive(0, Ack("b", 1, 5))
    assert shard.receive(0, Ack("a", 2, 5)) == []  # buffered until the node time
    notes = shard.receive(0, NodeTime(0, 1))
    vector = (NodeTime(0, 1),)
    assert notes == [
        MinTimeNotification("a", 2, vector),
        MinTimeNotification("b", 1, vector),
        MinTimeNotification(None, 1, vector),
    ]
    assert shard.vector == vector
    assert shard.values() == {"a": 2, "b": 1, None: 1}


def test_protocol_violations() -> None:
    shard = AckerShard(1, 2, {"s": []}, fronts=[0])
    with pytest.raises(ProtocolViolation):
        shard.receive(0, Ack("s", 2, 1))  # slot 2 belongs to shard 0
    with pytest.raises(ProtocolViolation):
        shard.receive(0, Ack("x", 1, 1))
    with pytest.raises(ProtocolViolation):
        shard.receive(0, Heartbeat(9, 1))  # fronts are fixed
    shard.receive(0, NodeTime(0, 1))
    with pytest.raises(ProtocolViolation):
        shard.receive(0, NodeTime(0, 1))
    with pytest.raises(ValueError, match="shard index"):
        AckerShard(2, 2, {"s": []})
    listener = MinTimeListener(2, ["s"], snapshot_interval=5)
    with pytest.raises(ProtocolViolation):
        listener.receive(MinTimeNotification(None, 1, shard=2))
    with pytest.raises(ProtocolViolation):
        listener.receive(MinTimeNotification("x", 1))
    with pytest.raises(ProtocolViolation):
        listener.min_time("x")
    listener.receive(MinTimeNotification(None, 1, (NodeTime(0, 2),)))
    with pytest.raises(ProtocolViolation):
        listener.receive(MinTimeNotification(None, 1, (NodeTime(0, 1),)))
    with pytest.raises(ProtocolViolation, match="heartbeat-only"):
        shard.receive(-7, Ack("s", 1, 1))  # a heartbeat-only node sends no acks


# -- a heartbeat sender killed mid-round -------------------------------------------------


@pytest.mark.parametrize("heartbeat_only", [True, False])
def test_a_heartbeat_round_cut_short_by_a_kill_does_not_stop_min_time(
    heartbeat_only: bool,
) -> None:
    """A driver's heartbeat sender killed between its two shard records: its round
    reaches shard 0 only and it never sends again. A new driver's sender and the stage's
    worker go on. A heartbeat-only sender (negative id) stays out of the listener's cut,
    so min time follows the new heartbeats; a node in the cut (the shape before) held
    shard 0's reports back for good."""
    dead, new = (-11, -12) if heartbeat_only else (11, 12)
    worker = 3
    listener, send = _two_shards()

    def beat(node: int, time: int, slot: int, to: tuple[int, ...] = (0, 1)) -> None:
        for shard in to:
            send(shard, node, Heartbeat(0, slot))
            send(shard, node, NodeTime(node, time))

    # An item at 10 is born and finishes; the dead sender's rounds 1 and 2 (the second
    # cut short after shard 0's record) promise 12, then 20.
    send(0, worker, Ack("s", 10, 0xA))
    for shard in (0, 1):
        send(shard, worker, NodeTime(worker, 1))
    beat(dead, 1, 12)
    send(0, worker, Ack("s", 10, 0xA))
    for shard in (0, 1):
        send(shard, worker, NodeTime(worker, 2))
    beat(dead, 2, 20, to=(0,))
    assert listener.min_time() == 12
    # The new driver's sender promises 30, then 40; the worker sends a batch.
    beat(new, 1, 30)
    for shard in (0, 1):
        send(shard, worker, NodeTime(worker, 3))
    beat(new, 2, 40)
    assert listener.min_time() == (40 if heartbeat_only else 12)


def test_heartbeat_node_ids_are_negative_and_stable() -> None:
    from framework.core.ids import heartbeat_node_id, is_heartbeat_node, service_node_id

    node = heartbeat_node_id("app/fronts/1/2")
    assert node == heartbeat_node_id("app/fronts/1/2") < 0
    assert is_heartbeat_node(node) and not is_heartbeat_node(service_node_id("app", "x"))


def test_listener_snapshot_requests_and_unsubscribe() -> None:
    listener = MinTimeListener(1, ["s"], snapshot_interval=5)
    notes: list[MinTimeNotification] = []
    listener.subscribe(notes.append)
    for time, slot in enumerate((3, 6, 8, 12), start=1):
        listener.receive(MinTimeNotification("s", slot, (NodeTime(0, time),)))
        listener.receive(MinTimeNotification(None, slot, (NodeTime(0, time),)))
    assert [(n.slot, n.snapshot) for n in notes if n.segment is None] == [
        (3, False),
        (6, True),
        (8, False),
        (12, True),
    ]
    listener.unsubscribe(notes.append)
    listener.unsubscribe(notes.append)
    listener.receive(MinTimeNotification(None, 20, (NodeTime(0, 9),)))
    assert notes[-1].slot == 12
    assert listener.min_time("s") == 12
