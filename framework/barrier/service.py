"""The barrier service of one sink: buffers, reads to the committed end, releases by min time.

It reads ``<app>.<sink>.pre`` (read_committed, every partition; each record a frame of
items, `framework.wire.frames`), buffers each item in the core `Barrier` and, whenever the
min time of the sink's segment grows, writes the released bundle to the sink's topic
(format: `framework.wire.bundles`).

Nothing is acked on receipt. The stage that writes a frame commits it in the transaction
that acks its own input, and does not ack the frame's items as sent, so the acker counts a
frame as received the moment its transaction commits (docs/decisions/barrier-positions.md,
"A frame counts as received when it is committed"). A min time ``M`` of the sink's segment
therefore promises only that every frame with an item below ``M`` is *committed*, not that
this barrier has read it. Release protocol:

1. On a min time ``M`` greater than the last one applied, ask the broker for the end
   ``L`` (high watermark) of the pre-barrier partition. ``M`` was published after every
   transaction with a frame below it committed, so after the frame was appended, and
   ``L`` is asked for after ``M`` was seen: every such frame is below ``L``.
2. Go on reading; once the consumer's position reaches ``L`` (read_committed, it passes
   an offset only once its transaction has ended; librdkafka's position moves past
   transaction markers and aborted records too), apply ``M``: release the bundle.
3. A later min time waits for its own ``L``; one seen while a fence is pending is asked for
   after that fence is applied.

Positions (docs/decisions/barrier-positions.md): at least every ``checkpoint_s`` and with
bundles when due, per pre-barrier partition, the group offset is ``P_rel`` and the
metadata holds ``GT_last`` (`framework.wire.positions`). Start-up protocol:

1. Start the writers: transactional producers (one for bundles, one for positions) fence
   any older barrier of this sink and abort its open transactions.
2. Read the committed positions and their metadata.
3. Read the last bundle header of every partition of the sink's bundle topic
   (read_committed; FlameStream fault tolerance: "the consumer returns the last bundle").
4. Resume: ``GT_last`` is the later of the metadata's and the header's, the next bundle
   follows the header's ``seq``.
5. Seek every pre-barrier partition to ``P_rel``; items at or before ``GT_last`` are
   dropped as replays. The release protocol's fence makes a restarted barrier read again
   everything committed before the first min time it applies.

A sink with several barrier instances (`connectors.KafkaSink` ``barriers``) runs this
service once per instance: instance ``k`` reads pre-barrier partition ``k``, writes the
output partitions it owns (`framework.wire.bundles.owned_partitions`) under transactional
ids of its own, and commits its positions in the barrier's group. Step 3 reads the last
headers of its own partitions only; they must agree (one writer made them), or the output
topic was written with another instance count and the start fails.

Positions are per record, so per frame: a frame is needed until its latest item is at or
before ``GT_last``.

Exactly once into a sink no tombstone can reach (`Graph.retracts`), items are kept per slot
as the output records they become and written ahead in blocks (`framework.barrier.blocks`);
into any other, each item is matched against its tombstones (`framework.core.barrier`).
Either way, bundles have a transaction of their own that takes items as they arrive,
ahead of their release (`framework.barrier.speculation`); positions commit in it when a
bundle is released, else in a second transaction. At least once, a release produces the
bundle without a transaction, then commits the positions (`PlainWriter`: only the output
may come twice).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, Message, TopicPartition

from framework.barrier.blocks import BlockWriter, SlotBuffer, SlotBundle
from framework.barrier.output_writer import (
    OutputWriter,
    PlainWriter,
    TransactionalWriter,
)
from framework.barrier.speculation import BundleWriter, Speculation
from framework.barrier.stats import BarrierStats
from framework.core.barrier import Barrier, Bundle
from framework.core.graph import Graph
from framework.core.meta import Record
from framework.core.time import GlobalTime
from framework.errors import (
    ConfigError,
    FlamepipeError,
    KafkaClientError,
    PipelineError,
    ProtocolViolation,
)
from framework.kafka.admin import end_offsets, partition_count
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
        self.stats = BarrierStats()
        self._view = view
        self._own_view = view is None
        self._segments = tuple(segments)
        self._barrier = Barrier()
        self._ledger = PartitionLedger(0)  # of its one pre-barrier partition, `instance`
        # (min time, the end offset to read to, when the min time was seen)
        self._fence: tuple[int, int, float] | None = None
        self._releasable = 0  # the latest min time whose fence is passed
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
            self._writer = PlainWriter(self.bootstrap, consumer, self.transactional_id)
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
        # Step 5
        p = self.instance
        start, _ = marks.get(p, (None, BarrierMark(None)))
        self._ledger = PartitionLedger(start or 0)
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
        min_time = self._fenced(self._view.min_time(self.segment))
        seen_at = time.monotonic()
        for writer in (self._bundles, self._blocks):
            if writer is not None:
                writer.expire()
        if min_time > self._min_seen and not self._held(min_time):
            self._min_seen = min_time
            buffer = self._buffer()
            before = buffer.gt_last
            bundle = buffer.on_min_time(min_time)
            self._dirty = self._dirty or buffer.gt_last != before
        overdue = time.monotonic() - self._last_commit > self.checkpoint_s
        if bundle is not None or (self._dirty and overdue):
            self._commit(bundle, positions=overdue)
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

    def _fenced(self, seen: int) -> int:
        """The latest min time that may be applied now (the release protocol, steps 1-3):
        one seen before everything then committed was read."""
        fence = self._fence
        if fence is not None and self._read_to() >= fence[1]:
            self._pass(fence)
            fence = None
        if fence is None and seen > max(self._min_seen, self._releasable):
            # Step 1
            began = time.monotonic()
            fence = self._fence = (seen, self._log_end(), began)
            self.stats.end_s.append(time.monotonic() - began)
            # Step 2: mostly read already (the barrier polls while the acker works)
            if self._read_to() >= fence[1]:
                self._pass(fence)
            else:
                self.stats.fence_waits += 1
        # Step 3
        return max(self._min_seen, self._releasable)

    def _pass(self, fence: tuple[int, int, float]) -> None:
        self._releasable = max(self._releasable, fence[0])
        self._fence = None
        self.stats.fence_s.append(time.monotonic() - fence[2])

    def _log_end(self) -> int:
        """The pre-barrier partition's end (high watermark), asked of the broker now.

        Not the last stable offset: a transaction's markers reach its partitions one by
        one, so the acks of a committed frame may be visible (and min time past it)
        while its own partition still shows it as open. Every frame below min time was
        appended before min time was published, so below the end asked for after it;
        reading up to that end waits for whatever transactions were open there. Asked
        through the admin client: the consumer's own connection is held by its waiting
        fetch (up to ``fetch.wait.max.ms``, measured 500 ms on an idle partition).
        """
        try:
            ends = end_offsets(self.bootstrap, self.pre, partitions=self.sink.barriers)
        except ConfigError as exc:  # the topic was read at the start: this is Kafka's trouble
            raise KafkaClientError(f"{self.name}: {exc}") from exc
        return ends[self.instance]

    def _read_to(self) -> int:
        """The offset up to which the pre-barrier partition is read: the consumer's
        position (past markers and aborted records), at least the ledger's."""
        assert self._consumer is not None
        own = self._ledger.position
        (tp,) = self._consumer.position([TopicPartition(self.pre, self.instance)])
        return max(own, tp.offset)

    @property
    def catching_up(self) -> bool:
        """Whether a min time waits for the barrier to read what was committed before it
        (after a restart: the records read again)."""
        return self._fence is not None

    @property
    def replays_dropped(self) -> int:
        """Items and tombstones dropped as at or before GT_last (see `Barrier`)."""
        return self._buffer().replays_dropped

    def released_through(self) -> int:
        """The min time last applied: every item in a lower slot is visible or cancelled."""
        return self._released

    def _take(self, msg: Message) -> None:
        partition, offset = where(msg)
        ledger = self._ledger
        if not authentic_message("barrier", msg):
            ledger.skip(offset)  # never decoded; it holds nothing a release waits for
            self.stats.refused += 1
            return
        at = f"{self.pre}[{partition}]@{offset}"
        if self._slots is not None:
            keyed, rows = frame_rows(msg.headers(), msg.value(), at)
            if keyed:
                raise ProtocolViolation(f"{at}: a keyed frame on a pre-barrier topic")
            ledger.read(offset, self._slots.take(rows, at))
            self.stats.records_in += 1
            self.stats.items_in += len(rows)
            self._dirty = True
            return
        items = read_items(msg.headers(), msg.value(), at)
        barrier = self._barrier
        push = barrier.push
        bundles = self._bundles
        speculating = bundles is not None and bundles.speculation.enabled
        admit = bundles.speculation.admit if speculating and bundles is not None else None
        ahead: list[Record] = []  # written ahead once per frame: one client loop, not n calls
        latest = items[0][0].gt
        for meta, _ack, payload in items:  # one pass: this runs once per output item
            latest = max(latest, meta.gt)
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
        """Write a bundle and the positions.

        1. Per pre-barrier partition ``P_rel`` with ``GT_last`` as its metadata -- unless
           ``positions`` is false: a bundle's header carries ``GT_last`` and ``seq``, which
           a restart reads back, so the write that releases output skips the two round
           trips of committing offsets in a transaction. They follow within
           ``checkpoint_s``.
        2. Exactly once, release the bundle in its own transaction (`BundleWriter.release`),
           which takes the positions of step 1 too. At least once, take the bundle's
           records: items, then a header on every output partition.
        3. Write the rest, if any, at once (`OutputWriter.write`: one transaction when
           exactly once).
        4. Only then take the positions as committed.
        """
        assert self._writer is not None
        began = time.monotonic()
        records: list[OutRecord] = []
        # Step 1
        gt_last = self._buffer().gt_last
        marks = signed_positions(
            self.group,
            [
                TopicPartition(
                    self.pre,
                    self.instance,
                    self._ledger.release_position(gt_last),
                    metadata=BarrierMark(gt_last).encode(),
                )
            ]
            if positions
            else [],
        )
        # Step 2
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
        # Step 3
        if records or marks:
            started = time.monotonic()
            self._writer.write(records, marks, crash)
            self.stats.write_s.append(time.monotonic() - started)
            self.stats.commits += 1
        # Step 4
        if positions:
            self._dirty = False
            self._last_commit = time.monotonic()
        if bundle is not None:
            self.stats.bundles += 1
            self.stats.items_out += (
                bundle.items if isinstance(bundle, SlotBundle) else len(bundle.records)
            )
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug(
                "%s: committed %s, positions %s, in %.3f s",
                self.name,
                "no bundle" if bundle is None else f"bundle {bundle.seq}",
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
