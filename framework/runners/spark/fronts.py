"""Front heartbeats, sent by the driver for every source stage (docs/runtime.md).

Every ``heartbeat_ms``, and at once when a source stage finished a batch, per source stage:

1. Read the last timestamp consumed per partition and Spark's last progress (the offsets
   the last finished micro-batch consumed), then ``t0``, the broker's time as far as this
   driver can tell without overestimating it (`broker_now`, after serving the delivery
   reports of earlier rounds, which measure it), then the end offset
   (high watermark) of every input partition. Not the last stable offset: records of a
   transaction still open were appended (and stamped) before ``t0`` but become readable
   later, so a partition with an open transaction must not heartbeat past them.
2. Any partition heartbeats the slot of its last consumed timestamp: LogAppendTime grows
   with offsets, so no record not yet consumed has a lower slot. This keeps min time
   moving while a stage works through a backlog.
3. A partition whose consumed offset reached its end offset (one known, and not below
   an end seen before) heartbeats ``slot(t0 - lag)``: a record not consumed yet was not
   readable at ``t0``, so it was stamped after ``t0 - lag`` unless it took longer than
   ``lag`` (``front_lag_ms``) from its LogAppendTime to the high watermark. The broker
   stamps a record before it makes it readable; a pause in between (a GC, a starved CPU,
   followers replicating) is the lag.
4. If any front's heartbeat rose, record the new slots as the partitions' floors
   (`floors`: every source task gets them and refuses, before it commits, a record below
   its partition's floor), then send one AckBatch per acker shard (heartbeats only),
   closed by this driver's next node time. The acks of the batches it covers were
   committed before Spark reported their progress, so they precede it on every shard.
   The sender is a heartbeat-only node (a negative id): a round cut short by a kill
   reaches some shards only, and the min-time listener does not wait for it
   (docs/decisions/sharded-listener.md).

A record that breaks the lag bound is repaired, not dropped in silence: its source task
moves it up to the slot heartbeated (`framework.runners.spark.tasks.lift_late`, recorded
as a `framework.wire.lifts.Lift` with the batch), and `check_batch` compares each
committed batch's least slot per partition with what was heartbeated, failing the run
(`ProtocolViolation`) naming the setting to raise should one still lie below.

A round that fails (the broker restarting, a leader moving) is skipped: heartbeats only
ever rise, so a missed round holds min time back and costs nothing else. The thread gives
up, and the runner's health check fails the run, only when rounds have failed for
``outage_s`` in a row.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message, Producer

from framework import failpoints
from framework.core.ids import heartbeat_node_id
from framework.core.messages import Heartbeat
from framework.core.time import front_id, slot_of
from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import ProtocolViolation, ServiceFailed
from framework.kafka.admin import end_offsets, partition_count
from framework.kafka.clients import new_producer, produce_record
from framework.service import Service
from framework.wire.acks import shard_batches
from framework.wire.records import OutRecord

_log = logging.getLogger(__name__)

_PARTITIONS_S = 30.0


class Consumption(Protocol):
    """What a source stage has consumed, as far as committed batches tell."""

    def consumed(self) -> tuple[dict[int, int], dict[int, int]]:
        """Per partition, the offset consumed up to and the last timestamp read (both
        of committed batches only)."""
        ...


def consumed_offsets(progress: Any, topic: str) -> dict[int, int]:
    """Offsets of ``topic`` consumed by a query, from its last progress ({} if unknown)."""
    if not progress:
        return {}
    for source in progress["sources"]:
        end = source["endOffset"]
        offsets = json.loads(end) if isinstance(end, str) else end
        if isinstance(offsets, dict) and topic in offsets:
            return {int(p): int(o) for p, o in offsets[topic].items()}
    return {}


class FrontHeartbeats(Service):
    """A service heartbeating the fronts of the given source topics.

    A failed round is tried again at the next one; only a failure lasting ``outage_s``
    stops the service (`error`, raised by `check`): the acker's min time waits for
    heartbeats meanwhile, so a short broker outage costs latency, never output.
    """

    def __init__(
        self,
        bootstrap: str,
        app: str,
        *,
        acks_topic: str,
        shards: int,
        sources: Mapping[str, Consumption],  # topic -> what its stage consumed
        delta_ms: int,
        interval_ms: int,
        lag_ms: int = 250,
        outage_s: float = 120.0,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """``clock``: this host's time in ms (the wall clock; tests skew it)."""
        super().__init__("flamepipe-fronts")
        self.bootstrap = bootstrap
        self.acks_topic = acks_topic
        self.shards = shards
        self.sources = dict(sources)
        self.delta_ms = delta_ms
        self.lag_ms = lag_ms
        self.interval_s = interval_ms / 1000
        self.outage_s = outage_s
        self.failed_rounds = 0
        # A new node per driver start: its node time then only has to grow in this process.
        # A heartbeat-only one (negative): a round cut short by a kill reaches some shards
        # only, and the min-time listener must not wait for this node to send again.
        self.sender = heartbeat_node_id(f"{app}/fronts/{os.getpid()}/{time.time_ns()}")
        self.time = 0
        self.sent: dict[int, int] = {}
        # topic -> partition -> the highest slot this driver promised (or is promising):
        # a source task refuses records below it before committing (`floors`).
        self.promised: dict[str, dict[int, int]] = {}
        skew = failpoints.value("clock.skew_ms")
        self.clock = clock or (lambda: time.time_ns() // 1_000_000 + skew)
        # broker time - this clock, from the LogAppendTime of the last heartbeat record
        # delivered (a lower bound: the record was stamped before its report came back);
        # None until a first record was delivered.
        self.broker_offset_ms: int | None = None
        # A heartbeat is sent as soon as it is produced: the librdkafka default (5 ms of
        # linger) would hold every one that long, and min time with it.
        self._producer: Producer | None = new_producer(bootstrap, {"linger.ms": 0})
        self._partitions: dict[str, tuple[int, float]] = {}  # topic -> count, when read
        self._ends: dict[tuple[str, int], int] = {}  # the highest end offset seen
        self._wake = threading.Event()
        self._failing_since: float | None = None
        self.flush_s = 10.0

    def poke(self) -> None:
        """Beat now, not at the next interval: a source stage just committed a batch, and
        the heartbeat its timestamps allow is what releases that batch's output."""
        self._wake.set()

    def broker_now(self) -> int:
        """The broker's time now, never overestimated: this host's clock, moved back by
        the offset the last delivered heartbeat showed when this clock runs ahead (a
        clock behind the broker's is already on the safe side). The first call, before
        any delivery, measures the offset with a batch that holds no heartbeat."""
        if self.broker_offset_ms is None:
            self._probe()
        return self.clock() + min(0, self.broker_offset_ms or 0)

    def _probe(self) -> None:
        producer = self._producer
        if producer is None:
            raise ServiceFailed("front heartbeats are stopped")
        self.time += 1
        for shard, value in shard_batches(self.sender, self.time, (), self.shards, []):
            produce_record(
                producer, OutRecord(self.acks_topic, shard, None, value), self._delivered
            )
        producer.flush(DEFAULT_TIMEOUT_S)
        if self.broker_offset_ms is None:
            raise ServiceFailed("the broker's time is unknown: no heartbeat record was delivered")

    def _delivered(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            return
        kind, stamp = msg.timestamp()
        if kind == TIMESTAMP_LOG_APPEND_TIME:
            self.broker_offset_ms = stamp - self.clock()

    def carried(self, topic: str, partition: int, stamp: int) -> Heartbeat | None:
        """Step 2 for a batch about to commit whose last record was stamped ``stamp``: the
        heartbeat its own ack batches carry (None: no rise), promised from now on. A
        continuous source task's: it commits with the acks it covers, so it needs no
        record of its own; `sent_with` once the commit succeeded."""
        front, slot = front_id(topic, partition), slot_of(stamp, self.delta_ms)
        if slot <= max(self.sent.get(front, -1), self.promised.get(topic, {}).get(partition, -1)):
            return None
        self.promised.setdefault(topic, {})[partition] = slot
        return Heartbeat(front, slot)

    def ahead(self, topic: str, partition: int, stamp: int) -> Heartbeat | None:
        """Step 2 for a continuous source task that just read records it has not committed,
        the first of them stamped ``stamp``, with every record before them committed: the
        slot of ``stamp``, sent now by this service's producer (None: no rise).

        No record read later lies below it (LogAppendTime grows with offsets; one that
        does not is lifted to it, `floors`), and every item below it entered with a commit
        that returned before this call: its acks precede this heartbeat on every shard, as
        a read_committed reader sees them (the commit's markers come before a record
        appended after it becomes readable). So min time may pass the slots below
        ``stamp`` without waiting for the commit of the new records: a record of another
        partition waited for that commit (~20 ms, docs/latency.md "Heartbeats ahead of the
        commit")."""
        beat = self.carried(topic, partition, stamp)
        if beat is not None:
            self._send([beat])
            self.sent_with(beat)
        return beat

    def sent_with(self, beat: Heartbeat) -> None:
        """A `carried` heartbeat was committed."""
        self.sent[beat.front] = max(beat.slot, self.sent.get(beat.front, -1))

    def floors(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, the slot no record read from now on may lie below."""
        return dict(self.promised.get(topic, {}))

    def check_batch(self, topic: str, rows: list[Any]) -> None:
        """`ProtocolViolation` if a source batch of ``topic`` read a record in a slot this
        driver had already heartbeated past (its summary ``rows``, before they count).

        Such a record became readable more than ``lag_ms`` after it was stamped; min time
        may have passed its slot, and the barrier would drop its output as a replay.
        """
        for row in rows:
            if row["skipped"]:  # a batch committed before: heartbeated after it was read
                continue
            if not row["source_row"]:  # a fused query's hash unit: no source partition
                continue
            partition, stamp = row["partition"], row["min_timestamp_ms"]
            promised = self.sent.get(front_id(topic, partition), -1)
            # The least slot the batch's records took (a lift moves late records up).
            least = row["least_slot"] if row["least_slot"] >= 0 else slot_of(stamp, self.delta_ms)
            if least < promised:
                raise ProtocolViolation(
                    f"a record of {topic}[{partition}] stamped {stamp} (LogAppendTime) became "
                    f"readable after this driver heartbeated the partition past slot "
                    f"{promised} ({promised * self.delta_ms} ms): it took over "
                    f"front_lag_ms={self.lag_ms} to become readable, and its output may be "
                    "dropped as a replay. Raise FLAMEPIPE_FRONT_LAG_MS (the broker's worst "
                    "pause or replication delay) and restart the pipeline."
                )

    def stop(self, timeout: float = DEFAULT_TIMEOUT_S, flush_s: float | None = None) -> None:
        """Stop, flush what was sent (waiting at most ``flush_s``) and close the producer;
        raise the failure that stopped the service, if any."""
        if flush_s is not None:
            self.flush_s = flush_s
        self._wake.set()
        if not self.running:
            self._close()  # never started, or stopped by a failure: release the producer
        super().stop(timeout)

    def _open(self) -> None:
        """Nothing to open: the producer exists from the start (`beat` works unstarted)."""

    def _step(self) -> None:
        self._wake.wait(self.interval_s)
        self._wake.clear()
        if self.stopping:
            return
        try:
            self.beat()
        except Exception as exc:
            now = time.monotonic()
            if self._failing_since is None:
                self._failing_since = now
                _log.warning("front heartbeats paused: %s", exc)
            self.failed_rounds += 1
            if now - self._failing_since >= self.outage_s:
                raise ServiceFailed(
                    f"front heartbeats failed for {self.outage_s:g} s: {exc!r}"
                ) from exc
            return
        if self._failing_since is not None:
            self._failing_since = None
            _log.info("front heartbeats resumed")

    def _close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            # Spark's callback server keeps this object (its poke and check hooks) until
            # the process exits; a producer kept with it reconnects to a stopped broker.
            producer.flush(self.flush_s)

    def _partition_count(self, topic: str) -> int:
        """Cached for `_PARTITIONS_S`: a source topic rarely grows, and describing it on
        every round cost the embedded broker 0.06 cores at one round per 50 ms."""
        now = time.monotonic()
        known = self._partitions.get(topic)
        if known is None or now - known[1] > _PARTITIONS_S:
            known = self._partitions[topic] = (partition_count(self.bootstrap, topic), now)
        return known[0]

    def _caught_up(self, topic: str, partition: int, consumed: int | None, end: int) -> bool:
        """Whether the partition was read to ``end``, an end offset believed only when it
        is known (>= 0) and not below one seen before: a broker restarting answers with
        offsets that are not its log's, and an end taken too low would promise the clock
        past records still to be read (measured: 2 092 records of a backlog moved up)."""
        key = (topic, partition)
        seen = self._ends.get(key, 0)
        if end < seen:
            _log.debug(
                "%s[%d]: end offset %d below %d seen before: ignored", topic, partition, end, seen
            )
            return False
        self._ends[key] = end
        return consumed is not None and consumed >= end

    def beat(self) -> list[Heartbeat]:
        """One round of steps 1-4; the heartbeats it sent."""
        beats: list[Heartbeat] = []
        promises: list[tuple[str, int, int]] = []  # topic, partition, slot
        if self._producer is not None:
            # Step 1: a delivery report measures the broker's time when it is served, so
            # one served late (at the next round that sends, which may come seconds later)
            # measures the clock that much ahead, and the next heartbeat from the clock
            # waits as long. Unserved, a continuous source task's rounds rarely sent (its
            # commits carry its heartbeats); its clock looked 14 s ahead and growing, and
            # the run's last records were never released.
            self._producer.poll(0)
        for topic, stage in self.sources.items():
            # Step 1
            consumed, stamps = stage.consumed()
            t0 = self.broker_now()
            ends = end_offsets(self.bootstrap, topic, partitions=self._partition_count(topic))
            # ``fronts.ahead_ms`` (tests): promise that far ahead, as a broker that stamps
            # records long before exposing them would make a correct promise turn out.
            ahead = failpoints.value("fronts.ahead_ms")
            caught_up = slot_of(t0 - self.lag_ms + ahead, self.delta_ms)
            for partition, end in ends.items():
                # Step 2
                slot = slot_of(stamps[partition], self.delta_ms) if partition in stamps else -1
                # Step 3
                if self._caught_up(topic, partition, consumed.get(partition), end):
                    slot = max(slot, caught_up)
                front = front_id(topic, partition)
                if slot > self.sent.get(front, -1):
                    beats.append(Heartbeat(front, slot))
                    promises.append((topic, partition, slot))
        # Step 4
        if beats:
            if self._producer is None:
                raise ServiceFailed("front heartbeats are stopped")
            # The slots about to be heartbeated, recorded before they are sent.
            for topic, partition, slot in promises:
                self.promised.setdefault(topic, {})[partition] = slot
            self._send(beats)
            # Only now: a round that fails before this point is sent again in full.
            self.sent.update((beat.front, beat.slot) for beat in beats)
        return beats

    def _send(self, beats: list[Heartbeat]) -> None:
        """Step 4's batches: ``beats`` on every shard, closed by the next node time."""
        producer = self._producer
        if producer is None:
            raise ServiceFailed("front heartbeats are stopped")
        self.time += 1
        for shard, value in shard_batches(self.sender, self.time, (), self.shards, beats):
            produce_record(
                producer, OutRecord(self.acks_topic, shard, None, value), self._delivered
            )
        producer.poll(0)
