"""The tracker never publishes a false min time, never goes back, and catches up: on
acyclic segment graphs and on graphs with loops (a cyclic dataflow's feedback), whose items
circle while keeping their slot."""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.acker.local import LocalAcker
from framework.core.acker.tracker import Acker, components, topological_order
from framework.core.messages import Ack, Heartbeat, MinTimeNotification
from framework.errors import PipelineError, ProtocolViolation

# -- a simulated dataflow with an oracle ------------------------------------------------

# ("ack", segment, slot, value) or ("hb", "", front, slot)
Msg = tuple[str, str, int, int]
Segments = dict[str, list[str]]


def dag_maps(
    segments: Segments,
) -> tuple[list[str], dict[str, list[str]], dict[str, set[str]]]:
    """A segment graph's sources, each segment's downstream, each one's upstream closure
    (through loops: every member of a loop is upstream of every other)."""
    sources = [s for s, inbound in segments.items() if not inbound]
    downstream = {s: [t for t, i in segments.items() if s in i] for s in segments}

    def closure(segment: str) -> set[str]:
        out, todo = {segment}, [segment]
        while todo:
            for source in segments[todo.pop()]:
                if source not in out:
                    out.add(source)
                    todo.append(source)
        return out

    return sources, downstream, {s: closure(s) for s in segments}


@dataclass
class Item:
    """An item in flight: its segment, slot, ack value and how many more hops it makes."""

    segment: str
    slot: int
    value: int
    hops: int


@dataclass
class Sim:
    """Fronts and workers sending acks/heartbeats over FIFO channels to one acker.

    ``mode`` is ``direct`` (one `Acker.ack` per message), ``batch`` (runs of acks through
    `Acker.ack_many`) or ``local`` (every sender pre-aggregates in a `LocalAcker`).
    """

    segments: Segments
    fronts: int
    nodes: int
    mode: str
    seed: int
    acker: Acker = field(init=False)
    items: list[Item] = field(default_factory=list)
    promise: list[int] = field(init=False)
    channels: list[deque[Msg]] = field(init=False)
    locals: list[LocalAcker] = field(init=False)
    notes: list[MinTimeNotification] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.acker = Acker(self.segments, range(self.fronts))
        self.acker.subscribe(self.notes.append)
        self.promise = [0] * self.fronts
        senders = self.fronts + self.nodes
        self.channels = [deque() for _ in range(senders)]
        self.locals = [LocalAcker(self.segments) for _ in range(senders)]
        self.sources, self.downstream, self.upstream = dag_maps(self.segments)

    # sending side

    def _value(self) -> int:
        return self.rng.getrandbits(64) or 1

    def _send(self, sender: int, message: Msg) -> None:
        if self.mode == "local":
            kind, segment, a, b = message
            if kind == "ack":
                self.locals[sender].ack(segment, a, b)
            else:
                self.locals[sender].heartbeat(a, b)
        else:
            self.channels[sender].append(message)

    def emit(self, front: int, lag: int, pick: int, hops: int) -> None:
        """Front ``front`` emits an item at or after its last heartbeat."""
        segment = self.sources[pick % len(self.sources)]
        item = Item(segment, self.promise[front] + lag, self._value(), hops)
        self.items.append(item)
        self._send(front, ("ack", item.segment, item.slot, item.value))

    def beat(self, front: int, step: int) -> None:
        """Front ``front`` moves its promise forward and heartbeats it."""
        self.promise[front] += step
        self._send(front, ("hb", "", front, self.promise[front]))

    def process(self, index: int, node: int, children: int) -> None:
        """A worker receives an item: acks its outputs first, then the receive.

        Outputs stay in the segment or move downstream; some land one slot later, as a
        grouping repair triggered by an earlier item does.
        """
        item = self.items.pop(index % len(self.items))
        sender = self.fronts + node % self.nodes
        if item.hops > 0:
            targets = [item.segment, *self.downstream[item.segment]]
            for _ in range(children):
                segment = self.rng.choice(targets)
                slot = item.slot + self.rng.randint(0, 1)
                child = Item(segment, slot, self._value(), item.hops - 1)
                self.items.append(child)
                self._send(sender, ("ack", child.segment, child.slot, child.value))
        self._send(sender, ("ack", item.segment, item.slot, item.value))

    def flush(self, sender: int) -> None:
        """Move a local acker's buffer onto its channel (local mode only): its acks, an
        ``end`` mark (the acker applies them together, as `LocalAcker.flush_to` and a
        shard's node batch do), then its heartbeats."""
        messages = self.locals[sender].flush()
        channel = self.channels[sender]
        for message in messages:
            if isinstance(message, Ack):
                channel.append(("ack", message.segment, message.slot, message.value))
        if any(isinstance(message, Ack) for message in messages):
            channel.append(("end", "", 0, 0))
        for message in messages:
            if isinstance(message, Heartbeat):
                channel.append(("hb", "", message.front, message.slot))

    # receiving side

    def deliver(self, channel: int, count: int) -> None:
        """The acker takes up to ``count`` messages from one channel, in order (a local
        flush's acks as one: see `flush`)."""
        queue = self.channels[channel]
        batch: list[tuple[str, int, int]] = []
        taken = 0
        while queue and taken < count:
            kind, segment, a, b = queue.popleft()
            taken += 1
            if kind == "ack" and self.mode == "local":
                # A flush's acks are applied together (their order inside a loop's
                # segments is not an item's path): up to its end mark.
                flushed = [(segment, a, b)]
                while (entry := queue.popleft())[0] != "end":
                    flushed.append((entry[1], entry[2], entry[3]))
                self.acker.ack_many(flushed)
                continue
            if kind == "ack" and self.mode == "batch":
                batch.append((segment, a, b))
                continue
            self._ack_batch(batch)
            if kind == "ack":
                self.acker.ack(segment, a, b)
            else:
                self.acker.heartbeat(a, b)
        self._ack_batch(batch)

    def _ack_batch(self, batch: list[tuple[str, int, int]]) -> None:
        if batch:
            self.acker.ack_many(list(batch))
            batch.clear()

    def drain(self) -> None:
        """Process every item, flush every local acker, deliver every message."""
        while self.items:
            self.process(0, 0, 0)
        for sender in range(len(self.channels)):
            self.flush(sender)
            self.deliver(sender, len(self.channels[sender]))

    # the oracle

    def true_bound(self, segment: str | None) -> int:
        """Largest correct min time: no in-flight item below it, no front may emit below."""
        scope = self.upstream[segment] if segment is not None else set(self.segments)
        slots = [i.slot for i in self.items if i.segment in scope]
        return min([*slots, *self.promise])

    def check_safe(self) -> None:
        for segment in [*self.segments, None]:
            assert self.acker.min_time(segment) <= self.true_bound(segment), segment

    def step(self, action: tuple[int, int, int]) -> None:
        """Interpret one drawn action."""
        kind, a, b = action
        if kind == 0:
            self.emit(a % self.fronts, b % 2, self.rng.randrange(4), 1 + b // 2)
        elif kind == 1:
            self.beat(a % self.fronts, 1 + b % 3)
        elif kind == 2 and self.items:
            self.process(a, b, b % 3)
        elif kind == 3 and self.mode == "local":
            buffered = [i for i, local in enumerate(self.locals) if local.pending]
            if buffered:
                self.flush(buffered[a % len(buffered)])
        else:
            busy = [i for i, queue in enumerate(self.channels) if queue]
            if busy:
                self.deliver(busy[a % len(busy)], 1 + b % 4)


@st.composite
def segment_graphs(draw: st.DrawFn) -> Segments:
    """A random graph of 1-4 segments: segment i takes inputs from some segments before it
    and, sometimes, from itself or segments after it (loops); s0 is a source."""
    n = draw(st.integers(1, 4))
    graph = {f"s{i}": [f"s{j}" for j in range(i) if draw(st.booleans())] for i in range(n)}
    for i in range(1, n):
        graph[f"s{i}"] += [f"s{j}" for j in range(i, n) if draw(st.integers(0, 3)) == 0]
    return graph


actions = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 7), st.integers(0, 7)),
    min_size=20,
    max_size=150,
)


@st.composite
def sims(draw: st.DrawFn, modes: tuple[str, ...] = ("direct", "batch")) -> Sim:
    """A fresh simulation over a random segment DAG, 1-3 fronts and 1-3 workers."""
    return Sim(
        draw(segment_graphs()),
        fronts=draw(st.integers(1, 3)),
        nodes=draw(st.integers(1, 3)),
        mode=draw(st.sampled_from(modes)),
        seed=draw(st.integers(0, 2**32)),
    )


def run_sim(
    sim: Sim,
    steps: list[tuple[int, int, int]],
    after_step: Callable[[Sim], None] | None = None,
) -> Sim:
    """Run ``steps``, checking safety and monotonicity after each, then drain and converge."""
    previous = dict.fromkeys([*sim.segments, None], 0)
    for action in steps:
        sim.step(action)
        sim.check_safe()
        for segment, before in previous.items():
            now = sim.acker.min_time(segment)
            assert now >= before
            previous[segment] = now
        if after_step is not None:
            after_step(sim)
    sim.drain()
    target = min(sim.promise)
    for segment in previous:
        assert sim.acker.min_time(segment) == target
    return sim


def check_notifications(notes: list[MinTimeNotification]) -> None:
    """Notifications strictly increase per segment (and globally)."""
    last: dict[str | None, int] = {}
    for note in notes:
        assert note.slot > last.get(note.segment, -1)
        last[note.segment] = note.slot


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(sim=sims(), steps=actions)
def test_never_false_never_back_always_converges(
    sim: Sim, steps: list[tuple[int, int, int]]
) -> None:
    run_sim(sim, steps)
    check_notifications(sim.notes)


@settings(max_examples=40, deadline=None)
@given(lag=st.integers(1, 5), beats=st.integers(1, 20))
def test_idle_front_does_not_stall(lag: int, beats: int) -> None:
    acker = Acker({"s": []}, fronts=[0, 1])
    acker.ack("s", 0, 11)  # front 0's only item, front 1 never emits
    for slot in range(1, beats + 1):
        acker.heartbeat(1, slot)
        acker.heartbeat(0, slot + lag)
    assert acker.min_time() == 0  # the item is still in flight
    acker.ack("s", 0, 11)
    assert acker.min_time() == beats  # bounded only by the idle front's heartbeats
    acker.heartbeat(1, beats + lag)
    assert acker.min_time() == beats + lag


# -- examples -----------------------------------------------------------------------------


def test_algorithm_1_example() -> None:
    acker = Acker({"map": [], "sink": ["map"]}, fronts=[7])
    notes: list[MinTimeNotification] = []
    acker.subscribe(notes.append)
    acker.ack("map", 3, 0xA)  # front sends an item at slot 3
    acker.heartbeat(7, 5)
    assert acker.min_time() == 3
    acker.ack("sink", 4, 0xB)  # map emits an output at slot 4 ...
    acker.ack("map", 3, 0xA)  # ... then acks the receive
    assert (acker.min_time("map"), acker.min_time("sink"), acker.min_time()) == (5, 4, 4)
    acker.ack("sink", 4, 0xB)
    assert acker.min_time() == 5
    assert [(n.segment, n.slot) for n in notes] == [
        ("map", 3),
        ("sink", 3),
        (None, 3),
        ("map", 5),
        ("sink", 4),
        (None, 4),
        ("sink", 5),
        (None, 5),
    ]


def test_heartbeat_jump_is_constant_time() -> None:
    acker = Acker({"s": []}, fronts=[0])
    start = time.perf_counter()
    acker.heartbeat(0, 170_000_000_000)  # a real slot: ms timestamp // 10
    assert acker.min_time() == 170_000_000_000
    assert time.perf_counter() - start < 0.01


def test_late_ack_is_a_violation() -> None:
    acker = Acker({"s": []}, fronts=[0])
    acker.heartbeat(0, 10)
    with pytest.raises(ProtocolViolation):
        acker.ack("s", 9, 1)
    with pytest.raises(ProtocolViolation):
        acker.ack_many([("s", 10, 1), ("s", 3, 1)])


def test_unknown_segment_and_bad_graphs() -> None:
    acker = Acker({"s": []}, fronts=[0])
    with pytest.raises(ProtocolViolation):
        acker.ack("nope", 1, 1)
    with pytest.raises(ProtocolViolation):
        acker.ack_many([("nope", 1, 1)])
    with pytest.raises(ProtocolViolation):
        acker.min_time("nope")
    with pytest.raises(PipelineError):
        Acker({})
    with pytest.raises(PipelineError):
        Acker({"a": ["b"]})
    assert topological_order({"c": ["a", "b"], "b": ["a"], "a": []}) == ("a", "b", "c")


def test_a_loop_is_one_component_after_what_feeds_it() -> None:
    graph = {"out": ["b"], "b": ["a", "src"], "a": ["b"], "src": [], "self": ["self", "out"]}
    assert components(graph) == (("src",), ("a", "b"), ("out",), ("self",))
    assert topological_order(graph) == ("src", "a", "b", "out", "self")


def test_an_item_circling_a_loop_holds_every_member_and_what_it_feeds() -> None:
    """An item of slot 3 goes around the loop a -> b -> a -> b (acking each hop into the
    next member before its receive), then leaves to ``out``: no member passes 3 while it
    circles, nor ``out`` until it is received there."""
    acker = Acker({"src": [], "a": ["src", "b"], "b": ["a"], "out": ["b"]}, fronts=[0])
    acker.ack("a", 3, 11)  # the front sends it into the loop
    acker.heartbeat(0, 10)
    assert acker.min_time("src") == 10
    hops = [("b", 12), ("a", 13), ("b", 14), ("out", 15)]
    value, segment = 11, "a"
    for target, nxt in hops:
        acker.ack(target, 3, nxt)  # sent on ...
        acker.ack(segment, 3, value)  # ... before its receive is acked
        circling = target != "out"
        assert acker.min_time("a") == acker.min_time("b") == (3 if circling else 10), target
        assert acker.min_time("out") == 3, target
        value, segment = nxt, target
    acker.ack("out", 3, value)  # received at the sink
    assert [acker.min_time(s) for s in ("a", "b", "out", None)] == [10, 10, 10, 10]


def test_fronts_register_and_heartbeat() -> None:
    acker = Acker({"s": []})
    acker.heartbeat(0, 0)
    acker.ack("s", 2, 5)  # no front has promised anything past 0 yet
    assert acker.min_time() == 0
    acker.register_front(1, 4)
    acker.heartbeat(0, 9)
    assert acker.min_time() == 2
    acker.ack("s", 2, 5)
    assert acker.min_time() == 4  # front 1 holds it at its registered slot
    acker.heartbeat(1, 3)  # older heartbeats are ignored
    acker.register_front(1, 6)  # re-registering a front heartbeats it
    assert acker.min_time() == 6
    assert acker.fronts() == {0: 9, 1: 6}
    with pytest.raises(ProtocolViolation):
        acker.register_front(2, 5)


def test_no_fronts_means_no_progress() -> None:
    acker = Acker({"s": []})
    acker.ack("s", 1, 1)
    acker.ack("s", 1, 1)
    assert acker.min_time() == 0
    assert acker.pending() == 0


def test_subscribe_unsubscribe_and_snapshot_requests() -> None:
    acker = Acker({"s": []}, fronts=[0], snapshot_interval=10)
    notes: list[MinTimeNotification] = []
    acker.subscribe(notes.append)
    for slot in (4, 12, 15, 30):
        acker.heartbeat(0, slot)
    flags = [(n.slot, n.snapshot) for n in notes if n.segment is None]
    assert flags == [(4, False), (12, True), (15, False), (30, True)]
    acker.unsubscribe(notes.append)
    acker.unsubscribe(notes.append)
    acker.heartbeat(0, 31)
    assert notes[-1].slot == 30


def test_pending_counts_non_zero_slots() -> None:
    acker = Acker({"a": [], "b": ["a"]}, fronts=[0])
    acker.ack_many([("a", 1, 3), ("b", 1, 4), ("b", 2, 4), ("b", 2, 4), ("a", 1, 0)])
    assert (acker.pending(), acker.pending("a"), acker.pending("b")) == (2, 1, 1)
    assert acker.segments == ("a", "b")
