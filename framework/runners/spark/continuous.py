"""Driver side of a continuous stage: one Spark job of long-running tasks.

With ``execution=continuous`` (`framework.config.Settings`) a stage is not a streaming
query but one Spark job of as many tasks as its input topic has partitions, each a loop
that polls its partition and commits as it goes (`framework.runners.spark.continuous_tasks`).
Spark places the tasks and ships the code; the job never ends by itself.

1. `start`: read (or create) the stage's run id in its checkpoint directory
   (``<epoch checkpoints>/<stage>@continuous``; it namespaces the partitions' committed
   positions as a query's checkpoint does), then run the job on a thread of its own,
   in a Spark job group of its own.
2. A job that ends while not stopping (a task failed: Spark gives up the job and kills the
   others) is a failure `failure` reports; the supervisor restarts it
   (`framework.runners.spark.supervision`), and the new tasks fence the old ones.
3. `stop`: cancel the job group (Spark interrupts the tasks and ends their Python workers)
   and wait for the thread.

The tasks find everything else themselves: min time from the min-time topic, front
heartbeats from what they consume, windows due from min time, so the driver sends no
ticks and no heartbeats for a continuous stage.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, TopicPartition

from framework import failpoints
from framework.config import Settings
from framework.core.graph import Graph
from framework.deadline import Deadline
from framework.errors import ConfigError, KafkaClientError
from framework.kafka import security
from framework.kafka.clients import kafka_retry
from framework.kafka.endpoints import kafka_sources
from framework.kafka.stage_positions import read_positions
from framework.logs import WorkerLog, log_dir
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import plan_stages
from framework.runners.spark.continuous_tasks import ContinuousContext, continuous_task
from framework.runners.spark.fronts import FrontHeartbeats
from framework.runners.spark.queries import StageStats, essence
from framework.runners.spark.storage import read_or_create_run_id
from framework.runners.spark.tasks import TaskContext
from framework.runners.spark.ticks import Due
from framework.wire.auth import current
from framework.wire.frames import FRAME_ITEMS
from framework.wire.lifts import Lift
from framework.wire.positions import TaskCounts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)


# How long a task waits for its first record before it looks at min time again: the
# longest a window's result waits after min time passes its end.
_POLL_MS = 5
# How long ``auto`` waits for more executors once it has the slots to share tasks.
_SETTLE_S = 5.0
# How often the driver reads the tasks' counts (their latest position records, per stage).
_COUNTS_EVERY_S = 1.0
# How long `recount` retries a read that fails for a passing reason.
_RECOUNT_S = 5.0


def stage_tasks(graph: Graph, settings: Settings) -> dict[str, int]:
    """Per stage of ``graph``, its long-lived tasks in continuous execution: one per
    partition of its input (a source topic's, made if missing and allowed; an internal
    topic has ``settings.parallelism``)."""
    sources = kafka_sources(graph)
    counts = {s.topic: s.prepare(settings.kafka_bootstrap) for s in sources.values()}
    stages = plan_stages(graph, {node: s.topic for node, s in sources.items()})
    return {s.id: counts[s.topic] if s.is_source else settings.parallelism for s in stages}


def tasks_needed(graph: Graph, settings: Settings) -> int:
    """The task slots ``graph`` takes in continuous execution: every stage's tasks, or the
    widest stage's when stages share tasks (``continuous_tasks=shared``)."""
    counts = stage_tasks(graph, settings).values()
    return max(counts, default=0) if settings.continuous_tasks == "shared" else sum(counts)


def local_master(settings: Settings, graph: Graph) -> str:
    """The Spark master to run ``graph`` on: ``local[*]`` in continuous execution gets a
    slot per long-lived task (at least one per core), since every task holds its slot
    for as long as it runs; with ``continuous_tasks=auto`` a machine with fewer cores than
    the stages have tasks gets a slot per task of the widest stage, so the stages share
    them (measured on 2 cores: two shared tasks moved 1.1-1.25x the words per second of
    four of their own, docs/latency.md). Any other master is the user's (`check_slots`
    checks it)."""
    if settings.execution != "continuous" or settings.spark_master != "local[*]":
        return settings.spark_master
    cores = os.cpu_count() or 1
    counts = stage_tasks(graph, settings).values()
    total, widest = sum(counts), max(counts, default=0)
    if settings.continuous_tasks == "shared" or (
        settings.continuous_tasks == "auto" and cores < total
    ):
        return f"local[{max(cores, widest)}]"
    return f"local[{max(cores, total)}]"


def check_slots(
    spark: SparkSession,
    needed: Mapping[str, int],
    layout: str = "per-stage",
    *,
    wait_s: float = 0.0,
) -> bool:
    """Whether the stages share their tasks (`Settings.continuous_tasks`): ``per-stage``
    needs a Spark task slot for every stage's every task (stage -> tasks), ``shared`` one
    per task of the widest stage, ``auto`` is per-stage when Spark has those slots, else
    shared. `ConfigError` when Spark has too few for the layout: a task without a slot
    would wait for one that never frees.

    A cluster's executors register a few seconds after its driver starts, and until they
    do Spark counts 2 slots: ``wait_s`` is how long to wait for enough of them (0 for a
    local master, whose slots exist at once)."""
    total, widest = sum(needed.values()), max(needed.values(), default=0)
    want = widest if layout == "shared" else total
    deadline = Deadline(wait_s, "executors to register")
    seen, settled = -1, time.monotonic()
    held = held_slots(spark)  # another pipeline's tasks in this session keep theirs
    while (
        slots := int(spark.sparkContext.defaultParallelism) - held
    ) < want and not deadline.expired:
        if slots != seen:
            seen, settled = slots, time.monotonic()
        elif layout == "auto" and slots >= widest and time.monotonic() - settled > _SETTLE_S:
            break  # enough to share, and no executor came for a while: share
        time.sleep(deadline.remaining(0.2))
    if slots >= want:
        return layout == "shared"
    if layout == "auto" and slots >= widest:
        _log.info(
            "continuous stages share %d tasks: Spark has %d task slots, %d would give "
            "every stage tasks of its own",
            widest,
            slots,
            total,
        )
        return True
    per_stage = ", ".join(f"{stage} {count}" for stage, count in needed.items())
    least = widest if layout != "per-stage" else total
    shared = f", or {widest} if they share tasks" if layout == "auto" and widest < total else ""
    others = f" free (of {slots + held}: running pipelines hold {held})" if held else ""
    raise ConfigError(
        f"continuous execution needs {want} Spark task slots ({per_stage}{shared}) and "
        f"this Spark has {slots}{others}: use local[{least}] or more worker cores "
        "(SPARK_WORKER_CORES, spark.cores.max; a local stack's "
        "FLAMEPIPE_SPARK_WORKER_CORES), fewer partitions (FLAMEPIPE_PARALLELISM), "
        "FLAMEPIPE_CONTINUOUS_TASKS=shared, or FLAMEPIPE_EXECUTION=micro-batch"
    )


_RUNNING: set[ContinuousJob] = set()
"""The jobs of this driver whose tasks hold task slots (started and not stopped)."""


def held_slots(spark: SparkSession) -> int:
    """The task slots of ``spark`` that running continuous jobs of this driver hold."""
    return sum(job.tasks for job in list(_RUNNING) if job.holds(spark))


def cancelled_with_all_jobs(error: str) -> bool:
    """Whether a job's ``error`` says Spark cancelled it with all its jobs: pyspark's own
    Ctrl-C handler does that before the driver unwinds, so it is no task's failure."""
    return "SPARK_JOB_CANCELLED" in error and "cancellation of all jobs" in error


class ContinuousJob:
    """One Spark job of long-running tasks for one or more stages (steps 1-3): task ``i``
    runs partition ``i`` of every member stage that has one. Members start it together
    and share its fate: a failure of one task ends the job, and a restart restarts all."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.members: list[ContinuousQuery] = []
        self.last_error: str | None = None
        self._ready: dict[str, ContinuousContext] = {}
        self._group = ""
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._spark: SparkSession | None = None

    @property
    def tasks(self) -> int:
        """Long-lived tasks: as many as the widest member stage has partitions."""
        return max((m.tasks for m in self.members), default=0)

    def ready(self, spark: SparkSession, member: ContinuousQuery, ctx: ContinuousContext) -> None:
        """``member`` is ready with ``ctx``; the job starts once all are (step 1)."""
        self._ready[member.spec.stage.id] = ctx
        if len(self._ready) < len(self.members):
            return
        self._spark = spark
        self._stopping = False
        self.last_error = None
        self._group = f"flamepipe-{self.name}-{uuid.uuid4().hex}"
        ctxs = tuple(self._ready[m.spec.stage.id] for m in self.members)
        self._thread = threading.Thread(
            target=self._job,
            args=(spark, ctxs),
            name=f"flamepipe-continuous-{self.name}",
            daemon=True,
        )
        _RUNNING.add(self)
        self._thread.start()

    def holds(self, spark: SparkSession) -> bool:
        """Whether this job's tasks hold task slots of ``spark`` now."""
        thread = self._thread
        return self._spark is spark and thread is not None and thread.is_alive()

    def _job(self, spark: SparkSession, ctxs: tuple[ContinuousContext, ...]) -> None:
        """Step 2: the job, on this thread, until it fails or is cancelled."""
        sc = spark.sparkContext
        stages = "+".join(m.spec.stage.id for m in self.members)
        sc.setJobGroup(self._group, f"flamepipe {stages} (continuous)", interruptOnCancel=True)
        try:
            _log.debug("stages %s: submitting %d long-running tasks", stages, self.tasks)
            rdd = sc.parallelize(range(self.tasks), self.tasks)
            rdd.mapPartitionsWithIndex(continuous_task(ctxs)).collect()
            if not self._stopping:
                self.last_error = "its tasks ended"
        except Exception as exc:  # py4j's error carries the task's traceback
            if self._stopping:
                _log.debug("stages %s: tasks ended by the stop: %s", stages, essence(exc))
            else:
                self.last_error = essence(exc)
                if cancelled_with_all_jobs(self.last_error):
                    _log.warning(
                        "stages %s: tasks cancelled with all of Spark's jobs (Ctrl-C, or "
                        "SparkContext.cancelAllJobs); they start again unless the run stops",
                        stages,
                    )
                else:
                    _log.error("stages %s: continuous tasks failed: %s", stages, self.last_error)

    def failure(self) -> str | None:
        """Why the tasks ended, or None while they run (or before they start)."""
        thread = self._thread
        if thread is None or thread.is_alive():
            return None
        return self.last_error or "stopped"

    def stop(self, timeout_s: float = 30.0) -> None:
        """Step 3: cancel the job (every member's tasks), once."""
        self._stopping = True
        self._ready.clear()
        _RUNNING.discard(self)
        thread, spark = self._thread, self._spark
        if thread is None or spark is None:
            return
        spark.sparkContext.cancelJobGroup(self._group)
        thread.join(timeout_s)
        if thread.is_alive():
            _log.warning("stages of %s: tasks did not stop in %.0f s", self.name, timeout_s)

    def restart(self, spark: SparkSession) -> None:
        """Cancel every member's tasks and start new ones (they fence the old)."""
        self.stop()
        for member in self.members:
            member.start(spark)


class ContinuousQuery:
    """Starts, watches and stops the long-running tasks of one stage (steps 1-3)."""

    query: Any = None  # no streaming query: progress reports do not exist

    def __init__(
        self,
        spec: StageSpec,
        bootstrap: str,
        checkpoint: str,
        settings: Settings,
        *,
        starts: Mapping[int, int] | None = None,
        job: ContinuousJob | None = None,
    ) -> None:
        """``starts``: a source stage's start offsets in this epoch (a replay's); ``job``
        the job whose tasks run this stage's (default: one of its own)."""
        self.spec = spec
        self.bootstrap = bootstrap
        self.checkpoint = checkpoint
        self.zookeeper = settings.zookeeper
        self.heartbeat_ms = settings.heartbeat_ms
        self.front_lag_ms = settings.front_lag_ms
        self.commit_ms = settings.commit_interval_ms
        records = settings.max_batch_records
        self.max_records = records if spec.stage.is_source else max(1, records // FRAME_ITEMS)
        self.starts = dict(starts or {})
        self.worker_log = WorkerLog(
            str(log_dir(settings.state_dir)), settings.verbose, settings.log_level
        )
        self._stats = StageStats()
        self._counted_at = -_COUNTS_EVERY_S
        self._counts_lock = threading.Lock()
        self._counts_from = -1.0  # when the kept counts' read started
        self.lifts: tuple[Lift, ...] = ()
        self.run_id = ""
        self.job = job or ContinuousJob(f"{spec.graph.name}-{spec.stage.id}")
        self.job.members.append(self)

    @property
    def stats(self) -> StageStats:
        """Counts from the positions the tasks committed (`TaskCounts`: what committed,
        counted once), read at most every `_COUNTS_EVERY_S`."""
        now = time.monotonic()
        if self.run_id and now - self._counted_at >= _COUNTS_EVERY_S:
            self._counted_at = now
            try:
                self._publish(now, self._committed_counts())
            except (KafkaClientError, KafkaException) as exc:
                _log.debug("stage %s: counts not read now: %s", self.spec.stage.id, exc)
        return self._stats

    def recount(self) -> None:
        """Read the committed counts now (`PipelineRun.wait_released` promises counts that
        hold what was released), retrying what passes for at most `_RECOUNT_S`; on a
        failure that does not pass, the next `stats` tries again."""
        if not self.run_id:
            return
        started = time.monotonic()
        try:
            counts = kafka_retry(
                f"cannot read the counts of stage {self.spec.stage.id}",
                self._committed_counts,
                _RECOUNT_S,
            )
        except KafkaClientError as exc:
            _log.warning("stage %s: counts not read now: %s", self.spec.stage.id, exc)
            self._counted_at = -_COUNTS_EVERY_S
            return
        self._counted_at = started
        self._publish(started, counts)

    def _publish(self, started: float, counts: StageStats) -> None:
        """Keep ``counts``, read from ``started`` on, unless a read that started later is
        kept already (the live table's thread and `recount` read at the same time)."""
        with self._counts_lock:
            if started >= self._counts_from:
                self._counts_from, self._stats = started, counts

    def _committed_counts(self) -> StageStats:
        stats = StageStats()
        for tp, text in self._committed():
            counts = TaskCounts.decode(text, f"{self.group} on {tp.topic}[{tp.partition}]")
            stats.records_in += counts.records_in
            stats.items_in += counts.items_in
            stats.items_out += counts.items_out
            stats.dead_letters += counts.dead_letters
            stats.tombstones += counts.tombstones
            stats.batches += counts.commits  # a continuous stage's batch is a commit
            stats.lifted += counts.lifted
            if counts.last_ms >= 0:
                stats.last_timestamp_ms[tp.partition] = counts.last_ms
            stats.clock_ahead_ms[tp.partition] = counts.clock_ahead_ms
        return stats

    def _committed(self) -> list[tuple[TopicPartition, str]]:
        """Each partition's committed position with its metadata (MAC checked): the
        records the tasks commit them as (`framework.kafka.stage_positions`)."""
        found = read_positions(
            self.bootstrap,
            self.spec.topics.positions(self.spec.stage.id),
            group=self.group,
            source=self.topic,
            partitions=range(self.tasks),
            timeout_s=10,
        )
        return [
            (TopicPartition(self.topic, p, offset), text)
            for p, (offset, text) in sorted(found.items())
        ]

    @property
    def topic(self) -> str:
        """The stage's input topic."""
        return self.spec.stage.topic

    @property
    def tasks(self) -> int:
        """Long-lived tasks: one per partition of the input topic."""
        return self.spec.partitions[self.topic]

    def start(self, spark: SparkSession) -> None:
        """Step 1: this stage's part; its job starts once every member's is ready."""
        self.run_id = read_or_create_run_id(spark, self.checkpoint)
        ctx = ContinuousContext(
            TaskContext(
                self.spec,
                self.bootstrap,
                self.run_id,
                0,
                0,
                current(),
                tuple(security.installed().items()),
                (),
                self.front_lag_ms,
                self.worker_log,
                self.lifts if self.spec.stage.is_source else (),
            ),
            self.zookeeper,
            self.heartbeat_ms,
            _POLL_MS,
            self.commit_ms,
            self.max_records,
            tuple(sorted(self.starts.items())),
            os.environ.get(failpoints.ENV, ""),
        )
        self.job.ready(spark, self, ctx)

    @property
    def last_error(self) -> str | None:
        """Why its job's tasks failed (None: they did not)."""
        return self.job.last_error

    def failure(self) -> str | None:
        """Why the tasks ended, or None while they run."""
        return self.job.failure()

    def batch_age_s(self) -> float | None:
        """None: long-running tasks have no batch to hang in (a task that stops making
        progress holds min time, which the stall watch sees)."""
        return None

    def stop(self, timeout_s: float = 30.0) -> None:
        """Step 3 (for every stage of its job)."""
        self.job.stop(timeout_s)

    def restart(self, spark: SparkSession) -> None:
        """Cancel the tasks and start new ones (they fence whatever is left of the old);
        a shared job's other stages restart with it."""
        self.job.restart(spark)

    @property
    def group(self) -> str:
        """The consumer group of the partitions' committed positions."""
        return f"{self.spec.graph.name}.{self.spec.stage.id}.{self.run_id}"

    def completed_offsets(self, topic: str | None = None) -> dict[int, int]:
        """Per partition of the stage's input, the committed position: no task reads
        below it again (for trimming)."""
        if topic not in (None, self.topic) or not self.run_id:
            return {}
        return {tp.partition: tp.offset for tp, _ in self._committed()}

    def attach_fronts(self, fronts: FrontHeartbeats) -> bool:
        """Never: the tasks heartbeat their own fronts."""
        return False

    def window_ticks(self) -> Due | None:
        """None: the tasks emit windows as min time passes them."""
        return None

    def trim_needs(self) -> dict[tuple[str, int], int]:
        """A keyed stage: its topic below the committed positions."""
        if self.spec.stage.is_source:
            return {}
        return {(self.topic, p): o for p, o in self.completed_offsets().items()}
