"""The barrier service of one sink: buffers, acks receipt, releases bundles by min time.

It reads ``<app>.<sink>.pre`` (read_committed, every partition; each record a frame of
items, `framework.wire.frames`), acks each item into the sink's segment as received,
buffers it in the core `Barrier` and, whenever the min time of
that segment grows, writes the released bundle to the sink's topic (format:
`framework.wire.bundles`). Receipt acks must not wait for a bundle (the min time that
releases a bundle needs them), so every round with new records commits too.

Positions (docs/decisions/barrier-positions.md): with every commit that carries receipt
acks, and at least every ``checkpoint_s``, per pre-barrier partition, the group offset is
``P_rel`` and the metadata holds ``P_ack``, the node time and ``GT_last``
(`framework.wire.positions`). A commit of a bundle alone skips them: the bundle's
header holds ``GT_last`` and ``seq``, and no ``P_ack`` moved. Start-up protocol:

1. Start the writers: transactional producers (one for bundles, one for receipt acks and
   positions) fence any older barrier of this sink and abort its open transactions.
2. Read the committed positions and their metadata.
3. Read the last bundle header of every partition of the sink's bundle topic
   (read_committed; FlameStream fault tolerance: "the consumer returns the last bundle").
4. Resume: ``GT_last`` is the later of the metadata's and the header's, the next bundle
   follows the header's ``seq``; the node time continues past the metadata's.
5. Seek every pre-barrier partition to ``P_rel``; records below ``P_ack`` are buffered
   again but not acked again, items at or before ``GT_last`` are dropped as replays.

A sink with several barrier instances (`connectors.KafkaSink` ``barriers``) runs this
service once per instance: instance ``k`` reads pre-barrier partition ``k``, writes the
output partitions it owns (`framework.wire.bundles.owned_partitions`) under transactional
ids of its own, acks as a node of its own, and commits its positions in the barrier's
group. Step 3 reads the last headers of its own partitions only; they must agree (one
writer made them), or the output topic was written with another instance count and the
start fails.

Positions are per record, so per frame: a frame is acked whole (all its items in one
transaction) and is needed until its latest item is at or before ``GT_last``.

Exactly once into a sink no tombstone can reach (`Graph.retracts`), items are kept per slot
as the output records they become and written ahead in blocks (`framework.barrier.blocks`);
into any other, each item is matched against its tombstones (`framework.core.barrier`).
Either way, bundles have a transaction of their own that takes items as they arrive,
ahead of their release (`framework.barrier.speculation`); receipt acks cannot wait in it
(the min time that releases it needs them), so they and the positions commit in a second
transaction, except in a round that releases a bundle: then they commit with it. At
least once, a release produces the bundle without a transaction, then commits the receipt
acks and the positions in one (`PlainWriter`: a receipt acked twice would re-open its
slot, so only the output may come twice).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, Message, TopicPartition

from framework.barrier.blocks import BlockWriter, SlotBuffer, SlotBundle
from framework.barrier.speculation import BundleWriter, Speculation
from framework.barrier.stats import BarrierStats
from framework.barrier.writer import (
    OutputWriter,
    PlainWriter,
    ReceiptSender,
    TransactionalWriter,
)
from framework.core.barrier import Barrier, Bundle
from framework.core.graph import Graph
from framework.core.ids import service_node_id
from framework.core.meta import Record
from framework.core.time import GlobalTime
from framework.errors import (
    ConfigError,
    FlamepipeError,
    KafkaClientError,
    PipelineError,
    ProtocolViolation,
)
from framework.kafka.admin import partition_count
from framework.kafka.clients import (
    assign,
    authentic_message,
    close_quietly,
    is_record,
    kafka_retry,
    new_consumer,
    signed_positions,
    take,
    verified_metadata,
    where,
)
from framework.kafka.endpoints import KafkaSink
from framework.kafka.mintime import MinTimeView
from framework.kafka.tail import last_bundle_header
from framework.service import Service
from framework.wire.bundles import bundle_records, owned_partitions
from framework.wire.frames import frame_rows, read_items
from framework.wire.positions import BarrierMark, PartitionLedger
from framework.wire.records import OutRecord
from framework.wire.topics import Topics

__all__ = ["BarrierService", "BarrierStats"]

_log = logging.getLogger(__name__)

_SLOW_OPEN_S = 2.0
"""A start-up slower than this says where its time went (a broker restart's coordinator
loading, an old producer's transaction aborted before the new one may start)."""

_new = tuple.__new__  # a Record without the Python-level NamedTuple __new__ call


class BarrierService(Service):
    """The barrier of sink node ``sink_node`` of ``app`` (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        app: str,
        sink_node: str,
        segment: str,
        sink: KafkaSink,
        *,
        shards: int,
        view: MinTimeView | None = None,
        segments: Iterable[str] = (),
        exactly_once: bool = True,
        epoch: int = 0,
        poll_s: float = 0.005,
        max_batch: int = 16,
        checkpoint_s: float = 1.0,
        speculation: Speculation | None = None,
        delta_ms: int = 10,
        instance: int = 0,
        retracts: bool = True,
    ) -> None:
        """Barrier of ``sink_node`` in ``segment``, writing to ``sink``.

        Without a ``view`` it runs its own `MinTimeView` over ``segments`` (all segment
        names of the pipeline). ``exactly_once=False`` writes without transactions.
        ``max_batch`` bounds the records (frames of up to thousands of items) taken per
        step, so a step, and a stop waiting for it, stays short. ``speculation`` tunes how
        exactly-once bundles are written ahead (``Speculation(enabled=False)``: only at
        release, for comparison). ``instance`` is which of the sink's ``barriers`` this is.
        ``retracts=False``: no tombstone can reach the sink (`Graph.retracts`), so an
        exactly-once barrier buffers and writes its items per slot
        (`framework.barrier.blocks`); a tombstone that comes anyway stops it.
        """
        if not 0 <= instance < sink.barriers:
            raise PipelineError(
                f"{sink!r} has barrier instances 0..{sink.barriers - 1}, not {instance}"
            )
        suffix = f"-{instance}" if instance else ""
        super().__init__(f"flamepipe-barrier-{app}-{sink_node}{suffix}")
        if view is None and not segments:
            raise PipelineError("a barrier without a MinTimeView needs the pipeline's segments")
        self.instance = instance
        self.bootstrap = bootstrap
        self.app = app
        self.sink_node = sink_node
        self.segment = segment
        self.sink = sink
        self.shards = shards
        self.exactly_once = exactly_once
        self.poll_s = poll_s
        self.max_batch = max_batch
        self.checkpoint_s = checkpoint_s
        self.speculation = speculation if speculation is not None else Speculation()
        self.delta_ms = delta_ms
        self.retracts = retracts
        # The transactional id (below) does not depend on the epoch: a barrier of a new
        # epoch must fence one of an older epoch still writing to the same output.
        self.epoch = epoch
        self.topics = Topics(app, epoch)
        self.pre = self.topics.pre(sink_node)
        # Every instance commits its partition's positions in one group; transactional ids
        # and node ids are per instance (instance 0 keeps the names of a single barrier).
        self.group = f"{app}.{sink_node}.barrier"
        self.transactional_id = self.group + (f".{instance}" if instance else "")
        named = (str(instance),) if instance else ()
        self.node = service_node_id(app, sink_node, "barrier", *named)
        self._receipts = ReceiptSender(self.topics.acks, self.node, segment, shards)
        self.stats = BarrierStats()
        self._view = view
        self._own_view = view is None
        self._segments = tuple(segments)
        self._barrier = Barrier()
        self._ledgers: dict[int, PartitionLedger] = {}
        self._acks: dict[int, int] = {}
        self._node_time = 0
        self._min_seen = 0
        self._released = 0
        self._out_partitions = 1
        self._owned = range(1)
        self._dirty = False
        self._last_commit = time.monotonic()
        self._consumer: Consumer | None = None
        self._writer: OutputWriter | None = None
        self._bundles: BundleWriter | None = None
        # Exactly once into a sink no tombstone reaches: these instead of the two above.
        self._slots: SlotBuffer | None = None
        self._blocks: BlockWriter | None = None

    @classmethod
    def for_graph(
        cls,
        bootstrap: str,
        graph: Graph,
        sink_node: str,
        shards: int,
        *,
        view: MinTimeView | None = None,
        exactly_once: bool = True,
        epoch: int = 0,
        instance: int = 0,
    ) -> BarrierService:
        """Barrier ``instance`` of ``sink_node`` of ``graph`` (a `KafkaSink`), as the
        constructor."""
        endpoint = graph.node(sink_node).endpoint
        if not isinstance(endpoint, KafkaSink):
            raise PipelineError(f"sink {sink_node} writes to {endpoint!r}, not a KafkaSink")
        segments = graph.segments()
        return cls(
            bootstrap,
            graph.name,
            sink_node,
            segments.of_node[sink_node],
            endpoint,
            shards=shards,
            view=view,
            segments=tuple(segments.inbound),
            exactly_once=exactly_once,
            epoch=epoch,
            delta_ms=graph.delta_ms,
            instance=instance,
            retracts=graph.retracts(sink_node),
        )

    @property
    def gt_last(self) -> GlobalTime | None:
        """The barrier's current ``GT_last`` (None before the first release)."""
        return self._buffer().gt_last

    @property
    def next_seq(self) -> int:
        """Sequence number of the next bundle."""
        return self._buffer().next_seq

    def _buffer(self) -> Barrier | SlotBuffer:
        return self._barrier if self._slots is None else self._slots

    # -- start-up ----------------------------------------------------------------------------

    def _open(self) -> None:
        """The start-up protocol of the module docstring."""
        began = time.monotonic()
        self._out_partitions = self.sink.prepare(self.bootstrap)
        self._owned = owned_partitions(self._out_partitions, self.sink.barriers, self.instance)
        pre_partitions = partition_count(self.bootstrap, self.pre)
        if pre_partitions != self.sink.barriers:
            raise ConfigError(
                f"{self.pre} has {pre_partitions} partition(s) and {self.sink!r} "
                f"{self.sink.barriers} barrier(s): the count changes only in a new epoch "
                "(flamepipe replay), or set barriers back"
            )
        self._consumer = consumer = new_consumer(self.bootstrap, self.group)
        # Step 1
        if self.exactly_once:
            self._writer = TransactionalWriter(self.bootstrap, consumer, self.transactional_id)
            kind = BundleWriter if self.retracts else BlockWriter
            bundles = kind(
                self.bootstrap,
                consumer,
                f"{self.transactional_id}.bundles",
                self.sink.topic,
                self._out_partitions,
                speculation=self.speculation.fresh(),
                stats=self.stats,
                owned=self._owned,
            )
            bundles.open()
            if isinstance(bundles, BlockWriter):
                self._blocks = bundles
            else:
                self._bundles = bundles
        else:
            self._writer = PlainWriter(
                self.bootstrap, consumer, self.transactional_id, self.topics.acks
            )
        self._writer.open()
        producers = time.monotonic()
        # Step 2
        marks = self._committed(consumer, self.instance)
        positions = time.monotonic()
        # Step 3
        header = last_bundle_header(
            self.bootstrap, self.sink.topic, self._owned, strict=self.exactly_once
        )
        if (took := time.monotonic() - began) > _SLOW_OPEN_S:  # after a broker restart
            _log.info(
                "%s: opened in %.1f s (producers %.1f s, positions %.1f s, last bundle %.1f s)",
                self.name,
                took,
                producers - began,
                positions - producers,
                time.monotonic() - positions,
            )
        # Step 4
        gts = [mark.gt_last for _, mark in marks.values() if mark.gt_last is not None]
        if header is not None:
            gts.append(header.gt_last)
        next_seq = header.seq + 1 if header is not None else 0
        self._barrier = Barrier(max(gts) if gts else None, next_seq, strict=True)
        if self._blocks is not None:
            self._slots = self._blocks.buffer = SlotBuffer(
                self._out_partitions, max(gts) if gts else None, next_seq, strict=True
            )
        self._node_time = max((mark.node_time for _, mark in marks.values()), default=0)
        # Step 5
        p = self.instance
        start, mark = marks.get(p, (None, BarrierMark(0, 0, None)))
        self._ledgers[p] = PartitionLedger(start or 0, mark.acked)
        starts: dict[int, int | None] = {p: start}
        assign(consumer, self.pre, starts)
        if self._view is None:
            self._view = MinTimeView(
                self.bootstrap, self.app, self.shards, self._segments, epoch=self.epoch
            )
            self._view.start()

    def _committed(
        self, consumer: Consumer, partition: int
    ) -> dict[int, tuple[int | None, BarrierMark]]:
        asked = [TopicPartition(self.pre, partition)]
        found = kafka_retry(
            f"cannot read the positions of group {self.group!r}",
            lambda: consumer.committed(asked, timeout=30),
        )
        marks: dict[int, tuple[int | None, BarrierMark]] = {}
        for tp in found:
            if tp.error is not None:
                raise KafkaClientError(f"position of {self.group!r} on {self.pre}: {tp.error}")
            if tp.offset >= 0:
                at = f"group {self.group!r} on {self.pre}[{tp.partition}]"
                text = verified_metadata(self.group, tp)
                marks[tp.partition] = (tp.offset, BarrierMark.decode(text, at))
        return marks

    # -- the loop ----------------------------------------------------------------------------

    def _step(self) -> None:
        assert self._consumer is not None and self._view is not None
        debug = _log.isEnabledFor(logging.DEBUG)  # no clock read per step otherwise
        started = time.monotonic() if debug else 0.0
        items, ahead = self.stats.items_in, self.stats.ahead
        for msg in take(self._consumer, self.max_batch, self.poll_s):
            if is_record(msg, self.pre):
                self._take(msg)
        if self._blocks is not None:
            self._blocks.write_ahead()  # once a step: one client loop
        if debug and self.stats.items_in > items:
            _log.debug(
                "%s: took %d items (%d written ahead) in %.3f s; min time seen %d",
                self.name,
                self.stats.items_in - items,
                self.stats.ahead - ahead,
                time.monotonic() - started,
                self._min_seen,
            )
        self._view.check()
        bundle: Bundle | SlotBundle | None = None
        min_time = self._view.min_time(self.segment)
        seen_at = time.monotonic()
        for writer in (self._bundles, self._blocks):
            if writer is not None:
                writer.expire()
        if min_time > self._min_seen and not self.replaying and not self._held(min_time):
            self._min_seen = min_time
            buffer = self._buffer()
            before = buffer.gt_last
            bundle = buffer.on_min_time(min_time)
            self._dirty = self._dirty or buffer.gt_last != before
        overdue = time.monotonic() - self._last_commit > self.checkpoint_s
        if self._acks or bundle is not None or (self._dirty and overdue):
            self._commit(bundle, positions=bool(self._acks) or overdue)
            if isinstance(bundle, SlotBundle):
                self.stats.release_s.append(time.monotonic() - seen_at)
                self.stats.note_slot_latencies(bundle.slots, self.delta_ms)
            elif bundle is not None and bundle.records:
                self.stats.release_s.append(time.monotonic() - seen_at)
                self.stats.note_latencies(bundle.records, self.delta_ms)
        # Bundles are committed as soon as they exist: everything below is out or cancelled.
        self._released = self._min_seen

    def _held(self, min_time: int) -> bool:
        """Whether the bundle transaction holds items a release at ``min_time`` would not."""
        if self._blocks is not None:
            return self._blocks.holds(min_time)
        bundles = self._bundles
        return bundles is not None and bundles.holds(min_time, self._barrier)

    @property
    def replaying(self) -> bool:
        """Whether records acked before the restart are still being read again (no release
        happens until they are)."""
        return any(ledger.replaying for ledger in self._ledgers.values())

    @property
    def replays_dropped(self) -> int:
        """Items and tombstones dropped as at or before GT_last (see `Barrier`)."""
        return self._buffer().replays_dropped

    def released_through(self) -> int:
        """The min time last applied: every item in a lower slot is visible or cancelled."""
        return self._released

    def _take(self, msg: Message) -> None:
        partition, offset = where(msg)
        ledger = self._ledgers[partition]
        if not authentic_message("barrier", msg):
            ledger.skip(offset)  # never decoded; it holds nothing a release waits for
            self.stats.refused += 1
            return
        at = f"{self.pre}[{partition}]@{offset}"
        acking = ledger.needs_ack(offset)
        if self._slots is not None:
            keyed, rows = frame_rows(msg.headers(), msg.value(), at)
            if keyed:
                raise ProtocolViolation(f"{at}: a keyed frame on a pre-barrier topic")
            ledger.read(offset, self._slots.take(rows, self._acks if acking else None, at))
            self.stats.records_in += 1
            self.stats.items_in += len(rows)
            self._dirty = True
            return
        items = read_items(msg.headers(), msg.value(), at)
        acks = self._acks
        barrier = self._barrier
        push = barrier.push
        bundles = self._bundles
        speculating = bundles is not None and bundles.speculation.enabled
        admit = bundles.speculation.admit if speculating and bundles is not None else None
        ahead: list[Record] = []  # written ahead once per frame: one client loop, not n calls
        latest = items[0][0].gt
        for meta, ack, payload in items:  # one pass: this runs once per output item
            gt = meta.gt
            latest = max(latest, gt)
            if acking:
                acks[gt.slot] = acks.get(gt.slot, 0) ^ ack
            record = _new(Record, (meta, payload))
            change = push(record)
            if admit is not None:
                if change < 0 and ahead:  # a cancelled item must be seen as written already
                    assert bundles is not None
                    bundles.write_ahead(ahead)
                    ahead = []
                if admitted := admit(record, change, barrier):
                    ahead.extend(admitted)
        if ahead:
            assert bundles is not None
            bundles.write_ahead(ahead)
        # A frame is needed until its latest item is released (items need not be sorted).
        ledger.read(offset, latest)
        self.stats.records_in += 1
        self.stats.items_in += len(items)
        self._dirty = True

    def _commit(self, bundle: Bundle | SlotBundle | None, positions: bool = True) -> None:
        """Write a bundle, the receipt acks and the positions.

        1. The receipt acks since the last commit: one ack batch per shard, closed by the
           next node time of this barrier (every shard gets one, as from any sender).
        2. Per pre-barrier partition ``P_rel`` with ``P_ack``, node time, ``GT_last`` --
           unless ``positions`` is false: a bundle without receipt acks needs none (its
           header carries ``GT_last`` and ``seq``, which a restart reads back, and no
           ``P_ack`` moved), so the write that releases output skips the two round trips
           of committing offsets in a transaction. They follow within ``checkpoint_s``.
        3. Exactly once, release the bundle in its own transaction (`BundleWriter.release`),
           which takes the acks and positions of steps 1-2 too: one commit per round
           instead of two (a round of a steady flow: 7 ms for the bundle, 8 for the
           receipts; the receipts of the next frames wait for both). At least once, take
           the bundle's records: items, then a header on every output partition.
        4. Write the rest, if any, at once (`OutputWriter.write`: one transaction when
           exactly once).
        5. Only then take the acks as sent and the positions as committed.
        """
        assert self._writer is not None
        began = time.monotonic()
        records: list[OutRecord] = []
        # Step 1
        node_time = self._node_time
        acks = {slot: value for slot, value in self._acks.items() if value}
        if acks:
            node_time = max(node_time + 1, time.time_ns() // 1000)
            records.extend(self._receipts.records(acks, node_time))
        # Step 2
        gt_last = self._buffer().gt_last
        marks = signed_positions(
            self.group,
            [
                TopicPartition(
                    self.pre,
                    p,
                    ledger.release_position(gt_last),
                    metadata=ledger.mark(node_time, gt_last).encode(),
                )
                for p, ledger in self._ledgers.items()
                if positions
            ],
        )
        # Step 3
        # Crash tests kill the barrier here, between producing a bundle and committing it.
        crash = "barrier.bundle" if isinstance(bundle, Bundle) and bundle.records else None
        if isinstance(bundle, SlotBundle):
            assert self._blocks is not None
            started = time.monotonic()
            self._blocks.release(bundle, "barrier.bundle", records, marks)
            self.stats.write_s.append(time.monotonic() - started)
            self.stats.commits += 1
            records, marks, crash = [], [], None
        elif bundle is not None and self._bundles is not None:
            started = time.monotonic()
            self._bundles.release(bundle, self._barrier, crash, records, marks)
            self.stats.write_s.append(time.monotonic() - started)
            self.stats.commits += 1
            records, marks, crash = [], [], None
        elif bundle is not None:
            records[:0] = bundle_records(bundle, self.sink.topic, self._out_partitions, self._owned)
        # Step 4
        if records or marks:
            started = time.monotonic()
            self._writer.write(records, marks, crash)
            self.stats.write_s.append(time.monotonic() - started)
            self.stats.commits += 1
        # Step 5
        self._acks = {}
        self._node_time = node_time
        if positions:
            for ledger in self._ledgers.values():
                ledger.acked_all()
            self._dirty = False
            self._last_commit = time.monotonic()
        if bundle is not None:
            self.stats.bundles += 1
            self.stats.items_out += (
                bundle.items if isinstance(bundle, SlotBundle) else len(bundle.records)
            )
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug(
                "%s: committed %s, receipts of %d slots, positions %s, in %.3f s",
                self.name,
                "no bundle" if bundle is None else f"bundle {bundle.seq}",
                len(acks),
                "yes" if positions else "no",
                time.monotonic() - began,
            )

    def _close(self) -> None:
        for writer in (self._bundles, self._blocks, self._writer):
            if writer is not None:
                writer.close()
        self._bundles = self._writer = self._blocks = None
        consumer, self._consumer = self._consumer, None
        close_quietly(consumer)
        view = self._view
        if self._own_view and view is not None:
            self._view = None
            with contextlib.suppress(FlamepipeError):  # the barrier's own failure comes first
                view.stop()
