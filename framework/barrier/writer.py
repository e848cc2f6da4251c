"""How the barrier makes its output, its receipt acks and its positions visible together.

`TransactionalWriter` (exactly once) puts them in one Kafka transaction under a stable
transactional.id, so a restarted or zombie barrier is fenced and its open transaction
aborted. `PlainWriter` (at least once, for comparison) produces with an idempotent
producer and commits the positions afterwards: a crash in between shows a bundle twice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from framework import failpoints
from framework.core.messages import Ack
from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import KafkaClientError, PipelineError
from framework.kafka.clients import (
    OutRecordLike,
    close_quietly,
    new_producer,
    produce_record,
)
from framework.kafka.transactions import TransactionalProducer
from framework.wire.acks import shard_batches
from framework.wire.records import OutRecord

__all__ = ["OutputWriter", "PlainWriter", "ReceiptSender", "TransactionalWriter"]


@dataclass(frozen=True, slots=True)
class ReceiptSender:
    """The barrier as a sender of acks: its node id, its segment, the acker's shards."""

    topic: str
    node: int
    segment: str
    shards: int

    def records(self, acks: Mapping[int, int], node_time: int) -> list[OutRecord]:
        """Receipt acks (slot -> XOR) as one ack batch per shard, each closed by this
        node's ``node_time`` (every shard must see every node time of a sender)."""
        batch = [Ack(self.segment, slot, value) for slot, value in sorted(acks.items())]
        return [
            OutRecord(self.topic, shard, None, value)
            for shard, value in shard_batches(self.node, node_time, batch, self.shards)
        ]


class OutputWriter(ABC):
    """Writes records and commits consumer positions (with metadata) for one group."""

    def __init__(self, bootstrap: str, consumer: Consumer) -> None:
        self.bootstrap = bootstrap
        self.consumer = consumer

    @abstractmethod
    def open(self) -> None:
        """Start the producer (fencing older ones where that applies)."""

    @abstractmethod
    def write(
        self,
        records: Sequence[OutRecordLike],
        positions: list[TopicPartition],
        failpoint: str | None = None,
    ) -> None:
        """Make ``records`` visible and commit ``positions``; `KafkaClientError` on failure.

        ``failpoint`` names the crash point between producing and committing
        (`framework.failpoints`), for crash tests.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the producer; an open transaction is left for the broker to abort."""


class TransactionalWriter(OutputWriter):
    """One transaction per write under ``transactional_id`` (`TransactionalProducer`)."""

    linger_ms = 0

    def __init__(self, bootstrap: str, consumer: Consumer, transactional_id: str) -> None:
        super().__init__(bootstrap, consumer)
        self.transactional_id = transactional_id
        self.txn = TransactionalProducer(bootstrap, transactional_id, {"linger.ms": self.linger_ms})

    def open(self) -> None:
        """Start the producer: init_transactions fences older producers of the id. A
        fencing is final here: a barrier fenced by its successor must stop."""
        self.txn.start()

    def write(
        self,
        records: Sequence[OutRecordLike],
        positions: list[TopicPartition],
        failpoint: str | None = None,
    ) -> None:
        """Records and positions in one transaction.

        1. Begin the transaction.
        2. Produce every record.
        3. Add the positions (with their metadata) for the consumer's group, if any.
        4. Commit (retrying while the error is retriable).

        A Kafka failure aborts the transaction, if the producer still can, and raises
        `KafkaClientError`; the caller's state no longer matches Kafka, so it must restart.
        """
        txn = self._require()
        try:
            # Step 1
            txn.begin()
            # Step 2
            for record in records:
                txn.produce(record)
            # Step 3
            if positions:
                txn.send_offsets(positions, self.consumer.consumer_group_metadata())
            if failpoint is not None:  # crash tests: the records are in the log, uncommitted
                failpoints.hit(failpoint, before=txn.flush)
            # Step 4
            txn.commit()
        except (KafkaException, BufferError) as exc:
            txn.abort()
            raise KafkaClientError(
                f"transaction of {self.transactional_id!r} failed ({len(records)} records): {exc}"
            ) from exc

    def close(self) -> None:
        """Release the producer; an open transaction is left for the broker to abort."""
        self.txn.close()

    def _require(self) -> TransactionalProducer:
        if self.txn.producer is None:
            raise PipelineError(f"{self.transactional_id}: the writer is not open")
        return self.txn


class PlainWriter(OutputWriter):
    """At least once: the output produced and flushed without a transaction, then the
    receipt acks and the positions in one transaction.

    The receipts must not come twice: a barrier that dies between its output and its
    positions reads the same frames again after a restart, and a receipt applied twice
    re-opens its slot at the acker (XOR), so min time would wait for it forever. In one
    transaction with the positions, a receipt is committed exactly when its frame's
    ``P_ack`` is (and on every acker shard at once); only the output may come twice.
    """

    def __init__(
        self, bootstrap: str, consumer: Consumer, transactional_id: str, acks_topic: str
    ) -> None:
        """Receipts are the records for ``acks_topic``, committed under
        ``transactional_id`` (which fences an older barrier's receipts too)."""
        super().__init__(bootstrap, consumer)
        self.acks_topic = acks_topic
        self._producer: Producer | None = None
        self._receipts = TransactionalWriter(bootstrap, consumer, transactional_id)

    def open(self) -> None:
        """Start an idempotent producer for the output and the receipts' transactional
        one (fencing an older barrier's)."""
        self._producer = new_producer(self.bootstrap, {"linger.ms": 0})
        self._receipts.open()

    def write(
        self,
        records: Sequence[OutRecordLike],
        positions: list[TopicPartition],
        failpoint: str | None = None,
    ) -> None:
        """Produce and flush the output among ``records``, then commit the receipts among
        them with ``positions`` in one transaction."""
        producer = self._producer
        if producer is None:
            raise PipelineError("the at-least-once writer is not open")
        failures: list[str] = []

        def delivered(error: KafkaError | None, _msg: Any) -> None:
            if error is not None:
                failures.append(str(error))

        receipts = [record for record in records if record.topic == self.acks_topic]
        for record in records:
            if record.topic != self.acks_topic:
                produce_record(producer, record, delivered)
        producer.poll(0)
        if producer.flush(DEFAULT_TIMEOUT_S) > 0 or failures:
            raise KafkaClientError(f"at-least-once write failed: {failures or 'flush timed out'}")
        if failpoint is not None:  # crash tests: output written, positions not committed
            failpoints.hit(failpoint)
        if receipts or positions:
            self._receipts.write(receipts, positions)

    def close(self) -> None:
        """Release the producers."""
        producer, self._producer = self._producer, None
        close_quietly(producer)
        self._receipts.close()
