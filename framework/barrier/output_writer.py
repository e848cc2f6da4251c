"""How the barrier makes its output and its positions visible together.

`TransactionalWriter` (exactly once) puts them in one Kafka transaction under a stable
transactional.id, so a restarted or zombie barrier is fenced and its open transaction
aborted. `PlainWriter` (at least once, for comparison) produces with an idempotent
producer and commits the positions afterwards: a crash in between shows a bundle twice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from framework import failpoints
from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import KafkaClientError, PipelineError
from framework.kafka.clients import (
    OutRecordLike,
    close_quietly,
    new_producer,
    produce_record,
)
from framework.kafka.transactions import TransactionalProducer


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
    positions in a transaction (under the barrier's transactional id, which fences an older
    barrier). A barrier that dies between the two writes its output again after a restart:
    only the output may come twice.
    """

    def __init__(self, bootstrap: str, consumer: Consumer, transactional_id: str) -> None:
        super().__init__(bootstrap, consumer)
        self._producer: Producer | None = None
        self._positions = TransactionalWriter(bootstrap, consumer, transactional_id)

    def open(self) -> None:
        """Start an idempotent producer for the output and the positions' transactional
        one (fencing an older barrier's)."""
        self._producer = new_producer(self.bootstrap, {"linger.ms": 0})
        self._positions.open()

    def write(
        self,
        records: Sequence[OutRecordLike],
        positions: list[TopicPartition],
        failpoint: str | None = None,
    ) -> None:
        """Produce and flush ``records``, then commit ``positions`` in a transaction."""
        producer = self._producer
        if producer is None:
            raise PipelineError("the at-least-once writer is not open")
        failures: list[str] = []

        def delivered(error: KafkaError | None, _msg: Message) -> None:
            if error is not None:
                failures.append(str(error))

        for record in records:
            produce_record(producer, record, delivered)
        producer.poll(0)
        if producer.flush(DEFAULT_TIMEOUT_S) > 0 or failures:
            raise KafkaClientError(f"at-least-once write failed: {failures or 'flush timed out'}")
        if failpoint is not None:  # crash tests: output written, positions not committed
            failpoints.hit(failpoint)
        if positions:
            self._positions.write([], positions)

    def close(self) -> None:
        """Release the producers."""
        producer, self._producer = self._producer, None
        close_quietly(producer)
        self._positions.close()
