"""Exactly-once task commits: outputs, acks and a marker in one Kafka transaction.

A stage task's transactional.id is stable across attempts (``<app>.<stage>.p<partition>``),
so a retried attempt fences the earlier one, and the marker (its input position committed
for the consumer group of the task) tells a re-executed batch that it is already done::

    committer = TaskCommitter.cached(bootstrap, "app.s1.p0")
    if committer.is_committed(group, topic, partition, end):
        ...  # skip: outputs and acks of [first, end) are already visible
    offsets = committer.commit(records, group, {(topic, partition): end})

Committers, group consumers and changelog readers are cached per process (Spark reuses its
Python workers). Workers of one pool take turns with a partition, so a cached producer is
often fenced by a sibling: `TaskCommitter.commit` then starts a new one (fencing all
others) and commits again unless the marker shows the batch committed meanwhile. That
retry is safe because after the restart no other producer can commit, and markers only
grow. Most fencings are seen coming: `is_committed` reads the marker, and a marker this
committer did not write means a sibling committed since, so its producer is dropped
before an attempt is wasted on it. Only flamepipe's errors escape: `KafkaClientError` for a
failed commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import KafkaClientError
from framework.kafka.cache import ProcessCache
from framework.kafka.changelog import ChangelogReader
from framework.kafka.clients import (
    OnDelivery,
    OutRecordLike,
    SignedItem,
    produce_record,
    produce_records,
    produce_signed,
    signed_positions,
    verified_metadata,
)
from framework.kafka.retry import is_transient
from framework.kafka.security import secured
from framework.wire.records import OutRecord

_log = logging.getLogger(__name__)

# How long `TransactionalProducer.send_offsets` waits for librdkafka before it gives the
# producer up. librdkafka (2.16) ignores that call's timeout while it waits for a group
# coordinator it knew before a broker restart (confluentinc/librdkafka#5456, #5511):
# measured here, a producer made before a kill -9 of the broker waited in its first
# send_offsets after the restart for good, while a new producer's took 0.1 s. A healthy
# call takes milliseconds; a coordinator still loading its offsets, a second or two.
SEND_OFFSETS_BOUND_S = 5.0

# Producers given up inside a call that never returned: kept so their handles are never
# destroyed under the thread that still waits in them.
_abandoned: list[Producer] = []

# Errors that mean the broker connection was lost (a broker restart among them).
_LOST_BROKER = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)

_PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "enable.idempotence": True,
    "linger.ms": 5,
    # A task's outputs are produced in one burst before the commit; a full queue only
    # means "poll and retry", but a larger one makes that rare.
    "queue.buffering.max.messages": 1_000_000,
    # A grouping bucket is one changelog record; it may outgrow Kafka's 1 MB default
    # while min time lags (changelog topics allow the same, see MAX_RECORD_BYTES).
    "message.max.bytes": 16 * 1024 * 1024,
}


def _close_consumer(consumer: Consumer) -> None:
    # Already closed or broken: nothing left to release.
    with contextlib.suppress(KafkaException, RuntimeError):
        consumer.close()


def _close_committer(committer: TaskCommitter) -> None:
    committer.close()


_consumers: ProcessCache[tuple[str, str], Consumer] = ProcessCache(_close_consumer)
_committers: ProcessCache[tuple[str, str], TaskCommitter] = ProcessCache(_close_committer)


def group_consumer(bootstrap: str, group: str) -> Consumer:
    """This process's consumer of ``group``; it never subscribes.

    It reads committed offsets (read_committed, so the broker answers only once pending
    transactional offsets are settled) and provides the group metadata for
    ``send_offsets_to_transaction``.
    """
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    return _consumers.get((bootstrap, group), lambda: Consumer(secured(config)))


def close_cached() -> None:
    """Close every cached committer, consumer and changelog reader of this process."""
    _committers.clear()
    _consumers.clear()
    ChangelogReader.close_cached()


def _error(exc: KafkaException) -> KafkaError | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None


_FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
"""Codes that mean a newer producer of the transactional.id (or the coordinator, for a
transaction past its timeout) took the id over."""


def must_restart(exc: KafkaException) -> bool:
    """Whether the producer is unusable after ``exc`` (fenced or fatal)."""
    error = _error(exc)
    if error is None:
        return True
    # produce() on a producer already in a fatal state raises a plain _FATAL error whose
    # own fatal() flag is not set: it must restart all the same.
    return error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError._FATAL,
    )


class TransactionalProducer:
    """The producer of one transactional.id: the one place flamepipe begins, fills,
    commits and aborts Kafka transactions, and handles fencing and retries.

    1. `start`: ``init_transactions`` fences every older producer of the id and aborts
       their open transaction. With ``restart_fenced`` a fenced or fatal start is tried
       once more with a new producer (stage tasks: siblings of one worker pool take turns
       with an id); without it a fencing is final (a barrier fenced by its successor must
       stop, not fence the successor back).
    2. `begin`, `produce` (a full local queue is waited out, polling, up to the
       deadline), `send_offsets` (bounded: a call that outlasts `SEND_OFFSETS_BOUND_S`
       gives the producer up and raises a fatal error, so the caller restarts it). `begin`
       first replaces a producer that lost its broker connection since it started: one
       made before a broker restart may never finish its next send_offsets.
    3. `commit`: retried while Kafka calls the error retriable, up to the deadline.
    4. `abort`: a producer that cannot abort (fenced, fatal) is dropped; the next `start`
       makes a new one (`abort_or_replace` starts it at once unless fenced).
       `must_restart` tells which errors leave a producer unusable.

    Kafka errors escape as ``KafkaException`` from steps 2-4 so each caller decides what a
    failed transaction means for it; `start` raises `KafkaClientError`.
    """

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        config: Mapping[str, Any] | None = None,
        *,
        restart_fenced: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        abort_ahead: bool = True,
    ) -> None:
        """``abort_ahead``: `start` has the coordinator abort the id's open transaction
        first (`_abort_ahead`); off where the id's last owner rarely dies mid-transaction
        and starts are frequent (micro-batch tasks: another worker takes a partition)."""
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.restart_fenced = restart_fenced
        self.abort_ahead = abort_ahead
        self.timeout_s = timeout_s
        self._config = {
            "enable.idempotence": True,
            # With sparse connections librdkafka connects to the broker that metadata names
            # only once something needs it; init_transactions then often waited out its
            # fixed 500 ms PID timer for that connection. Stage tasks start a producer
            # whenever a partition moves to another Python worker (half the micro-batches
            # on local[2]): init took 57 or 507 ms, now 5-8 ms
            # (docs/latency.md, "Against the peers: the micro-batch's fixed costs").
            "enable.sparse.connections": False,
            # A transaction begun right after a commit gets CONCURRENT_TRANSACTIONS until
            # the last one's markers are written; librdkafka retries after this backoff
            # (default 100 ms, doubling), so back-to-back commits (continuous tasks, the
            # barrier) waited 100 ms now and then. The Java client uses 20 ms for the
            # same case. A continuous stateless record's p50 went 116 -> 89 ms, min time's
            # p99 214 -> 102 ms (benchmarks/latency_breakdown.py, one run each).
            "retry.backoff.ms": 10,
            **(config or {}),
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "error_cb": self._on_error,
        }
        self.producer: Producer | None = None
        """The running producer, None until `start` and after `drop`."""
        self.send_offsets_bound_s = SEND_OFFSETS_BOUND_S
        self.lost_broker = False
        """Whether the running producer lost a broker connection since it started."""
        self.replaced = 0
        """Producers replaced after a lost broker, or given up inside a hung call."""

    def _on_error(self, error: KafkaError) -> None:
        if error.code() in _LOST_BROKER:
            self.lost_broker = True

    def start(self) -> Producer:
        """Step 1: the running producer, started (fencing older ones) if there is none."""
        if self.producer is not None:
            return self.producer
        for attempt in (1, 2):
            if self.abort_ahead:
                _abort_ahead(self._config)
            producer = Producer(secured(self._config))
            try:
                producer.init_transactions(self.timeout_s)
            except KafkaException as exc:
                _close_producer(producer)
                if attempt == 2 or not (self.restart_fenced and must_restart(exc)):
                    raise KafkaClientError(
                        f"cannot start the transactional producer {self.transactional_id!r} "
                        f"at {self.bootstrap}: {exc}"
                    ) from exc
                continue
            # Connections refused while init waited for a restarting broker are queued
            # for the error callback; served now, they would make the first `begin`
            # replace a producer whose connections are up (measured: a continuous task
            # restarted during a broker restart started a second producer 3-9 s later).
            producer.poll(0)
            self.producer = producer
            self.lost_broker = False
            return producer
        raise AssertionError("unreachable")  # pragma: no cover

    def begin(self) -> None:
        """Step 2: begin a transaction on the running producer (a new one if it lost its
        broker connection)."""
        producer = self._running()
        producer.poll(0)  # serves the error callback: a lost connection shows now
        if self.lost_broker:
            # Its init_transactions fences the others of the id, as any restart of the
            # owner would: a barrier that lost its leadership unnoticed fences its
            # successor once, and is fenced back (output stays exact, by transactions).
            _log.info("%s: a broker connection was lost: new producer", self.transactional_id)
            self.replaced += 1
            self.drop()
            producer = self.start()
        producer.begin_transaction()

    def produce(self, record: OutRecordLike, on_delivery: OnDelivery | None = None) -> None:
        """Step 2: produce ``record`` into the open transaction."""
        produce_record(self._running(), record, on_delivery, self.timeout_s)

    def produce_many(self, records: Iterable[OutRecord]) -> None:
        """Step 2: produce ``records`` into the open transaction (`produce_records`)."""
        produce_records(self._running(), records, self.timeout_s)

    def produce_signed(self, topic: str, items: Iterable[SignedItem]) -> None:
        """Step 2: produce signed ``items`` to ``topic`` in the open transaction
        (`produce_signed`)."""
        produce_signed(self._running(), topic, items, self.timeout_s)

    def send_offsets(
        self,
        positions: list[TopicPartition],
        group_metadata: Any,  # confluent-kafka exports no type for it (its stubs: Any)
    ) -> None:
        """Step 2: commit ``positions`` for a consumer group with the transaction.

        The call runs in a thread of its own. A producer that lost a broker connection is
        waited for `send_offsets_bound_s`, any other for its full timeout (a busy broker
        answers late, and giving its producer up costs a restart); past that the producer
        is given up (kept, never closed: the thread still waits in it) and a fatal
        ``KafkaException`` says it must restart (`must_restart`).
        """
        producer = self._running()
        outcome: list[BaseException | None] = []

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(positions, group_metadata, self.timeout_s)
                outcome.append(None)
            except BaseException as exc:  # handed to the waiting thread
                outcome.append(exc)

        worker = threading.Thread(target=call, name="flamepipe-send-offsets", daemon=True)
        worker.start()
        # librdkafka returns its own timeout error at timeout_s: a second more for it.
        bound, full = Deadline(self.send_offsets_bound_s), Deadline(self.timeout_s + 1.0)
        while not outcome and not full.expired and not (self.lost_broker and bound.expired):
            worker.join(0.1)
            producer.poll(0)  # serves the error callback: a lost connection shows now
        if outcome:
            if outcome[0] is not None:
                raise outcome[0]
            return
        waited_s = self.send_offsets_bound_s if self.lost_broker else self.timeout_s
        _abandoned.append(producer)
        self.producer = None
        self.replaced += 1
        _log.warning(
            "%s: send_offsets_to_transaction did not return within %.0f s (%s): producer given up",
            self.transactional_id,
            waited_s,
            "a group coordinator lost in a broker restart" if self.lost_broker else "no answer",
        )
        raise KafkaException(
            KafkaError(
                KafkaError._FATAL,
                f"send_offsets_to_transaction hung for {waited_s:g} s",
                fatal=True,
            )
        )

    def flush(self) -> None:
        """Send what is queued (crash tests: records in the log, uncommitted)."""
        self._running().flush(self.timeout_s)

    def commit(self) -> None:
        """Step 3: commit the open transaction, retrying while the error is retriable."""
        producer = self._running()
        deadline = Deadline(self.timeout_s, f"committing {self.transactional_id!r}")
        while True:
            try:
                producer.commit_transaction(self.timeout_s)
                return
            except KafkaException as exc:
                error = _error(exc)
                if error is None or not error.retriable() or deadline.expired:
                    raise

    def abort(self, timeout_s: float | None = None) -> bool:
        """Step 4: abort the open transaction; False if the producer could not and was
        dropped (the broker aborts its transaction when the next producer starts)."""
        producer = self.producer
        if producer is None:
            return False
        try:
            producer.abort_transaction(self.timeout_s if timeout_s is None else timeout_s)
            return True
        except KafkaException:
            self.drop()
            return False

    def abort_or_replace(self) -> None:
        """Step 4 for a writer that goes on: abort the open transaction, or, if the
        producer cannot and was not fenced, replace it: the new producer's
        init_transactions makes the coordinator abort what the old one left open.

        librdkafka's abort can fail fatally with INVALID_TXN_STATE while the coordinator has
        not yet registered the transaction's first partitions (its EndTxn overtakes the
        AddPartitionsToTxn: confluentinc/librdkafka issue 4849); seen once in a barrier's
        speculative abort on a busy machine. A fenced producer raises `KafkaClientError`:
        its successor owns the id, and fencing it back is not ours to do.
        """
        producer = self._running()
        try:
            producer.abort_transaction(self.timeout_s)
            return
        except KafkaException as exc:
            self.drop()
            error = _error(exc)
            if error is None or error.code() in _FENCED:
                raise KafkaClientError(f"cannot abort {self.transactional_id!r}: {exc}") from exc
            _log.warning("%s: cannot abort (%s): new producer", self.transactional_id, exc)
            self.replaced += 1
        self.start()

    def drop(self) -> None:
        """Close the producer without ending its transaction; `start` makes a new one."""
        producer, self.producer = self.producer, None
        if producer is not None:
            _close_producer(producer)

    close = drop

    def _running(self) -> Producer:
        if self.producer is None:
            raise KafkaClientError(f"{self.transactional_id!r}: the producer is not started")
        return self.producer


class TaskCommitter:
    """The transactional producer of one transactional.id, initialised once, reused.

    Not thread-safe: one task at a time uses it, as a Python worker runs one at a time.
    """

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        *,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        take_over: bool = True,
    ) -> None:
        """A committer; its producer starts (and fences older ones) on first use.

        ``take_over``: whether `commit` starts a new producer after a fencing or a broken
        one (step 5). A long-running task must not: whoever fenced it owns its partition
        now, and a new producer would fence that owner back."""
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.timeout_s = timeout_s
        self.take_over = take_over
        self._txn = TransactionalProducer(
            bootstrap,
            transactional_id,
            {**_PRODUCER_DEFAULTS, **(config or {})},
            restart_fenced=True,
            timeout_s=timeout_s,
            # A long-running task's id was last owned by a task killed mid-transaction;
            # a micro-batch task's, mostly by a sibling worker that committed.
            abort_ahead=not take_over,
        )
        # The marker this committer's producer wrote last, per (group, topic, partition).
        self._marked: dict[tuple[str, str, int], int] = {}
        self.fenced_attempts = 0
        """Attempts wasted on a producer that turned out fenced (`commit` step 5)."""

    @classmethod
    def cached(cls, bootstrap: str, transactional_id: str) -> TaskCommitter:
        """This process's committer of ``transactional_id`` (created on first use)."""
        return _committers.get(
            (bootstrap, transactional_id), lambda: cls(bootstrap, transactional_id)
        )

    def start(self) -> None:
        """Start the producer now if it is not running (commit does it on first use).

        Its init_transactions fences every older producer of the transactional.id and
        aborts their open transaction; a task that reads a changelog first should start
        its committer before, so no fenced attempt's transaction holds the changelog open.
        """
        self._txn.start()

    def committed_position(self, group: str, topic: str, partition: int) -> int | None:
        """The offset ``group`` committed for ``topic[partition]``, None if none (see
        `committed`)."""
        committed = self.committed(group, topic, partition)
        return None if committed is None else committed[0]

    def committed(self, group: str, topic: str, partition: int) -> tuple[int, str] | None:
        """The offset ``group`` committed for ``topic[partition]`` and its metadata (its
        MAC checked and removed), None if none.

        Sees every committed transaction: the consumer reads with read_committed, so the
        broker holds the answer until pending transactional offsets are settled.
        """
        deadline = Deadline(self.timeout_s)
        while True:
            try:
                (tp,) = group_consumer(self.bootstrap, group).committed(
                    [TopicPartition(topic, partition)], timeout=self.timeout_s
                )
                break
            except KafkaException as exc:
                # A group never used before has no coordinator loaded yet: ask again.
                if is_transient(exc) and not deadline.expired:
                    time.sleep(0.1)
                    continue
                raise KafkaClientError(
                    f"cannot read the committed offset of group {group!r} on "
                    f"{topic}[{partition}]: {exc}"
                ) from exc
        if tp.error is not None:
            raise KafkaClientError(f"offset of {group!r} on {topic}[{partition}]: {tp.error}")
        offset: int = tp.offset
        if offset < 0:
            return None
        # A forged position would skip a batch: refuse it.
        return offset, verified_metadata(group, tp)

    def is_committed(self, group: str, topic: str, partition: int, end: int) -> bool:
        """Whether the task that ends its input at ``end`` (exclusive) already committed."""
        position = self.committed_position(group, topic, partition)
        key = (group, topic, partition)
        if self._txn.producer is not None and position != self._marked.get(key, position):
            # A sibling committed since our producer's last commit, so it fenced ours.
            self._drop()
        return position is not None and position >= end

    def commit(
        self,
        records: Sequence[OutRecordLike],
        group: str,
        positions: Mapping[tuple[str, int], int],
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> list[int] | None:
        """Write ``records`` and commit ``positions`` for ``group``, all or nothing
        (``metadata``: the text to commit with a position, signed with it).

        Returns the offset each record was written at, in order (-1 where no delivery
        report named one), or None if another attempt had committed the batch instead.

        1. Begin a transaction (starting the producer first if needed: its
           init_transactions fences every older producer of the transactional.id and
           aborts their open transaction).
        2. Produce every record, polling while the local queue is full.
        3. Add ``positions`` ((topic, partition) -> next offset) for ``group``: the marker
           (none: a writer that commits its positions as records of its own, as continuous
           tasks do, `framework.kafka.stage_positions`).
        4. Commit, retrying while the error is retriable.
        5. If the producer was fenced (another worker or attempt used the transactional.id
           since), broke, or failed with a transient error (a broker restart), start a
           new one, which fences all others. If the marker now
           covers ``positions``, another attempt committed this batch: done. Else steps
           1-4 once more. Without ``take_over``: raise `KafkaClientError` instead.

        Any other failure aborts the transaction and raises `KafkaClientError`, and so does
        a second fencing.
        """
        offsets = [-1] * len(records)
        fenced = self._attempt(records, group, positions, offsets, metadata)
        if fenced is None:
            self._mark(group, positions)
            return offsets
        # Step 5
        if not self.take_over:
            raise self._failed(len(records), group, fenced) from fenced
        self.fenced_attempts += 1
        self._txn.start()
        if positions and self._covered(group, positions):
            return None
        offsets = [-1] * len(records)  # the aborted attempt's offsets are not the records'
        again = self._attempt(records, group, positions, offsets, metadata)
        if again is not None:
            raise self._failed(len(records), group, again) from again
        self._mark(group, positions)
        return offsets

    def _mark(self, group: str, positions: Mapping[tuple[str, int], int]) -> None:
        for (topic, partition), offset in positions.items():
            self._marked[(group, topic, partition)] = offset

    def _attempt(
        self,
        records: Sequence[OutRecordLike],
        group: str,
        positions: Mapping[tuple[str, int], int],
        offsets: list[int],
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> KafkaException | None:
        """Steps 1-4, noting delivered offsets; the error if the producer must restart,
        None if committed."""
        txn = self._txn
        txn.start()
        try:
            # Step 1
            txn.begin()
            # Step 2
            for index, record in enumerate(records):
                txn.produce(record, partial(_delivered, offsets, index))
            # Step 3
            if positions:
                texts = metadata or {}
                marker = signed_positions(
                    group,
                    [
                        TopicPartition(t, p, o, metadata=texts.get((t, p), ""))
                        for (t, p), o in positions.items()
                    ],
                )
                txn.send_offsets(
                    marker, group_consumer(self.bootstrap, group).consumer_group_metadata()
                )
            # Step 4
            txn.commit()
        except KafkaException as exc:
            if must_restart(exc):
                self._drop()
                # Without its traceback: the frame would keep the dropped producer alive.
                return exc.with_traceback(None)
            if is_transient(exc):
                # A broker restart mid-transaction (a lost connection, a coordinator
                # moving): as safe to try again as a fencing, with a new producer.
                self._abort()
                self._drop()
                return exc.with_traceback(None)
            self._abort()
            raise self._failed(len(records), group, exc) from exc
        except Exception as exc:  # a malformed record, a queue full for too long
            self._abort()
            raise self._failed(len(records), group, exc) from exc
        return None

    def _covered(self, group: str, positions: Mapping[tuple[str, int], int]) -> bool:
        """Whether ``group``'s committed offsets reach every one of ``positions``."""
        return all(
            (self.committed_position(group, topic, partition) or -1) >= offset
            for (topic, partition), offset in positions.items()
        )

    def _failed(self, count: int, group: str, exc: BaseException) -> KafkaClientError:
        return KafkaClientError(
            f"transaction of {self.transactional_id!r} failed ({count} records, "
            f"group {group!r}): {exc}"
        )

    def close(self) -> None:
        """Release the producer; an open transaction is aborted by the broker in time."""
        self._txn.close()

    def _abort(self) -> None:
        """Abort the open transaction; a producer that cannot is dropped for a fresh one."""
        if not self._txn.abort():
            self._marked.clear()

    def _drop(self) -> None:
        self._txn.drop()
        self._marked.clear()  # a new producer has written no marker yet


def _delivered(offsets: list[int], index: int, error: KafkaError | None, message: Message) -> None:
    # Served by the flush inside commit_transaction, so complete once it returns.
    offset = message.offset()
    if error is None and offset is not None:
        offsets[index] = offset


# How long a throwaway producer's init_transactions may take (see `_abort_ahead`): a
# clean start answers in 5-10 ms; one that finds an open transaction is told to retry.
_ABORT_AHEAD_S = 0.1


def _abort_ahead(config: Mapping[str, Any]) -> None:
    """Have the coordinator abort the transactional id's open transaction before the real
    producer asks for the id.

    A producer that finds its id's transaction still open (its last owner killed -9)
    gets CONCURRENT_TRANSACTIONS while the coordinator aborts it, and librdkafka asks
    again only after a fixed 500 ms timer (rdkafka_idempotence.c, not configurable).
    A throwaway producer's init_transactions starts the abort; it is closed after
    `_ABORT_AHEAD_S`, before its own retry, and the real producer's request finds the
    abort done. Measured on the embedded broker, the id's last owner killed in an open
    transaction: a producer's start 509-525 ms without it, `start` 108-119 ms with it
    (eight each, alternating; 58-64 ms with a 50 ms bound, which a busy machine may not
    give the throwaway to send its request). Safe: each init only bumps the id's epoch,
    so the real producer, asking last, fences the throwaway as it fences every older
    owner.
    """
    throwaway = Producer(secured(config))
    with contextlib.suppress(KafkaException):
        throwaway.init_transactions(_ABORT_AHEAD_S)
    _close_producer(throwaway)


def _close_producer(producer: Producer) -> None:
    # A fenced producer refuses to close cleanly; its handle is freed with the object.
    # Closing one with a fatal error pending runs the delivery callbacks of its unsent
    # records with that error still set, which confluent-kafka reports as a SystemError
    # (seen under kill -9 chaos: the task failed instead of taking the fencing path).
    # Its abort on close fails as fenced, which confluent-kafka warns about: expected here.
    with (
        contextlib.suppress(KafkaException, RuntimeError, SystemError),
        warnings.catch_warnings(),
    ):
        # And a throwaway closed inside its own init (`_abort_ahead`) cannot abort either.
        warnings.filterwarnings("ignore", "Producer abort_transaction failed", RuntimeWarning)
        producer.close()
