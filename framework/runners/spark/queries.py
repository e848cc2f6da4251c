"""Driver side of a stage: one Structured Streaming query over the stage's input topic."""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from framework.config import Settings
from framework.core.graph import Kind
from framework.errors import FlamepipeError
from framework.kafka import security
from framework.logs import WorkerLog, log_dir
from framework.plan.stage_spec import StageSpec
from framework.runners.spark.fronts import FrontHeartbeats, consumed_offsets
from framework.runners.spark.storage import read_or_create_run_id
from framework.runners.spark.tasks import SUMMARY_SCHEMA, TaskContext, stage_task
from framework.runners.spark.ticks import Due
from framework.wire.auth import current
from framework.wire.frames import FRAME_ITEMS
from framework.wire.lifts import Lift

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

_log = logging.getLogger(__name__)

# No topic column: a stage reads one topic, so the task knows it (a string per row cost
# the JVM's Arrow writer and the Python worker for nothing).
_COLUMNS = ("key", "value", "partition", "offset", "unix_millis(timestamp) AS ts")
# Only internal topics need headers (a frame's version). Spark's header column is costly:
# 12 s of JVM CPU per 100 000 records with it, 1.5 s without (docs/decisions/windowed-
# aggregates.md), and a source stage reads one record per input record.
_HEADERS = ("headers",)


_ERROR_LINE = re.compile(
    r"^[\s:]*(?:[\w.]+\.)?(\w+(?:Error|Exception|Violation|Failed|Exceeded)): (.+)$"
)


def essence(exc: BaseException, limit: int = 500) -> str:
    """The line of a batch failure a person acts on: a flamepipe error raised in a task if
    the (Java and Python) traceback holds one, else its first named error that is not the
    py4j wrapper, else its first line."""
    text = str(exc).strip()
    found = [m for line in text.splitlines() if (m := _ERROR_LINE.match(line))]
    ours = [m for m in found if "framework.errors" in m.string or "flamepipe" in m.string]
    useful = [m for m in found if m.group(1) not in ("Py4JJavaError", "PythonException")]
    for match in (*ours, *useful):
        return f"{match.group(1)}: {match.group(2)}"[:limit]
    return (text.splitlines() or [type(exc).__name__])[0][:limit]


@functools.cache
def summary_type() -> StructType:
    """`SUMMARY_SCHEMA` as a Spark type, built once: as a DDL string, `mapInArrow` had it
    parsed by the JVM in every micro-batch (a py4j round trip, 4 ms of the driver's 17-20;
    docs/latency.md)."""
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types = {
        "LONG": LongType(),
        "BOOLEAN": BooleanType(),
        "DOUBLE": DoubleType(),
        "STRING": StringType(),
    }
    fields = (part.strip().split(" ") for part in SUMMARY_SCHEMA.split(","))
    return StructType([StructField(name, types[kind]) for name, kind in fields])


class StageInterrupted(Exception):  # noqa: N818 (what Spark sees, not a flamepipe error)
    """A batch function's failure as Spark sees it: one short line (see `StageQuery._batch`)."""


@dataclass
class StageStats:
    """Running totals of one stage, from its tasks' summaries."""

    batches: int = 0
    records_in: int = 0  # Kafka records: frames on internal topics
    items_in: int = 0
    items_out: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    replayed: int = 0  # aggregate results below a restore floor, not emitted again
    lifted: int = 0  # source records whose slot a lift moved (`framework.wire.lifts`)
    skipped_tasks: int = 0
    last_timestamp_ms: dict[int, int] = field(default_factory=dict)  # per input partition
    # Per input partition of a continuous source stage: how far its task's clock runs
    # ahead of the broker's (`TaskCounts.clock_ahead_ms`); its heartbeats allow for it.
    clock_ahead_ms: dict[int, int] = field(default_factory=dict)
    # Placement of a stateful stage: a partition whose task ran in another Python worker
    # than its previous one moved; catching up its state from the changelog is the price.
    moves: int = 0
    catchup_bytes: int = 0
    catchup_ms: float = 0.0
    move_catchup_bytes: int = 0
    move_catchup_ms: float = 0.0
    workers: dict[int, str] = field(default_factory=dict)  # per input partition: the last
    # Seconds of recent micro-batches, from the batch function's call to its summary rows.
    batch_s: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    fused: bool = False  # a fused query's: timestamps from source rows, placement from units
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rows: list[Any]) -> None:
        """Fold one micro-batch's summary rows in. A fused query's rows are of two kinds
        (`SUMMARY_SCHEMA`): source partitions' (timestamps) and hash units' (placement)."""
        with self._lock:
            self.batches += 1
            for row in rows:
                self.records_in += row["records_in"]
                self.items_in += row["items_in"]
                self.items_out += row["items_out"]
                self.dead_letters += row["dead_letters"]
                self.tombstones += row["tombstones"]
                self.replayed += row["replayed"]
                self.lifted += row["lifted"]
                self.skipped_tasks += int(row["skipped"])
                partition, stamp = row["partition"], row["max_timestamp_ms"]
                newer = stamp > self.last_timestamp_ms.get(partition, -1)
                if newer and (not self.fused or row["source_row"]):
                    self.last_timestamp_ms[partition] = stamp
                if not self.fused or not row["source_row"]:
                    self._place(partition, row)

    def _place(self, partition: int, row: Row) -> None:
        self.catchup_bytes += row["catchup_bytes"]
        self.catchup_ms += row["catchup_ms"]
        previous = self.workers.get(partition)
        self.workers[partition] = row["worker"]
        if previous is not None and previous != row["worker"]:
            self.moves += 1
            self.move_catchup_bytes += row["catchup_bytes"]
            self.move_catchup_ms += row["catchup_ms"]
            _log.debug("partition %d moved from %s to %s", partition, previous, row["worker"])


class StageQuery:
    """Starts and stops the streaming query of one stage."""

    def __init__(
        self,
        spec: StageSpec,
        bootstrap: str,
        checkpoint: str,
        settings: Settings,
        min_time: Callable[[], int],
        *,
        starting_offsets: str = "earliest",
    ) -> None:
        """``starting_offsets``: Spark's option (JSON per partition for a replay); it only
        applies to a new checkpoint, a restarted query resumes from its own."""
        self.spec = spec
        self.starting_offsets = starting_offsets
        self.bootstrap = bootstrap
        self.checkpoint = checkpoint
        self.trigger_ms = settings.trigger_ms
        self.max_batch_records = settings.max_batch_records
        self.min_time = min_time
        self.stats = StageStats()
        # Called with a batch's summary rows once its tasks committed, before they count.
        self.on_rows: Callable[[list[Any]], None] | None = None
        self.on_batch: Callable[[], None] | None = None  # after each batch's tasks committed
        # A source stage's heartbeat floors per partition (`FrontHeartbeats.floors`).
        self.floors: Callable[[], dict[int, int]] = dict
        # A source stage's committed lifts (`framework.wire.lifts`), read at the start.
        self.lifts: tuple[Lift, ...] = ()
        self.front_lag_ms = settings.front_lag_ms
        self.worker_log = WorkerLog(
            str(log_dir(settings.state_dir)), settings.verbose, settings.log_level
        )
        self.run_id = ""  # read from the checkpoint when the query starts
        self.query: Any = None
        self._stopping = False
        self._batch_started: float | None = None  # monotonic, while a batch runs
        # The essence of the last batch failure (`essence`): Spark's own report of a failed
        # query may keep only the first line of the Python traceback.
        self.last_error: str | None = None
        # Aggregate stages: per input partition the earliest window end still to emit
        # (-1: none; missing: unknown) and the ticks sent for it (framework.runners.spark.ticks).
        self._due: dict[int, int] = {}
        self._ticked: dict[int, tuple[int, float]] = {}
        self._due_lock = threading.Lock()

    @property
    def topic(self) -> str:
        """The stage's input topic."""
        return self.spec.stage.topic

    def ticks_due(self, min_time: int, now: float, retry_s: float) -> list[int]:
        """Partitions whose next window ``min_time`` completes, without a recent tick."""
        out: list[int] = []
        with self._due_lock:
            for partition in range(self._units()):
                due = self._due.get(partition, 0)
                if due < 0 or due > min_time:
                    continue
                ticked = self._ticked.get(partition)
                if ticked is not None and ticked[0] == due and now - ticked[1] < retry_s:
                    continue
                self._ticked[partition] = (due, now)
                out.append(partition)
        return out

    def _units(self) -> int:
        """The partitions ticks go to: the stage's input topic's."""
        return self.spec.partitions[self.topic]

    def start(self, spark: SparkSession) -> None:
        """Start the query (it runs on Spark's own thread)."""
        self.run_id = read_or_create_run_id(spark, self.checkpoint)
        frame = self._reader(
            spark, self.spec.stage.topic, self.starting_offsets, self._max_offsets()
        ).selectExpr(*_COLUMNS, *(_HEADERS if self._headers() else ()))
        self._write(frame)

    def _write(self, frame: DataFrame) -> None:
        """Start the streaming query of ``frame`` with this stage's batch function."""
        self.query = (
            frame.writeStream.foreachBatch(self._batch)
            .option("checkpointLocation", self.checkpoint)
            .queryName(f"{self.spec.graph.name}.{self.name}")
            .trigger(processingTime=f"{self.trigger_ms} milliseconds")
            .start()
        )

    @property
    def name(self) -> str:
        """The query's name after the pipeline's: its stage id."""
        return self.spec.stage.id

    def _reader(
        self,
        spark: SparkSession,
        topic: str,
        starting: str,
        max_offsets: int,
        *,
        headers: bool | None = None,
    ) -> DataFrame:
        """A Kafka stream of ``topic`` (every column; select what the stage reads)."""
        headers = self._headers() if headers is None else headers
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", starting)
            .option("includeHeaders", str(headers).lower())
            # Internal topics are written in transactions; never read an aborted one.
            .option("kafka.isolation.level", "read_committed")
            # The executor's consumer keeps a fetch open after a task (the Java client
            # prefetches); the next task's fetch waits behind it until new data lands or
            # fetch.max.wait.ms passes (500 ms by default: stalls of ~500 ms, the p99 of a
            # stateless pipeline at 1k records/s 775 ms; with 5 ms, 319 ms). Fetches happen
            # only inside a task's poll, so the shorter wait costs no idle requests.
            .option("kafka.fetch.max.wait.ms", "5")
            # Bounded batches keep min time moving (so state is pruned) under a backlog.
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .options(**security.spark_options())
            .load()
        )

    def _headers(self) -> bool:
        """Whether the stage reads record headers: an internal topic's frames, or a source
        whose payloads carry them (``KafkaSource(context=True)``)."""
        source = self.spec.source
        return not self.spec.stage.is_source or (source is not None and source.context)

    def _max_offsets(self) -> int:
        """Spark counts Kafka records; an internal topic's record is a frame of up to
        `FRAME_ITEMS` items, so a shuffle stage reads that many times fewer."""
        if self.spec.stage.is_source:
            return self.max_batch_records
        return max(1, self.max_batch_records // FRAME_ITEMS)

    def _batch(self, frame: DataFrame, batch_id: int) -> None:
        """Spark's foreachBatch function: `_run_batch`, its failure made short.

        Spark matches the message of a failed Python batch function against a pattern
        (``.+(\\r\\n|\\r|\\n): ...``, to tell a stop from a failure) whose backtracking
        overflows the stream thread's stack on a long message, and a failed ``collect``
        carries the whole Java stack trace: stopping mid-batch printed a
        ``StackOverflowError`` of 1 024 frames. The full error goes to the log; Spark gets
        one line, and the batch still fails (it is not committed, so it runs again).
        """
        self._batch_started = time.monotonic()
        try:
            self._run_batch(frame, batch_id)
        except Exception as exc:
            stage = self.spec.stage.id
            if self._stopping:
                _log.debug("stage %s: batch %d ended by the stop: %s", stage, batch_id, exc)
                raise StageInterrupted(f"stage {stage}: stopped during batch {batch_id}") from None
            _log.error("stage %s: batch %d failed: %s", stage, batch_id, exc)
            # Raised here in the driver (a batch's check), the error's own name; raised in
            # a task, its name is in the traceback `essence` reads.
            own = isinstance(exc, FlamepipeError)
            self.last_error = f"{type(exc).__name__}: {exc}" if own else essence(exc)
            raise StageInterrupted(
                f"stage {stage}: batch {batch_id} failed: {essence(exc)} (the log has the rest)"
            ) from None
        finally:
            self._batch_started = None

    def recount(self) -> None:
        """Nothing to do: a micro-batch's counts arrive with its summary rows."""

    def batch_age_s(self) -> float | None:
        """How long the micro-batch in flight has run (None: none is)."""
        started = self._batch_started
        return None if started is None else time.monotonic() - started

    def _run_batch(self, frame: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        ctx = self._context(self.spec, batch_id, self.min_time())
        rows = frame.mapInArrow(stage_task(ctx), summary_type()).collect()
        self._count(rows, started)

    def _context(self, spec: StageSpec, batch_id: int, min_time: int) -> TaskContext:
        """What the tasks of ``spec`` get with this batch."""
        return TaskContext(
            spec,
            self.bootstrap,
            self.run_id,
            batch_id,
            min_time,
            current(),
            tuple(security.installed().items()),
            tuple(self.floors().items()),
            self.front_lag_ms,
            self.worker_log,
            self.lifts if spec.stage.is_source else (),
        )

    def _count(self, rows: list[Any], started: float) -> None:
        """A committed batch's summary rows: checks, counters, windows due, listeners."""
        if self.on_rows is not None:
            self.on_rows(rows)
        for row in rows:
            if row["lifted"] and not row["skipped"]:
                _log.warning(
                    "stage %s: %d records of %s[%d] arrived after the partition was "
                    "heartbeated past them (over front_lag_ms=%d from append to readable): "
                    "their global time moved up to the heartbeat, recorded in %s",
                    self.spec.stage.id,
                    row["lifted"],
                    self.topic,
                    row["partition"],
                    self.front_lag_ms,
                    self.spec.topics.lifts,
                )
        self.stats.add(rows)
        self.stats.batch_s.append(time.monotonic() - started)
        self.note_due(rows)
        if self.on_batch is not None:
            self.on_batch()

    def note_due(self, rows: list[Any]) -> None:
        """Take each task's earliest pending window end from a batch's summary rows."""
        with self._due_lock:
            for row in rows:
                if row["next_due"] != -2:  # -2: the task was skipped, its state unknown
                    self._due[row["partition"]] = row["next_due"]
                    self._ticked.pop(row["partition"], None)

    def attach_fronts(self, fronts: FrontHeartbeats) -> bool:
        """A source stage: the driver heartbeats its partitions after its batches (by what
        `consumed` says), checks each batch against what it promised, and passes the
        floors with the tasks."""
        if not self.spec.stage.is_source:
            return False
        topic = self.spec.stage.topic
        fronts.sources[topic] = self
        self.on_rows = functools.partial(fronts.check_batch, topic)
        self.floors = functools.partial(fronts.floors, topic)
        self.on_batch = fronts.poke
        return True

    def window_ticks(self) -> Due | None:
        """An aggregate stage: itself (ticks start the batch that emits its windows)."""
        kind = self.spec.graph.node(self.spec.stage.entry).kind
        return self if kind is Kind.AGGREGATE else None

    def trim_needs(self) -> dict[tuple[str, int], int]:
        """A keyed stage: its topic below the last completed batch (a source topic is the
        user's, never trimmed)."""
        if self.spec.stage.is_source:
            return {}
        topic = self.spec.stage.topic
        return {(topic, p): o for p, o in self.completed_offsets().items()}

    def consumed(self) -> tuple[dict[int, int], dict[int, int]]:
        """Per partition, the offset Spark's last progress report gives and the last
        timestamp read (`framework.runners.spark.fronts.Consumption`).

        Read the timestamps first: they only grow, and every batch they cover was
        committed before it was reported.
        """
        with self.stats._lock:
            stamps = dict(self.stats.last_timestamp_ms)
        return consumed_offsets(self.progress(), self.topic), stamps

    def progress(self) -> dict[str, Any] | None:
        """Spark's last progress report of the query (None before the first)."""
        return None if self.query is None else self.query.lastProgress

    def completed_offsets(self, topic: str | None = None) -> dict[int, int]:
        """Per partition of ``topic`` (default: the stage's input), the end offset of the
        last completed micro-batch: Spark never reads below it again (a restart re-runs at
        most the batch after it)."""
        progress = self.progress()
        if progress is None:
            return {}
        wanted = topic or self.spec.stage.topic
        try:
            for source in progress["sources"]:
                end = source["endOffset"]
                offsets = json.loads(end) if isinstance(end, str) else end
                if isinstance(offsets, dict) and wanted in offsets:
                    return {int(p): int(o) for p, o in offsets[wanted].items()}
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            pass  # a report of another shape: trim nothing
        return {}

    def failure(self) -> str | None:
        """Why the query died (its last batch's error first), or None while it is healthy."""
        if self.query is None or self.query.isActive:
            return None
        exception = self.query.exception()
        reason = str(exception) if exception is not None else "stopped"
        return reason if self.last_error is None else f"{self.last_error} ({reason})"

    def stop(self) -> None:
        """Stop the query, waiting for its current batch to end."""
        self._stopping = True
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def restart(self, spark: SparkSession) -> None:
        """Stop the query (Spark cancels a batch in flight and ends its tasks' Python
        workers) and start it again from its checkpoint (`framework.runners.spark.supervision`)."""
        self.stop()
        self._stopping = False
        self._batch_started = None
        self.last_error = None
        self.start(spark)
