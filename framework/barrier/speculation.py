"""Exactly-once bundles written ahead of their release.

A bundle becomes visible only when its transaction commits. Written at release, a bundle
of thousands of items shows nothing until the last of them is produced, while an
at-least-once writer shows items as each produce request is acknowledged: at 10k records/s
that was most of what exactly-once cost (docs/latency.md). `BundleWriter` instead keeps a
transaction open and writes items into it as the barrier buffers them; read_committed
readers see none of it until the commit. When min time passes everything the transaction
holds, the release adds what is missing and the headers and commits: one round trip after
the min time.

Which items go ahead (`Speculation.admit`): none while the barrier buffers fewer than
``min_pending`` items (a bundle that small is produced at its release in a few
milliseconds, and a transaction open ahead would hold every release it cannot cover);
then an item before the frontier (the latest slot pushed so far), at once; the frontier's
items when a later slot arrives. Min time usually
stops inside the frontier (the next unread source record is in it), so a transaction
holding those items could not be released with the rest. After a commit, a new
transaction starts with every buffered item before the frontier (`Speculation.resync`):
so a transaction holds all of them, and a release at ``M`` covers it unless min time
stopped short of the frontier.

Release protocol (`BundleWriter.release`, a bundle released at min time ``M``):

1. If the transaction holds an item a tombstone has since cancelled (it is poisoned),
   abort it; speculation pauses for ``cooldown`` releases (a flow of repairs gains
   nothing from it).
2. With nothing open, begin a transaction: the bundle is written whole, as without
   speculation.
3. Produce the bundle's items the transaction does not hold yet; it must hold nothing
   else (`ProtocolViolation` before any commit otherwise), then the headers, then the
   offsets the barrier adds (its positions, when due).
4. Commit.

A release must not start while the transaction holds items at or after ``M``: they are
not final. `BundleWriter.holds` says so and seals the transaction: it takes no item after
the latest slot it holds (items up to it still go in: the awaited min-time step releases
them with the rest), so a later min time passes all it holds and releases them together.
A hold longer than ``max_hold_s``, plus the time rewriting what the transaction holds
would take (`Speculation.hold_limit_s`), aborts the transaction instead and the release
goes ahead (step 2); the next transaction starts with what the release left.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from framework import failpoints
from framework.barrier.output_writer import TransactionalWriter
from framework.barrier.stats import BarrierStats
from framework.core.barrier import Barrier, Bundle
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import KafkaClientError, ProtocolViolation
from framework.kafka.clients import OutRecordLike
from framework.kafka.transactions import TransactionalProducer
from framework.wire.bundles import header_records, item_records


class Hold(enum.Enum):
    """What a min time that would release a bundle means for an open transaction."""

    GO = "go"  # release now
    WAIT = "wait"  # the transaction holds items the release would not cover: wait
    ABORT = "abort"  # waited too long: abort the transaction, then release


@dataclass
class Speculation:
    """What an open transaction holds ahead of release: bookkeeping only, no Kafka.

    The constructor's arguments are settings; `fresh` copies them into an empty instance.
    """

    enabled: bool = True
    # Below this many buffered items no transaction opens ahead: at 1 000 records/s with
    # continuous stages min time moves every few milliseconds and trails the frontier by
    # ~5 slots, so a transaction open ahead held nearly every release (one per ~150 ms;
    # a stateless record's p50 188 -> 123 ms without it, latency_breakdown.py). A
    # bundle of 500 items takes ~12 ms to produce at its release (25 us per item).
    min_pending: int = 500
    cooldown: int = 8
    max_hold_s: float = 0.05
    max_open_s: float = 20.0
    # An abort writes everything the transaction holds again (the release's part at once,
    # the rest ahead): about this long per item (bench_services.py: 19-26 us per item
    # written on 2 cores). A hold may last as long as that rewrite would take.
    rewrite_s: float = 25e-6
    held: dict[Record, int] = field(default_factory=dict, init=False)
    size: int = field(default=0, init=False)
    max_slot: int = field(default=-1, init=False)
    opened_at: float | None = field(default=None, init=False)
    sealed_at: float | None = field(default=None, init=False)
    poisoned: bool = field(default=False, init=False)
    paused: int = field(default=0, init=False)
    frontier: int = field(default=-1, init=False)
    skipped: bool = field(default=False, init=False)  # items left out below min_pending
    # Admitted but not written yet: the service writes a frame's admitted items at once,
    # and until then the transaction is already writing ahead (not catching up).
    owed: int = field(default=0, init=False)

    def fresh(self) -> Speculation:
        """The same settings, nothing held."""
        return dataclasses.replace(self)

    @property
    def accepting(self) -> bool:
        """Whether a new item goes into the transaction now, whatever its slot."""
        return self.enabled and self.sealed_at is None and not self.poisoned and not self.paused

    def admits(self, slot: int) -> bool:
        """Whether an item of ``slot`` goes into the transaction now: a sealed one still
        takes items up to its latest slot (the release it waits for covers them)."""
        if self.sealed_at is None:
            return self.accepting
        return self.enabled and not self.poisoned and not self.paused and slot <= self.max_slot

    def took(self, record: Record, now: float) -> None:
        """``record`` was written into the transaction."""
        self.took_many((record,), now)

    def took_many(self, records: Sequence[Record], now: float) -> None:
        """``records`` were written into the transaction."""
        if not records:
            return
        self.owed = max(self.owed - len(records), 0)
        held = self.held
        get = held.get
        for record in records:
            held[record] = get(record, 0) + 1
        self.took_count(len(records), max(record[0][0][0] for record in records), now)

    def took_count(self, count: int, max_slot: int, now: float) -> None:
        """``count`` items, the latest of slot ``max_slot``, were written into the
        transaction (by a writer that keeps its own ledger of them:
        `framework.barrier.blocks`)."""
        self.size += count
        self.max_slot = max(self.max_slot, max_slot)
        if self.opened_at is None:
            self.opened_at = now

    def cancelled(self, item: Record) -> None:
        """A tombstone cancelled a buffered copy of ``item`` (its item form)."""
        if item in self.held:
            self.poisoned = True

    def admit(self, record: Record, change: int, barrier: Barrier) -> list[Record]:
        """What to write ahead now that ``record`` was pushed into ``barrier``, changing
        the items to release by ``change`` (`Barrier.push`); see the module docstring."""
        meta = record.meta
        slot = meta.gt.slot
        if change < 0 and self.size:
            self.cancelled(Record(Meta(meta.gt, meta.child_ids, meta.trace, False), record.value))
        if not (self.size or self.owed) and (self.skipped or barrier.pending < self.min_pending):
            return self._owe(self._catch_up(slot, change, barrier))
        if slot > self.frontier:
            old, self.frontier = self.frontier, slot
            return self._owe(barrier.live(old, old + 1) if old >= 0 and self.admits(old) else [])
        if change > 0 and slot < self.frontier and self.admits(slot):
            return self._owe([record])
        return []

    def _owe(self, admitted: list[Record]) -> list[Record]:
        self.owed += len(admitted)
        return admitted

    def _catch_up(self, slot: int, change: int, barrier: Barrier) -> list[Record]:
        """`admit` while nothing is written ahead and items may have been left out: none
        below ``min_pending`` buffered items; from there on every buffered item before
        the frontier at once (as `resync` starts a transaction), after which the rules
        of `admit` keep the transaction holding all of them."""
        self.frontier = max(self.frontier, slot)
        if barrier.pending < self.min_pending or not self.admits(slot):
            # Left out: any item buffered, not only this push's (a tombstone or an item
            # past the frontier moves it over buffered items that were never written).
            self.skipped = self.skipped or barrier.pending > 0
            return []
        self.skipped = False
        return barrier.live(0, self.frontier)

    def resync(self, barrier: Barrier) -> list[Record]:
        """What a new transaction starts with: every buffered item before the frontier
        (none unless items came while speculation paused or the last transaction was
        sealed)."""
        if self.size or not self.accepting or self.frontier < 0:
            return []
        if barrier.pending < self.min_pending:
            self.skipped = self.skipped or barrier.pending > 0
            return []
        return barrier.live(0, self.frontier)

    def hold(self, slot: int, releasable: bool, now: float) -> Hold:
        """Whether min time ``slot`` may release now (see the module docstring)."""
        if not self.size or self.poisoned or not releasable or self.max_slot < slot:
            return Hold.GO
        if self.sealed_at is None:
            self.sealed_at = now
        return Hold.WAIT if now - self.sealed_at < self.hold_limit_s else Hold.ABORT

    @property
    def hold_limit_s(self) -> float:
        """How long a sealed transaction waits for the min time that covers it before it
        is aborted: ``max_hold_s``, plus what the abort would cost in rewriting. A steady
        flow holds tens of items (+1 ms); a backlog holds 10^5 (+2.5 s): aborting those
        cost more than waiting and, min time lagging the reads, often repeated (500 000
        items through the barrier: 613 000 written, 27k items per CPU-second against
        42-47k without aborts; bench_services.py)."""
        return self.max_hold_s + self.size * self.rewrite_s

    def expired(self, now: float) -> bool:
        """Whether the transaction has been open too long (min time stalled)."""
        return self.opened_at is not None and now - self.opened_at > self.max_open_s

    def missing(self, records: Sequence[Record]) -> list[Record]:
        """The records of a bundle not held yet, in order.

        `ProtocolViolation` if the transaction holds anything the bundle lacks: committing
        it would publish an item that is not final.
        """
        held = dict(self.held)
        out: list[Record] = []
        for record in records:
            count = held.get(record, 0)
            if count:
                held[record] = count - 1
            else:
                out.append(record)
        left = [record for record, count in held.items() if count]
        if left:
            raise ProtocolViolation(
                f"the open bundle transaction holds {len(left)} item(s) its release does not "
                f"cover, first at {left[0].meta.gt}"
            )
        return out

    def end(self, *, pause: bool) -> None:
        """The transaction committed or aborted; ``pause`` speculation for a while."""
        self.held = {}
        self.size = 0
        self.owed = 0
        self.max_slot = -1
        self.opened_at = self.sealed_at = None
        self.poisoned = False
        self.paused = self.cooldown if pause else max(self.paused - 1, 0)


class AheadWriter(TransactionalWriter):
    """Bundles of one output topic, each in a transaction opened ahead of its release: what
    `BundleWriter` and `framework.barrier.blocks.BlockWriter` share (the transaction, the
    hold, the expiry, the release's commit)."""

    # Items written ahead wait for the commit anyway, and the commit sends at once.
    linger_ms = 5

    def __init__(
        self,
        bootstrap: str,
        consumer: Consumer,
        transactional_id: str,
        topic: str,
        partitions: int,
        *,
        speculation: Speculation | None = None,
        stats: BarrierStats | None = None,
        owned: Sequence[int] | None = None,
    ) -> None:
        """Bundles on ``topic`` (``partitions``, of which it writes ``owned``: all if None)
        under ``transactional_id``; ``stats`` counts the items written ahead, the releases
        held and the transactions aborted."""
        super().__init__(bootstrap, consumer, transactional_id)
        self.topic = topic
        self.partitions = partitions
        self.owned = owned
        self.speculation = speculation if speculation is not None else Speculation()
        self.stats = stats if stats is not None else BarrierStats()
        self._counts = [0] * partitions
        self._open = False

    def _begin(self, txn: TransactionalProducer) -> None:
        """Begin a transaction unless one is open."""
        if not self._open:
            txn.begin()
            self._open = True

    def _abandon(self, txn: TransactionalProducer) -> None:
        """After a failed write: abort what is open (if the producer still can)."""
        txn.abort()
        self._open = False

    def _holds(self, slot: int, releasable: bool) -> bool:
        """Whether a release at min time ``slot`` must wait (module docstring), given
        whether it would release anything."""
        sealed = self.speculation.sealed_at is not None
        verdict = self.speculation.hold(slot, releasable, time.monotonic())
        if verdict is Hold.ABORT:  # no pause: the release re-opens with what it left
            self._abort_open(pause=False)
        elif verdict is Hold.WAIT and not sealed:
            self.stats.holds += 1
        return verdict is Hold.WAIT

    def expire(self) -> None:
        """Abort a transaction open longer than ``max_open_s`` (its items wait anyway)."""
        if self._open and self.speculation.expired(time.monotonic()):
            self._abort_open(pause=True)

    def _release(
        self,
        seq: int,
        gt_last: GlobalTime,
        write_rest: Callable[[TransactionalProducer], None],
        *,
        records: Sequence[OutRecordLike],
        positions: Sequence[TopicPartition],
        failpoint: str | None,
    ) -> None:
        """Release bundle ``seq`` up to ``gt_last``: begin a transaction unless one is open,
        ``write_rest`` the bundle's items it does not hold yet, then its headers,
        ``records`` and the consumer's ``positions``, and commit. A Kafka failure aborts
        it and raises `KafkaClientError`."""
        txn = self._require()
        try:
            self._begin(txn)
            write_rest(txn)
            headers = header_records(seq, gt_last, self._counts, self.topic, self.owned)
            for record in (*headers, *records):
                txn.produce(record)
            if positions:
                txn.send_offsets(list(positions), self.consumer.consumer_group_metadata())
            if failpoint is not None:  # crash tests: the records are in the log, uncommitted
                failpoints.hit(failpoint, before=txn.flush)
            txn.commit()
        except (KafkaException, BufferError) as exc:
            self._abandon(txn)
            raise KafkaClientError(
                f"bundle {seq} of {self.transactional_id!r} failed: {exc}"
            ) from exc
        self._ended(pause=False)

    def close(self) -> None:
        """Abort an open transaction (its items come again after a restart), then close."""
        if self._open:
            self.txn.abort(timeout_s=5.0)  # fenced or gone: the broker aborts it
        self._open = False
        super().close()

    def _abort_open(self, *, pause: bool) -> None:
        txn = self._require()
        if self._open:
            try:
                txn.abort_or_replace()
            except KafkaClientError:
                self._open = False
                self.close()
                raise
            self.stats.aborts += 1
        self._ended(pause=pause)

    def _ended(self, *, pause: bool) -> None:
        self._open = False
        self._counts = [0] * self.partitions
        self.speculation.end(pause=pause)
        self._forget()

    def _forget(self) -> None:
        """The transaction ended: whatever the writer kept of what it held goes."""


class BundleWriter(AheadWriter):
    """Bundles of one output topic from a `Barrier`, each in a transaction opened ahead of
    its release (the module docstring)."""

    def write_ahead(self, records: list[Record]) -> None:
        """Write ``records``, admitted by `Speculation.admit`, into the open transaction
        (beginning one if none is open)."""
        txn = self._require()
        try:
            self._write_items(txn, records)
        except (KafkaException, BufferError) as exc:
            self._abandon(txn)
            raise KafkaClientError(
                f"{self.transactional_id!r}: writing ahead failed: {exc}"
            ) from exc
        self.speculation.took_many(records, time.monotonic())
        self.stats.ahead += len(records)

    def _write_items(self, txn: TransactionalProducer, records: Sequence[Record]) -> None:
        """Produce items into the open transaction, beginning one if none is open."""
        self._begin(txn)
        txn.produce_many(item_records(records, self.topic, self._counts))

    def holds(self, slot: int, barrier: Barrier) -> bool:
        """Whether a release at min time ``slot`` must wait (module docstring)."""
        return self._holds(slot, barrier.releasable(slot))

    def release(
        self,
        bundle: Bundle,
        barrier: Barrier,
        failpoint: str | None = None,
        records: Sequence[OutRecordLike] = (),
        positions: Sequence[TopicPartition] = (),
    ) -> None:
        """Make ``bundle``, just taken from ``barrier``, visible, with ``records`` and the
        consumer's ``positions`` in the same transaction: the release protocol of the
        module docstring; then start the next transaction (`Speculation.resync`)."""
        spec = self.speculation
        # Step 1
        if spec.poisoned:
            self._abort_open(pause=True)
        # Steps 2-4
        rest = spec.missing(bundle.records) if spec.size else bundle.records
        self._release(
            bundle.seq,
            bundle.gt_last,
            lambda txn: self._write_items(txn, rest),
            records=records,
            positions=positions,
            failpoint=failpoint,
        )
        if again := self.speculation.resync(barrier):
            self.write_ahead(again)
