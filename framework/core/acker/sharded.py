"""Distributed tracker (the tracker paper): acks sharded by slot, vector clocks against false times.

Acks go to shard ``slot % shards``; heartbeats go to every shard. A sender ("node": a
worker or a front) follows each batch with `NodeTime` (its batch counter) to every shard.
A shard applies a node's acks and heartbeats only when that node's `NodeTime` arrives, so
each report it sends describes exactly the cut named by its vector of node times. Shard
values are not monotone: an ack can re-open a slot the shard had seen cleared.

Why a shard report cannot be taken at face value (the seed's t / t+1 case): processing
item ``t`` sends an ack for its output at ``t+1`` to shard 2 and its receive-ack to shard 1.
If shard 1 reports first, it has ``t`` cleared while shard 2 still has ``t+1`` cleared.

The listener's rule. Let ``B`` be the element-wise minimum of the latest vectors of all
shards: every shard has applied every batch in ``B``. For each shard take its reports from
the last one whose vector is ``<= B`` (the accepted report) through the latest one, and
use the least of their values. Taking the pending reports into the minimum is what keeps
the rule safe when shards sit at different cuts: every ack whose batch is inside ``B`` is
in some report in that range, and an ack on one side of ``B`` whose partner is on the
other leaves a non-zero slot in one of them. So at the cut ``B`` every slot below the
result is clear and every heartbeat is at or above it; with the ack discipline no item
below it can exist again.

Senders of heartbeats only (negative node ids, `framework.core.ids.heartbeat_node_id`)
stay out of ``B`` and of the comparisons with it. Such a sender's batch is one record per
shard, written without a transaction: killed between two of them, its last round reaches
some shards only, and as it never sends again, a ``B`` that held it would hold every
later report of the shards that did get the round, so min time would stop for good (a
driver killed -9 while heartbeating did exactly that). Leaving them out is safe: ``B``
is there for acks, whose partners may sit on other shards, and these batches carry none
(a shard refuses an ack from such a node). A heartbeat only raises its front on the
shards that apply it, so a shard without the lost round bounds the minimum lower, never
higher; and a heartbeat is written only after the acks of every item it covers are
committed ahead of it on every shard's partition, so a shard applying it has applied
those acks (`framework.runners.spark.fronts`, step 4).

The fronts of a sharded tracker are fixed at construction: a front that appeared on some
shards only would not bound the others.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from framework.core.acker.tracker import topological_order
from framework.core.ids import is_heartbeat_node
from framework.core.messages import Ack, AckerInput, Heartbeat, MinTimeNotification, NodeTime
from framework.errors import ProtocolViolation

Vector = dict[int, int]


@dataclass(frozen=True, slots=True)
class ShardState:
    """What a shard knows between two sender batches: enough to continue from there.

    ``xor``: open slots per segment; ``fronts``: heartbeat per front; ``vector``: node
    times; ``last``: the values of its latest report (which changes the next one names).
    """

    xor: Mapping[str, Mapping[int, int]]
    fronts: Mapping[int, int]
    vector: Mapping[int, int]
    last: Mapping[str | None, int]


def shard_of(slot: int, shards: int) -> int:
    """The shard that owns ``slot``: consecutive slots spread over all shards."""
    return slot % shards


def _vector_tuple(vector: Vector) -> tuple[NodeTime, ...]:
    return tuple(NodeTime(node, time) for node, time in sorted(vector.items()))


def _vector_dict(node_times: Iterable[NodeTime]) -> Vector:
    return {nt.node: nt.time for nt in node_times}


def _acking(vector: Vector) -> Vector:
    """``vector`` without its heartbeat-only nodes (the module docstring)."""
    return {node: time for node, time in vector.items() if not is_heartbeat_node(node)}


def _leq(a: Vector, b: Vector) -> bool:
    """Element-wise ``a <= b``, absent nodes at time 0."""
    return all(time <= b.get(node, 0) for node, time in a.items())


class AckerShard:
    """One shard: XOR table of its slots, heartbeats of all fronts, node-time vector."""

    def __init__(
        self,
        index: int,
        shards: int,
        segments: Mapping[str, Sequence[str]],
        fronts: Iterable[int] = (),
    ) -> None:
        """Shard ``index`` of ``shards``; ``fronts`` are every front, all at slot 0."""
        if not 0 <= index < shards:
            raise ValueError(f"shard index {index} not in [0, {shards})")
        self.index = index
        self.shards = shards
        self._order = topological_order(segments)
        self._upstream = {name: self._closure(segments, name) for name in self._order}
        self._xor: dict[str, dict[int, int]] = {name: {} for name in self._order}
        self._heaps: dict[str, list[int]] = {name: [] for name in self._order}
        self._fronts: dict[int, int] = dict.fromkeys(fronts, 0)
        self._buffered: dict[int, list[Ack | Heartbeat]] = {}
        self._vector: Vector = {}
        self._last = self.values()

    @staticmethod
    def _closure(segments: Mapping[str, Sequence[str]], name: str) -> tuple[str, ...]:
        seen = {name}
        stack = [name]
        while stack:
            for source in segments[stack.pop()]:
                if source not in seen:
                    seen.add(source)
                    stack.append(source)
        return tuple(sorted(seen))

    @property
    def vector(self) -> tuple[NodeTime, ...]:
        """Latest node time of every node this shard has heard from."""
        return _vector_tuple(self._vector)

    def node_time(self, node: int) -> int:
        """The latest node time of ``node`` this shard applied (0: none yet)."""
        return self._vector.get(node, 0)

    def state(self) -> ShardState:
        """A copy of this shard's state; only between batches (no node half applied)."""
        if any(self._buffered.values()):
            raise ProtocolViolation(f"shard {self.index} is inside a sender batch: no state")
        return ShardState(
            {name: dict(table) for name, table in self._xor.items()},
            dict(self._fronts),
            dict(self._vector),
            dict(self._last),
        )

    def restore(self, state: ShardState) -> None:
        """Continue from ``state`` (of a shard of the same segments and fronts)."""
        if set(state.xor) != set(self._xor) or set(state.fronts) != set(self._fronts):
            raise ProtocolViolation(
                f"shard {self.index}: a saved state of segments {sorted(state.xor)} and "
                f"{len(state.fronts)} fronts does not fit this pipeline's "
                f"{sorted(self._xor)} and {len(self._fronts)} fronts"
            )
        self._xor = {name: dict(table) for name, table in state.xor.items()}
        self._heaps = {name: sorted(table) for name, table in self._xor.items()}
        self._fronts = dict(state.fronts)
        self._vector = dict(state.vector)
        self._last = dict(state.last)
        self._buffered = {}

    def receive(self, node: int, message: AckerInput) -> list[MinTimeNotification]:
        """Take one message from ``node``'s channel; a `NodeTime` returns this shard's report.

        The report holds a notification per segment whose value changed, then always the
        global one; all carry this shard's index and its new vector.
        """
        if isinstance(message, NodeTime):
            return self._commit(message)
        if isinstance(message, Ack):
            if is_heartbeat_node(node):
                raise ProtocolViolation(f"an ack from heartbeat-only node {node}")
            if shard_of(message.slot, self.shards) != self.index:
                raise ProtocolViolation(f"slot {message.slot} routed to shard {self.index}")
            if message.segment not in self._xor:
                raise ProtocolViolation(f"ack for unknown segment {message.segment!r}")
        elif message.front not in self._fronts:
            raise ProtocolViolation(f"heartbeat from unknown front {message.front}")
        self._buffered.setdefault(node, []).append(message)
        return []

    def _commit(self, node_time: NodeTime) -> list[MinTimeNotification]:
        """Apply the node's batch, advance the vector, and report."""
        node = node_time.node
        if node_time.time <= self._vector.get(node, 0):
            raise ProtocolViolation(f"node {node} time {node_time.time} did not increase")
        for message in self._buffered.pop(node, ()):
            if isinstance(message, Ack):
                self._apply(message)
            elif message.slot > self._fronts[message.front]:
                self._fronts[message.front] = message.slot
        self._vector[node] = node_time.time
        return self._report()

    def _apply(self, ack: Ack) -> None:
        table = self._xor[ack.segment]
        old = table.get(ack.slot)
        if old is None:
            if ack.value:
                table[ack.slot] = ack.value
                heapq.heappush(self._heaps[ack.segment], ack.slot)
        elif old != ack.value:
            table[ack.slot] = old ^ ack.value
        else:
            del table[ack.slot]

    def _lowest(self, segment: str) -> int | None:
        heap = self._heaps[segment]
        table = self._xor[segment]
        while heap and heap[0] not in table:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def values(self) -> dict[str | None, int]:
        """This shard's bound per segment (and None): its lowest open slot or heartbeat."""
        bound = min(self._fronts.values(), default=0)
        lowest = {name: self._lowest(name) for name in self._order}
        out: dict[str | None, int] = {}
        for name in self._order:
            opened = [low for up in self._upstream[name] if (low := lowest[up]) is not None]
            out[name] = min([bound, *opened])
        out[None] = min(out.values())
        return out

    def _report(self) -> list[MinTimeNotification]:
        node_times = self.vector
        values = self.values()
        notes = [
            MinTimeNotification(key, value, node_times, shard=self.index)
            for key, value in values.items()
            if key is not None and self._last.get(key) != value
        ]
        notes.append(MinTimeNotification(None, values[None], node_times, shard=self.index))
        self._last = values
        return notes


class _History:
    """One shard's reports for one key: ``(vector, value)``, oldest first, never empty."""

    __slots__ = ("entries",)

    def __init__(self, start: int) -> None:
        self.entries: list[tuple[Vector, int]] = [({}, start)]

    def bound(self, base: Vector) -> int:
        """Least value from the last report at or below ``base`` on; drops older ones."""
        entries = self.entries
        accepted = 0
        for i in range(len(entries) - 1, -1, -1):
            if _leq(entries[i][0], base):
                accepted = i
                break
        del entries[:accepted]
        return min(value for _, value in entries)


class MinTimeListener:
    """Collects shard reports and publishes only min times their vectors make safe.

    Per key (each segment and the global None), on every report:

    1. Record the report in the sending shard's history; a global report also makes its
       vector the shard's latest (a shard sends it last, after its segment reports).
    2. ``B`` = element-wise minimum of the latest vectors of all shards, heartbeat-only
       nodes left out (the module docstring).
    3. Per shard, accept the last report whose vector is ``<= B``; the shard's bound is
       the least value of that report and every later one.
    4. The candidate is the least bound over shards; publish it if it is higher than the
       last published value (published times never go back).
    """

    def __init__(
        self,
        shards: int,
        segments: Iterable[str],
        start: int = 0,
        *,
        snapshot_interval: int = 0,
    ) -> None:
        """Listen to ``shards`` shards tracking ``segments``; every value starts at ``start``."""
        self._keys: tuple[str | None, ...] = (*segments, None)
        self._vectors: list[Vector] = [{} for _ in range(shards)]
        self._history = [{key: _History(start) for key in self._keys} for _ in range(shards)]
        self._published: dict[str | None, int] = dict.fromkeys(self._keys, start)
        self._subscribers: list[Callable[[MinTimeNotification], None]] = []
        self._snapshot_interval = snapshot_interval
        self._last_snapshot = start

    def subscribe(self, callback: Callable[[MinTimeNotification], None]) -> None:
        """Call ``callback`` with every published notification."""
        self._subscribers.append(callback)

    def unsubscribe(self, callback: Callable[[MinTimeNotification], None]) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        if callback in self._subscribers:
            self._subscribers.remove(callback)

    def min_time(self, segment: str | None = None) -> int:
        """Last published min time of ``segment`` (None: global)."""
        try:
            return self._published[segment]
        except KeyError:
            raise ProtocolViolation(f"unknown segment {segment!r}") from None

    def receive(self, note: MinTimeNotification) -> list[MinTimeNotification]:
        """Take one shard report (FIFO per shard); returns what it published."""
        if not 0 <= note.shard < len(self._vectors):
            raise ProtocolViolation(f"report from unknown shard {note.shard}")
        if note.segment not in self._published:
            raise ProtocolViolation(f"report for unknown segment {note.segment!r}")
        # Step 1
        vector = _acking(_vector_dict(note.node_times))
        if not _leq(self._vectors[note.shard], vector):
            raise ProtocolViolation(f"shard {note.shard} vector went back: {note.node_times}")
        self._history[note.shard][note.segment].entries.append((vector, note.slot))
        if note.segment is not None:
            return []
        self._vectors[note.shard] = vector
        # Step 2
        base = self._base()
        published: list[MinTimeNotification] = []
        for key in self._keys:
            # Step 3
            candidate = min(history[key].bound(base) for history in self._history)
            # Step 4
            if candidate > self._published[key]:
                self._published[key] = candidate
                published.append(self._note(key, candidate))
        for out in published:
            for callback in list(self._subscribers):
                callback(out)
        return published

    def _base(self) -> Vector:
        nodes = set().union(*self._vectors)
        return {node: min(v.get(node, 0) for v in self._vectors) for node in nodes}

    def _note(self, key: str | None, slot: int) -> MinTimeNotification:
        snapshot = False
        interval = self._snapshot_interval
        if key is None and interval > 0 and slot - self._last_snapshot >= interval:
            snapshot = True
            self._last_snapshot = slot
        return MinTimeNotification(key, slot, snapshot=snapshot)


class ShardRouter:
    """A node's side: routes its acks and heartbeats and closes batches with `NodeTime`."""

    def __init__(self, node: int, shards: int) -> None:
        """Router of ``node`` onto ``shards`` shards; its first batch ends at time 1."""
        self.node = node
        self.shards = shards
        self._time = 0
        self._out: list[tuple[int, AckerInput]] = []

    @property
    def time(self) -> int:
        """Number of batches this node has closed."""
        return self._time

    @property
    def pending(self) -> int:
        """Messages queued for the current batch."""
        return len(self._out)

    def ack(self, segment: str, slot: int, value: int) -> None:
        """Queue an ack for the shard that owns ``slot``."""
        self._out.append((shard_of(slot, self.shards), Ack(segment, slot, value)))

    def ack_many(self, acks: Iterable[tuple[str, int, int]]) -> None:
        """Queue acks in order."""
        for segment, slot, value in acks:
            self.ack(segment, slot, value)

    def heartbeat(self, front: int, slot: int) -> None:
        """Queue a heartbeat for every shard."""
        beat = Heartbeat(front, slot)
        self._out.extend((shard, beat) for shard in range(self.shards))

    def end_batch(self) -> list[tuple[int, AckerInput]]:
        """The queued ``(shard, message)`` pairs, then this node's new time to every shard."""
        self._time += 1
        tick = NodeTime(self.node, self._time)
        out = self._out
        out.extend((shard, tick) for shard in range(self.shards))
        self._out = []
        return out


class ShardedAcker:
    """Shards, routers and a listener wired together in-process, delivering at once."""

    def __init__(
        self, segments: Mapping[str, Sequence[str]], shards: int, fronts: Iterable[int] = ()
    ) -> None:
        """``shards`` shards over ``segments``; ``fronts`` are fixed and start at slot 0."""
        front_list = list(fronts)
        self.shards = [AckerShard(i, shards, segments, front_list) for i in range(shards)]
        self.listener = MinTimeListener(shards, topological_order(segments))
        self._routers: dict[int, ShardRouter] = {}

    def router(self, node: int) -> ShardRouter:
        """The router of ``node`` (created on first use)."""
        if node not in self._routers:
            self._routers[node] = ShardRouter(node, len(self.shards))
        return self._routers[node]

    def end_batch(self, node: int) -> None:
        """Deliver ``node``'s queued batch to the shards and their reports to the listener."""
        for shard, message in self.router(node).end_batch():
            for note in self.shards[shard].receive(node, message):
                self.listener.receive(note)

    def min_time(self, segment: str | None = None) -> int:
        """The listener's published min time."""
        return self.listener.min_time(segment)
