"""`SnapshotCoordinator`: periodic snapshots of a pipeline taken from its changelogs.

Decision: ``docs/decisions/snapshots-from-changelogs.md``. Grouping state is durable in
compacted changelog topics, written in the same transaction as the task's outputs and
receipt acks, so the coordinator reads state instead of asking the groupings to save it,
and reads the barriers' committed positions instead of asking them to accept.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.core.graph import BUCKETED, Graph, Kind, Node
from framework.core.ops import op_id_of
from framework.errors import ConfigError, FlamepipeError, KafkaUnreachable
from framework.kafka.admin import end_offsets, partition_count
from framework.kafka.endpoints import kafka_sources, sink_nodes
from framework.kafka.lifts import read_lifts
from framework.kafka.mintime import MinTimeView
from framework.kafka.topics import CHANGELOG_LAG_MS
from framework.service import Service
from framework.snapshots.acceptance import BarrierMarks
from framework.snapshots.backends.base import StateBackend
from framework.snapshots.copies import ChangelogCopies, Part
from framework.snapshots.offsets import replay_offsets
from framework.snapshots.snapshot_writer import SnapshotWriter
from framework.snapshots.units import (
    encode_aggregate_unit,
    encode_unit,
    state_shape,
    unit_label,
    unit_name,
)
from framework.wire.lifts import Lift
from framework.wire.topics import Topics
from framework.wire.znodes import SnapshotRecord

_log = logging.getLogger(__name__)

KEEP = 2
"""Committed snapshots kept in ZooKeeper (and so in the backend)."""

_TIMEOUT_S = 60.0


def combining_pane(graph: Graph) -> int:
    """Slots a snapshot's slot must be a multiple of: the least common multiple of the
    panes of the graph's combinable aggregates (1 without any).

    A source task pre-reduces a combinable aggregate's items per key and pane into one
    partial with the largest meta of its items (`framework.plan.task`). A snapshot cut at
    a slot inside a pane would drop a partial whose largest item lies at or after the slot
    together with its earlier items, which the replay from the slot's offsets never reads
    again: measured on the cluster tier, a 1 s window's counts 213 of 275 after a stall
    recovery. At a pane boundary every partial lies wholly on one side, and so does every
    cell of the aggregate itself, which keeps one reduced value per key and pane with its
    largest meta (`framework.core.panes`).
    """
    pane = 1
    for node in graph.by_kind(Kind.AGGREGATE):
        aggregation = node.aggregation
        if aggregation is not None and aggregation.combinable:
            pane = math.lcm(pane, max(1, aggregation.pane_slots(graph.delta_ms)))
    return pane


def aligned(slot: int, pane: int) -> int:
    """``slot`` lowered to a multiple of ``pane``."""
    return slot - slot % pane


@dataclass(slots=True)
class SnapshotStats:
    """Counters of one coordinator run."""

    snapshots: int = 0  # committed
    last_slot: int = -1
    last_duration_ms: float = 0.0  # min time seen -> committed, of the last snapshot
    waiting_barriers: int = 0  # rounds skipped: a barrier had released no new slot
    waiting_changelogs: int = 0  # rounds skipped: a changelog transaction was still open
    waiting_cuts: int = 0  # rounds skipped: an aggregate's cut was older than the lag allows
    cut_short: int = 0  # aggregate units saved from before a batch already read (last round)
    units_saved: int = 0
    bytes_saved: int = 0
    records_read: int = 0  # changelog records applied to the copies
    collected: int = 0  # snapshot records deleted by gc


@dataclass(frozen=True, slots=True)
class _Target:
    """The snapshot in progress: its slot, the changelog marks, when min time was seen."""

    slot: int
    marks: dict[Part, int]
    started: float


class SnapshotCoordinator(Service):
    """Takes a snapshot of ``graph`` in ``epoch`` every ``interval_ms``.

    Protocol of a round, each step only if the one before succeeded:

    1. Slot: ``M`` is the global min time, lowered to the largest slot every sink's
       barrier has accepted (committed a ``GT_last`` at or after the end of slot
       ``M - 1``, `framework.snapshots.acceptance`), then to a pane boundary of every
       combinable aggregate (`aligned`). Only an ``M`` after the last committed slot goes
       on; otherwise the round is skipped and the next tick tries again.
    2. State: mark the changelogs' ends; once no transaction below the marks is open
       (possibly a later tick), catch every unit's copy up to its stable end (an
       aggregate's image up to its first batch with a min time past ``M``: a cut older
       than half the changelogs' compaction lag skips the round) and save
       ``snapshot(below=M)`` of each grouping unit (``"<node>/<p>"``), the image cut at
       ``M`` of each aggregate unit, at slot ``M`` through a `SnapshotWriter`; wait until
       every save is durable.
    3. Replay offsets: per source partition, the first offset stamped at or after
       ``M * delta_ms``, or the first of a lift at or after ``M`` (`replay_offsets`).
    4. Commit ``SnapshotRecord(M, offsets, units, epoch)`` to the registry.
    5. Collect: ``registry.gc(keep=2)``, then ``backend.drop_below`` the oldest kept slot.

    The backend must hold this application's snapshots only: step 5 drops every unit's
    older snapshots. Groupings must prune only below the committed slot (the prune rule
    of the decision), or a copy may miss items that ``snapshot(below=M)`` needs.
    """

    def __init__(
        self,
        bootstrap: str,
        graph: Graph,
        epoch: int,
        backend: StateBackend,
        registry: SnapshotRegistry,
        *,
        view: MinTimeView | None = None,
        delta_ms: int | None = None,
        interval_ms: int = 1000,
        shards: int = 2,
    ) -> None:
        """A coordinator; without ``view`` it runs its own over ``shards`` acker shards.

        It owns ``registry``: stopping it closes it.
        """
        super().__init__(f"flamepipe-snapshots-{graph.name}")
        if interval_ms < 1:
            raise ConfigError(f"snapshot interval_ms={interval_ms} must be >= 1")
        self.bootstrap = bootstrap
        self.graph = graph.validate()
        self.epoch = epoch
        self.backend = backend
        self.registry = registry
        self.delta_ms = graph.delta_ms if delta_ms is None else delta_ms
        self.interval_s = interval_ms / 1000
        self.shards = shards
        self.topics = Topics(graph.name, epoch)
        self.stats = SnapshotStats()
        self.last: SnapshotRecord | None = None
        self._view = view
        self._own_view = view is None
        self._groups = list(self.graph.by_kind(Kind.GROUP))
        # Aggregates and converges: images of their changelogs, cut at a snapshot's slot.
        self._aggregates = [node for node in self.graph.nodes if node.kind in BUCKETED]
        self._pane = combining_pane(self.graph)
        self._lifts_end = 0
        self._lifted: dict[str, tuple[Lift, ...]] = {}
        self._sources = sorted(s.topic for s in kafka_sources(self.graph).values())
        self._barriers: BarrierMarks | None = None
        self._copies: ChangelogCopies | None = None
        self._partitions: dict[str, int] = {}
        self._writer: SnapshotWriter | None = None
        self._target: _Target | None = None
        self._skipping = 0  # rounds skipped in a row for an old cut
        self._next_tick = 0.0

    @property
    def committed_slot(self) -> int | None:
        """The slot of the last committed snapshot (this run's or an earlier one's)."""
        return None if self.last is None else self.last.slot

    def _open(self) -> None:
        self.last = self.registry.latest()
        if self._view is None:
            segments = tuple(self.graph.segments().inbound)
            self._view = MinTimeView(
                self.bootstrap, self.graph.name, self.shards, segments, epoch=self.epoch
            ).start()
        self._view.wait_ready()
        sinks = sink_nodes(self.graph)
        self._barriers = BarrierMarks(self.bootstrap, self.graph.name, self.epoch, sinks)
        self._writer = SnapshotWriter(self.backend)

    def _step(self) -> None:
        wait = self._next_tick - time.monotonic()
        if wait > 0:
            self._stopping.wait(min(wait, 0.1))
            return
        self._next_tick = time.monotonic() + self.interval_s
        self._round()

    def _round(self) -> None:
        """One round of the protocol (class docstring); returns early to try again later."""
        assert self._view is not None and self._barriers is not None
        self._view.check()
        target = self._target
        if target is None:
            # Step 1. Not "wait until the barriers reach min time": min time moves on
            # while an idle barrier commits its mark about once a second.
            min_time = self._view.min_time()
            if min_time <= (self.committed_slot or 0):
                return
            slot = aligned(min(min_time, self._barriers.accepted()), self._pane)
            if slot <= (self.committed_slot or 0):
                self.stats.waiting_barriers += 1
                return
            copies = self._changelogs()
            if copies is None:
                return
            # Step 2, marks: after min time `slot` was seen.
            target = self._target = _Target(slot, copies.mark(), time.monotonic())
        copies = self._changelogs()
        assert copies is not None
        if not copies.settled(target.marks):
            self.stats.waiting_changelogs += 1
            return
        self.stats.records_read += copies.catch_up(cut=target.slot)
        inexact = copies.inexact(CHANGELOG_LAG_MS // 2)
        if inexact:
            # A later slot cuts at a later batch: try again with the next min time.
            self.stats.waiting_cuts += 1
            self._target = None
            if not self._skipping:  # once per run of skips, not once per round
                _log.warning(
                    "%s: snapshot at slot %d skipped: the cut of %s is at a batch older "
                    "than half the changelog's compaction lag when read; retrying with "
                    "later slots",
                    self.graph.name,
                    target.slot,
                    inexact[0],
                )
            self._skipping += 1
            return
        if self._skipping:
            _log.info(
                "%s: snapshot at slot %d after %d rounds skipped for old cuts",
                self.graph.name,
                target.slot,
                self._skipping,
            )
            self._skipping = 0
        try:
            lifts = self._lifts()
        except FlamepipeError as exc:  # a broker restarting: the next round tries again
            _log.warning("%s: snapshot at slot %d postponed: %s", self.graph.name, target.slot, exc)
            return
        self.stats.cut_short = copies.cut_short()
        units = self._save(copies, target.slot)
        # Step 3
        sources = {topic: self._partition_count(topic) or 0 for topic in self._sources}
        offsets = replay_offsets(self.bootstrap, sources, target.slot, self.delta_ms, lifts)
        # Step 4
        record = SnapshotRecord(
            slot=target.slot,
            offsets=offsets,
            units=units,
            epoch=self.epoch,
            created_ms=time.time_ns() // 1_000_000,
        )
        self.registry.commit(record)
        self.last, self._target = record, None
        self.stats.snapshots += 1
        self.stats.last_slot = record.slot
        self.stats.last_duration_ms = (time.monotonic() - target.started) * 1000
        # Step 5: records first, so no kept record ever names a dropped snapshot.
        self.stats.collected += len(self.registry.gc(keep=KEEP))
        self.backend.drop_below(min(self.registry.slots()))

    def _save(self, copies: ChangelogCopies, slot: int) -> dict[str, tuple[str, ...]]:
        """Step 2, saving: every unit's snapshot at ``slot``, durable on return."""
        assert self._writer is not None
        units: dict[str, tuple[str, ...]] = {}
        futures = []
        for node in (*self._groups, *self._aggregates):
            topic = self.topics.state(node.id)
            units[node.id] = tuple(unit_name(node.id, p) for p in range(self._partitions[topic]))
            for p, name in enumerate(units[node.id]):
                label = unit_label(self.graph.name, name, slot)
                encode = self._encoder(copies, node, (topic, p), label, slot)
                futures.append(self._writer.submit(name, slot, encode))
        for future in futures:
            saved = future.result(timeout=_TIMEOUT_S)
            self.stats.units_saved += 1
            self.stats.bytes_saved += saved.size
        return units

    def _encoder(
        self, copies: ChangelogCopies, node: Node, part: Part, label: str, slot: int
    ) -> Callable[[], bytes]:
        """The bytes of one unit at ``slot``: a grouping's state below it, or an
        aggregate's image cut at it (decided here, encoded on the writer's thread)."""
        topic, p = part
        shape = state_shape(node, self.graph.delta_ms)
        if shape is None:
            return functools.partial(encode_unit, copies.snapshot(topic, p, below=slot), label)
        image = copies.image(topic, p)
        return functools.partial(
            encode_aggregate_unit, image.cut(slot), image.min_time, shape, label
        )

    def _changelogs(self) -> ChangelogCopies | None:
        """The unit copies, once every state and source topic exists (None before)."""
        if self._copies is None:
            topics = [self.topics.state(node.id) for node in (*self._groups, *self._aggregates)]
            counts = [self._partition_count(t) for t in (*topics, *self._sources)]
            if not all(counts):
                return None  # the runner has not created them yet
            self._copies = ChangelogCopies(
                self.bootstrap,
                {
                    self.topics.state(node.id): (
                        self._partitions[self.topics.state(node.id)],
                        op_id_of(self.graph.name, node.id),
                        node.window,
                    )
                    for node in self._groups
                },
                images={
                    self.topics.state(node.id): self._partitions[self.topics.state(node.id)]
                    for node in self._aggregates
                },
            )
        return self._copies

    def _lifts(self) -> dict[str, tuple[Lift, ...]]:
        """The pipeline's lifts (`framework.wire.lifts`), read again only when more exist:
        nearly always none, one end offset asked per round."""
        topic = Topics(self.graph.name).lifts
        if not self._partition_count(topic):
            return {}
        count = end_offsets(self.bootstrap, topic, partitions=1)[0]
        if count != self._lifts_end:
            self._lifts_end, self._lifted = count, read_lifts(self.bootstrap, self.graph.name)
        return self._lifted

    def _partition_count(self, topic: str) -> int | None:
        if topic not in self._partitions:
            try:
                self._partitions[topic] = partition_count(self.bootstrap, topic)
            except (ConfigError, KafkaUnreachable):  # not created yet, or a broker restarting
                return None
        return self._partitions[topic]

    def _close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            # A failed save already failed its round through its future.
            with contextlib.suppress(FlamepipeError):
                writer.close(_TIMEOUT_S)
        for part in (self._barriers, self._copies):
            if part is not None:
                part.close()
        self._barriers = self._copies = None
        view = self._view
        if self._own_view and view is not None:
            self._view = None
            with contextlib.suppress(FlamepipeError):  # our own failure comes first
                view.stop()
        # Made for this coordinator (`coordinator_for`); its ZooKeeper session would
        # otherwise live, and reconnect, until the process exits. (The backend stays open:
        # an in-memory one is shared with the restorer of a later epoch.)
        self.registry.close()
