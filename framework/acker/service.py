"""The acker service: sharded trackers on ``<app>.acks``, reports to ``<app>.mintime``.

Partition ``p`` of the acks topic is shard ``p``: every record is one sender's `AckBatch`
for that shard (acks, heartbeats, then its `NodeTime`). Each batch goes through the core
`AckerShard`; every report it makes (a note per changed segment, then the global one, all
with the shard's node-time vector) is written to the mintime topic, key
``<shard>:<segment or *>``, partition ``shard % partitions`` so one shard's reports keep
their order.

Restart. Every ``checkpoint_s`` the acker saves each shard's state with the acks offset
it reflects to the compacted ``<app>.acker`` topic (`framework.acker.checkpoints`),
once the reports of the batches it covers were delivered to the mintime topic, so a
checkpoint never runs ahead of the published reports. A starting acker restores each
shard's latest checkpoint (none: an empty shard at the partition's start) and replays its
acks partition from there (read_committed, so the replay is the same sequence of batches
and makes the same reports). Reports up to the last one already on the mintime topic (the
shard's latest global report) are held back, so listeners never see a report again and
never see a vector go back; from there on the acker continues exactly where it stopped.
A restart thus replays at most about ``checkpoint_s`` of acks, however long the run.

Scaling. Instances split the shards by configuration (``partitions=``), not by consumer
group rebalancing: a shard must be owned by one instance at a time, and a rebalance would
hand a shard over without the replay its new owner needs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from framework.acker.checkpoints import latest
from framework.core.acker.sharded import AckerShard
from framework.core.messages import AckerInput, Heartbeat, MinTimeNotification, NodeTime
from framework.core.time import slot_of
from framework.errors import FlamepipeError, KafkaClientError, PipelineError, ProtocolViolation
from framework.kafka.admin import ensure_topics, partition_count
from framework.kafka.clients import (
    QUICK_END,
    assign,
    authentic_message,
    close_quietly,
    is_eof,
    is_record,
    new_consumer,
    new_producer,
    produce_record,
    read_back,
    read_to_end,
    take,
    where,
)
from framework.kafka.topics import acker_state_spec, acks_topic_spec, mintime_topic_spec
from framework.service import Service
from framework.wire.avro import decode_ack_batch, decode_min_time, encode_min_time
from framework.wire.checkpoints import encode_checkpoint
from framework.wire.records import OutRecord
from framework.wire.topics import Topics

Vector = dict[int, int]

_log = logging.getLogger(__name__)


def report_key(note: MinTimeNotification) -> str:
    """The compaction key of a shard report: ``<shard>:<segment>`` (``*``: global)."""
    return f"{note.shard}:{note.segment if note.segment is not None else '*'}"


def _vector(node_times: Iterable[NodeTime]) -> Vector:
    return {nt.node: nt.time for nt in node_times}


def _latest_reports(keys: Mapping[bytes, int], records: Iterable[Message]) -> dict[int, Vector]:
    """Per shard of ``keys`` (report key -> shard), the vector of its last authentic report."""
    found: dict[int, Vector] = {}
    for msg in records:
        shard = keys.get(msg.key() or b"")
        value = msg.value()
        if shard is not None and value is not None and authentic_message("acker", msg):
            found[shard] = _vector(decode_min_time(value).node_times)
    return found


class _LatestReports:
    """`read_back`'s ``enough``: whether every shard of ``keys`` has a report, keeping them."""

    def __init__(self, keys: Mapping[bytes, int]) -> None:
        self.keys = keys
        self.found: dict[int, Vector] = {}

    def __call__(self, records: list[Message]) -> bool:
        self.found = _latest_reports(self.keys, records)
        return len(self.found) == len(self.keys)


def _leq(a: Mapping[int, int], b: Mapping[int, int]) -> bool:
    return all(time <= b.get(node, 0) for node, time in a.items())


class ReplayGate:
    """Holds back the reports of a replay that an earlier acker already published.

    A shard's vectors strictly grow, report by report; the replay remakes the earlier
    reports exactly, so those with a vector ``<=`` the last published one are old.
    """

    def __init__(self, published: Mapping[int, int]) -> None:
        """``published``: the vector of the shard's last report on the mintime topic."""
        self.published = dict(published)
        self.open = not published

    def admit(self, node_times: Iterable[NodeTime]) -> bool:
        """Whether a report with this vector is new (once one is, all later ones are)."""
        if not self.open and not _leq(_vector(node_times), self.published):
            self.open = True
        return self.open

    def caught_up(self, vector: Iterable[NodeTime], where: str) -> None:
        """At the end of the replay the shard must have reached the published vector."""
        if not self.open and not _leq(self.published, _vector(vector)):
            raise ProtocolViolation(
                f"{where}: the mintime topic holds reports at node times {self.published} "
                f"but the acks topic only reaches {_vector(vector)}: acks were lost (retention?) "
                "or the topics belong to an older run; delete both or use a new app name"
            )


class AckerService(Service):
    """Shards ``partitions`` (all by default) of ``app``'s acker (see the module docstring).

    ``batches`` counts the ack batches applied, ``published`` the reports written,
    ``checkpoints`` the shard states saved; ``resumed`` maps each shard restored from a
    checkpoint to the acks offset its replay started at.
    """

    def __init__(
        self,
        bootstrap: str,
        app: str,
        segments: Mapping[str, Sequence[str]],
        fronts: Sequence[int],
        shards: int,
        *,
        partitions: Sequence[int] | None = None,
        epoch: int = 0,
        poll_s: float = 0.05,
        max_batch: int = 1000,
        checkpoint_s: float = 5.0,
        delta_ms: int = 10,
        max_future_ms: int = 60_000,
    ) -> None:
        """Acker of ``segments`` (name -> inbound names), ``fronts`` fixed, ``shards`` shards,
        on the topics of ``epoch``; a heartbeat more than ``max_future_ms`` ahead of its
        record's broker timestamp is refused (slots of ``delta_ms``)."""
        super().__init__(f"flamepipe-acker-{app}")
        owned = sorted(set(range(shards) if partitions is None else partitions))
        if not owned or not all(0 <= p < shards for p in owned):
            raise PipelineError(f"acker partitions {partitions} not a subset of 0..{shards - 1}")
        self.bootstrap = bootstrap
        self.app = app
        self.epoch = epoch
        self.topics = Topics(app, epoch)
        self.partitions = tuple(owned)
        self.poll_s = poll_s
        self.max_batch = max_batch
        self.checkpoint_s = checkpoint_s
        self.delta_ms = delta_ms
        self.max_future_ms = max_future_ms
        self.refused_future = 0  # batches with a heartbeat beyond the bound: never applied
        self.refused_replays = 0  # batches whose node time was applied already
        self._shards = {p: AckerShard(p, shards, segments, fronts) for p in owned}
        self._next: dict[int, int] = {}  # per partition: the offset after the last batch
        self._unsaved: set[int] = set()
        self._last_checkpoint = time.monotonic()
        self._gates: dict[int, ReplayGate] = {}
        self._replaying: set[int] = set(owned)  # until each partition's replay reached its end
        self._report_partitions = 1
        self._failures: list[str] = []
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self.published = 0
        self.batches = 0
        self.checkpoints = 0
        self.resumed: dict[int, int] = {}

    @property
    def replaying(self) -> bool:
        """Whether some owned partition is still being replayed."""
        return bool(self._replaying)

    def lag(self) -> int | None:
        """Ack records written but not yet applied, over the owned shards, by the high
        watermarks of the last fetches (None before the first); safe from any thread."""
        consumer = self._consumer
        if consumer is None:
            return None
        total = 0
        for partition in self.partitions:
            tp = TopicPartition(self.topics.acks, partition)
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
            except (KafkaException, RuntimeError):
                return None
            if high < 0:
                return None
            total += max(0, high - self._next.get(partition, 0))
        return total

    def _open(self) -> None:
        # A takeover waits for all of this: the phases' times say where (logged at INFO).
        began = time.monotonic()
        shards = self._shards[self.partitions[0]].shards
        ensure_topics(
            self.bootstrap,
            [
                acks_topic_spec(self.app, shards, self.epoch),
                mintime_topic_spec(self.app, epoch=self.epoch),
                acker_state_spec(self.app, self.epoch),
            ],
        )
        self._report_partitions = partition_count(self.bootstrap, self.topics.mintime)
        topics = time.monotonic()
        last = self._last_published()
        self._gates = {p: ReplayGate(last.get(p, {})) for p in self.partitions}
        self._replaying = set(self.partitions)
        reports = time.monotonic()
        starts: dict[int, int | None] = dict.fromkeys(self.partitions)
        saved = latest(read_to_end(self.bootstrap, self.topics.acker, 1), self.partitions)
        for partition, (offset, state) in saved.items():
            self._shards[partition].restore(state)
            starts[partition] = self.resumed[partition] = self._next[partition] = offset
        restored = time.monotonic()
        self._producer = new_producer(self.bootstrap, {"linger.ms": 1})
        self._consumer = consumer = new_consumer(self.bootstrap)
        assign(consumer, self.topics.acks, starts)
        _log.info(
            "acker of %s opened in %.0f ms: topics %.0f, last reports %.0f, checkpoints %.0f, "
            "clients %.0f",
            self.app,
            *(1000 * t for t in (time.monotonic() - began, topics - began, reports - topics)),
            *(1000 * t for t in (restored - reports, time.monotonic() - restored)),
        )

    def _last_published(self) -> dict[int, Vector]:
        """The vector of each owned shard's latest global report on the mintime topic:
        read back from the end of each partition until every shard there has one."""
        last: dict[int, Vector] = {}
        consumer = new_consumer(self.bootstrap, config=QUICK_END)
        try:
            for partition in sorted({p % self._report_partitions for p in self.partitions}):
                keys = {
                    f"{p}:*".encode(): p
                    for p in self.partitions
                    if p % self._report_partitions == partition
                }
                reports = _LatestReports(keys)
                read_back(consumer, self.topics.mintime, partition, reports)
                last |= reports.found
        finally:
            close_quietly(consumer)
        return last

    def _step(self) -> None:
        assert self._consumer is not None and self._producer is not None
        for msg in take(self._consumer, self.max_batch, self.poll_s):
            if is_eof(msg):
                self._replayed(where(msg)[0])
            elif is_record(msg, self.topics.acks):
                self._apply(msg)
        self._producer.poll(0)
        if self._failures:
            raise KafkaClientError(f"cannot publish min times: {self._failures[0]}")
        if self._unsaved and time.monotonic() - self._last_checkpoint >= self.checkpoint_s:
            self._checkpoint()

    def _checkpoint(self) -> None:
        """Save the state of every shard that moved, once its reports are delivered.

        1. Flush the reports made so far; if some are still undelivered, try again later.
        2. Write each moved shard's state with the offset after its last applied batch.
        """
        assert self._producer is not None
        self._last_checkpoint = time.monotonic()
        # Step 1
        if self._producer.flush(10) > 0:
            return
        if self._failures:
            raise KafkaClientError(f"cannot publish min times: {self._failures[0]}")
        # Step 2
        for partition in sorted(self._unsaved - self._replaying):
            value = encode_checkpoint(self._next[partition], self._shards[partition].state())
            record = OutRecord(self.topics.acker, None, str(partition).encode(), value)
            produce_record(self._producer, record, self._delivered)
            self._unsaved.discard(partition)
            self.checkpoints += 1

    def _replayed(self, partition: int) -> None:
        if partition in self._replaying:
            self._replaying.discard(partition)
            at = f"{self.topics.acks}[{partition}]"
            self._gates[partition].caught_up(self._shards[partition].vector, at)

    def _apply(self, msg: Message) -> None:
        partition, offset = where(msg)
        at = f"{self.topics.acks}[{partition}]@{offset}"
        value = msg.value()
        if not authentic_message("acker", msg):
            return  # never decoded: a forged ack or heartbeat cannot move min time
        if value is None:
            raise ProtocolViolation(f"{at}: an ack record without a value")
        batch = decode_ack_batch(value)
        closing = batch[-1]
        assert isinstance(closing, NodeTime)  # decode_ack_batch always ends with it
        shard = self._shards[partition]
        if self._from_the_future(msg, batch, at) or self._replayed_batch(shard, closing, at):
            self._next[partition] = offset + 1
            return
        gate = self._gates[partition]
        try:
            for message in batch:
                notes = shard.receive(closing.node, message)
                if notes and gate.admit(notes[-1].node_times):
                    self._publish(notes)
        except ProtocolViolation as exc:
            raise ProtocolViolation(f"{at}: {exc}") from exc
        self._next[partition] = offset + 1
        self._unsaved.add(partition)
        self.batches += 1

    def _from_the_future(self, msg: Message, batch: list[AckerInput], at: str) -> bool:
        """Whether a heartbeat of ``batch`` lies beyond the bound: then the batch is refused
        whole (its acks would be applied without its node time otherwise) and reported.

        Only heartbeats move min time forward by themselves; an ack in the future can only
        hold it back (and an aggregate's holds legitimately lie ahead, at window ends).
        A heartbeat comes from LogAppendTime stamps of the input, which never exceed the
        broker's stamp of the heartbeat's own record (the acks topic is LogAppendTime):
        one far beyond it is a skewed or broken sender.
        """
        kind, stamp = msg.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE:
            return False
        limit = slot_of(stamp + self.max_future_ms, self.delta_ms)
        ahead = [m for m in batch if isinstance(m, Heartbeat) and m.slot > limit]
        if not ahead:
            return False
        self.refused_future += 1
        _log.error(
            "acker refused %s: heartbeat of front %d at slot %d is %d ms ahead of the "
            "record's broker time %d (max_future_ms=%d); a sender's clock is skewed or its "
            "heartbeats are wrong. Min time will stall rather than move early (%d refused)",
            at,
            ahead[0].front,
            ahead[0].slot,
            ahead[0].slot * self.delta_ms - stamp,
            stamp,
            self.max_future_ms,
            self.refused_future,
        )
        return True

    def _replayed_batch(self, shard: AckerShard, closing: NodeTime, at: str) -> bool:
        """Whether the batch's node time was applied already: an authentic batch appended
        again (by hand, or by someone copying records). Applying it twice would cancel
        its acks' XOR values, so it is refused, counted and reported."""
        if closing.time > shard.node_time(closing.node):
            return False
        self.refused_replays += 1
        _log.error(
            "acker refused %s: node %d's batch %d was applied already (a copy of an earlier "
            "ack record); %d refused",
            at,
            closing.node,
            closing.time,
            self.refused_replays,
        )
        return True

    def _publish(self, notes: list[MinTimeNotification]) -> None:
        assert self._producer is not None
        for note in notes:
            key, value = report_key(note).encode(), encode_min_time(note)
            partition = note.shard % self._report_partitions
            record = OutRecord(self.topics.mintime, partition, key, value)
            produce_record(self._producer, record, self._delivered)
            self.published += 1

    def _delivered(self, error: KafkaError | None, _msg: Message) -> None:
        if error is not None:
            self._failures.append(str(error))

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        close_quietly(consumer)
        if self._producer is not None and self.error is None and self._unsaved:
            # A clean stop saves the shards, so the next start replays nothing. Never
            # after a failure: a batch may then be half applied.
            with contextlib.suppress(FlamepipeError):
                self._checkpoint()
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(10)
            close_quietly(producer)
