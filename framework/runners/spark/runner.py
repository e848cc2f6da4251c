"""`SparkRunner`: runs a pipeline graph on Spark, its acker and barriers beside it.

Start-up protocol of `SparkRunner.start`:

1. Read the pipeline's epoch from ZooKeeper (`framework.coordination.epochs`; 0 before the first
   replay or recovery) and plan the stages on that epoch's topics; every source must be a
   `KafkaSource` and every sink a `KafkaSink`. A new epoch's source queries start at the
   offsets its record gives. A keyed pipeline that ran in this epoch with another
   ``parallelism`` is refused (`framework.operations.rescale`).
2. Prepare topics: sources (created with LogAppendTime, or checked for it), sinks, and the
   framework's own (shuffles, changelogs, pre-barrier, acks, min time, dead letters). In
   continuous execution, check that Spark has a task slot for every long-lived task, or,
   with stages sharing their tasks, for every task of the widest stage
   (`framework.runners.spark.continuous.check_slots`): too few fail here, before any code
   is shipped or any service starts.
3. Ship the user's modules to the executors (`framework.runners.spark.shipping`) and, for
   micro-batches, warm a Python worker in every task slot
   (`framework.runners.spark.warmup`); a user function that cannot be pickled fails here,
   before anything starts.
4. Launch the min-time view the stages prune with and, with embedded services (the
   default), the acker service and one barrier service per sink; otherwise ``flamepipe
   acker`` and ``flamepipe barrier`` run them as processes of their own. Each opens in a
   thread of its own while the next step runs.
5. Start one streaming query per stage, then wait until the services are ready (nothing
   a stage writes needs them open: acks and frames wait in their topics, and a view not
   yet open reads min time 0, which prunes nothing), then start the front heartbeats, the
   window ticks of aggregate stages (`framework.runners.spark.ticks`) and the topic
   janitor; in an epoch after the first, delete the earlier epochs' internal topics
   (`framework.operations.hygiene`).
6. Serve the live page and Prometheus metrics (``ui``; `framework.runners.observe`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.barrier.service import BarrierService
from framework.config import Settings
from framework.core.graph import Graph, Kind
from framework.core.time import GlobalTime
from framework.deadline import Deadline
from framework.errors import (
    ConfigError,
    CoordinationError,
    DeadlineExceeded,
    FlamepipeError,
    PipelineError,
)
from framework.kafka.admin import ensure_topics
from framework.kafka.endpoints import KafkaSink, KafkaSource, kafka_sources, sink_nodes
from framework.kafka.lifts import read_lifts
from framework.kafka.topics import (
    acks_topic_spec,
    changelog_topic_spec,
    dlq_topic_spec,
    lifts_topic_spec,
    mintime_topic_spec,
    positions_topic_spec,
    pre_topic_spec,
    shuffle_topic_spec,
)
from framework.operations.hygiene import TopicJanitor, acker_needs, barrier_needs, remove_old_epochs
from framework.operations.rescale import check_parallelism
from framework.plan.fusion import Fused, fuse
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import ExitKind, Stage, plan_stages
from framework.runners.assembly import (
    ServiceSet,
    barrier_count,
    embedded_services,
    view_for,
)
from framework.runners.keys import install_keys
from framework.runners.observe.console import LiveConsole
from framework.runners.observe.figures import Figures, run_figures
from framework.runners.observe.server import WatchServer
from framework.runners.snapshots import CommittedSlot
from framework.runners.spark.continuous import (
    ContinuousJob,
    ContinuousQuery,
    check_slots,
    held_slots,
    local_master,
)
from framework.runners.spark.execution import StageExecution
from framework.runners.spark.fronts import FrontHeartbeats
from framework.runners.spark.fused_query import FusedQuery
from framework.runners.spark.queries import StageQuery, StageStats
from framework.runners.spark.query_ids import QueryId
from framework.runners.spark.shipping import Shipment, ship
from framework.runners.spark.storage import checkpoint_names, epoch_checkpoints
from framework.runners.spark.supervision import QuerySupervisor
from framework.runners.spark.ticks import WindowTicks
from framework.runners.spark.warmup import ExecutorWarmup, WorkerWarmup, warm_workers
from framework.runners.startup import is_passing, start_retrying
from framework.service import Service
from framework.wire.lifts import Lift
from framework.wire.topics import Topics
from framework.wire.znodes import Offsets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from framework.coordination.epochs import Epochs
    from framework.wire.znodes import EpochRecord

_log = logging.getLogger(__name__)

# How long a continuous pipeline on a cluster waits for executors to offer the slots its
# tasks need: a standalone worker's executor registers a few seconds after the driver.
_EXECUTORS_S = 60.0

RUN_RESTARTS = 3
RUN_RESTART_WINDOW_S = 600.0


class _Laps:
    """Seconds between the marks of a start-up, for one log line: where it went."""

    def __init__(self) -> None:
        self._began = self._last = time.monotonic()
        self._laps: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self._laps.append((name, now - self._last))
        self._last = now

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {took:.2f}" for name, took in self._laps)
        return f"{self._last - self._began:.2f} s ({parts})"


class SparkRunner:
    """Runs pipelines on Spark against Kafka; ``pipeline.run(SparkRunner(settings))``."""

    def __init__(
        self,
        settings: Settings | None = None,
        spark: SparkSession | None = None,
        *,
        services: str = "embedded",
        progress_s: float = 0.0,
        console: bool = False,
    ) -> None:
        """``services``: "embedded" (acker and barriers in this process) or "external";
        ``progress_s`` > 0 logs a progress line that often while `run` runs; ``console``
        draws a live table on a terminal instead (`framework.runners.observe.console`)
        and logs the final one."""
        if services not in ("embedded", "external"):
            raise PipelineError(f"services={services!r}: use 'embedded' or 'external'")
        self.settings = settings or Settings.load()
        install_keys(self.settings)  # before anything reads or writes Kafka or ZooKeeper
        self.services = services
        self.progress_s = progress_s
        self.console = console
        self._spark = spark

    def start(self, graph: Graph) -> PipelineRun:
        """Start the pipeline and return at once; see the module docstring."""
        run = PipelineRun(
            self.settings, graph, self._session(graph), embedded=self.services == "embedded"
        )
        try:
            run.start()
        except BaseException:
            run.stop()
            raise
        return run

    def run(self, graph: Graph, stop: threading.Event | None = None) -> PipelineRun:
        """Start and run until interrupted (Ctrl-C), ``stop`` is set, or a part fails.

        A driver started during a broker or ZooKeeper outage waits for them
        (`framework.runners.startup`). A stage query that fails or hangs is restarted
        (`PipelineRun.check`); a run that fails with an error that passes with the
        cluster's outage is stopped and started again in this driver (`_restart`). When
        the pipeline's epoch changes (a replay, or a recovery after a stall), the run stops
        and starts again on the new epoch's topics.
        """
        from framework.coordination.epochs import Epochs

        # A driver started during a broker or ZooKeeper outage waits for them (bounded).
        run = start_retrying(self.settings, lambda: self.start(graph))
        runs = [run]
        epochs = Epochs(self.settings.zookeeper, graph.name)

        def figures() -> Figures:
            return runs[-1].figures()  # the current epoch's run

        live = LiveConsole(figures) if self.console else None
        if live is not None:
            live.start()
        lines = self.progress_s > 0 and (live is None or not live.interactive)
        last = time.monotonic()
        restarts: list[float] = []
        try:
            while stop is None or not stop.is_set():
                try:
                    run.check()
                except FlamepipeError as exc:
                    run = self._restart(graph, run, exc, restarts)
                    runs.append(run)
                    continue
                time.sleep(1)
                if lines and time.monotonic() - last >= self.progress_s:
                    last = time.monotonic()
                    _log.info("%s", run.progress())
                current = _current_epoch(epochs)
                if current is not None and current.epoch != run.epoch:
                    _log.info("epoch %d started (%s): restarting", current.epoch, current.reason)
                    run.stop()
                    run = start_retrying(self.settings, lambda: self.start(graph))
                    runs.append(run)
        except KeyboardInterrupt:
            _log.info("stopping")
        finally:
            if live is not None:
                _log.info("final figures:\n%s", live.stop().rstrip())
            run.stop()
            epochs.close()
        return run

    def _restart(
        self, graph: Graph, run: PipelineRun, failure: FlamepipeError, restarts: list[float]
    ) -> PipelineRun:
        """A run that failed with an error that passes with the cluster's outage (a service
        that a broker restart broke, a stage query over its restart budget), stopped and
        started again in this driver and Spark session; `RUN_RESTARTS` in
        `RUN_RESTART_WINDOW_S`, then the failure ends the driver."""
        now = time.monotonic()
        restarts[:] = [t for t in restarts if now - t < RUN_RESTART_WINDOW_S]
        if not is_passing(failure) or len(restarts) >= RUN_RESTARTS:
            raise failure
        restarts.append(now)
        _log.warning(
            "%s failed (%s): restarting it in this driver (%d of %d in %.0f min)",
            graph.name,
            failure,
            len(restarts),
            RUN_RESTARTS,
            RUN_RESTART_WINDOW_S / 60,
        )
        try:
            run.stop()
        except FlamepipeError as exc:  # the failure being handled, or one it caused
            _log.debug("stopping the failed run: %s", exc)
        return start_retrying(self.settings, lambda: self.start(graph))

    def _session(self, graph: Graph) -> SparkSession:
        if self._spark is None:
            from framework.runners.spark.session import spark_session

            master = local_master(self.settings, graph)
            self._spark = spark_session(self.settings.with_(spark_master=master), "flamepipe")
        return self._spark


class PipelineRun:
    """A running pipeline: its stage queries, services and counters."""

    def __init__(
        self, settings: Settings, graph: Graph, spark: SparkSession, *, embedded: bool = True
    ):
        install_keys(settings)
        self.settings = settings
        self.embedded = embedded
        self.graph = graph.validate()
        self.spark = spark
        self.epoch = 0
        self.start_offsets: Offsets | None = None
        self.topics = Topics(graph.name)
        self.bootstrap = settings.kafka_bootstrap
        self.queries: dict[str, StageExecution] = {}
        self.services = ServiceSet()
        self.fronts: FrontHeartbeats | None = None
        self.ticks: WindowTicks | None = None
        self._committed: CommittedSlot | None = None
        self.shipment: Shipment | None = None
        self.warmup: WorkerWarmup | None = None
        self.watch: WatchServer | None = None
        self.janitor: TopicJanitor | None = None
        self.executor_warmup: ExecutorWarmup | None = None
        self._lifts: dict[str, tuple[Lift, ...]] = {}
        # The one job of every continuous stage's tasks when they share them (None: a
        # job per stage; `Settings.continuous_tasks`).
        self._shared: ContinuousJob | None = None
        self.supervisor = QuerySupervisor(
            graph.name,
            lambda: self.queries,
            spark,
            stuck_batch_s=settings.stuck_batch_ms / 1000,
        )
        self._stopped = False

    @property
    def stats(self) -> Mapping[str, StageStats]:
        """Counters per stage id."""
        return {stage: query.stats for stage, query in self.queries.items()}

    def start(self) -> None:
        """Steps 1-6 of the module docstring; logs how long each took."""
        laps = _Laps()
        # Step 1
        sources = kafka_sources(self.graph)
        sink_nodes(self.graph)
        self._read_epoch()
        # Keys routed to units that do not hold their state would go unnoticed.
        check_parallelism(self.bootstrap, self.graph, self.epoch, self.settings.parallelism)
        stages = plan_stages(self.graph, {n: s.topic for n, s in sources.items()}, self.epoch)
        alone, fused = fuse(stages) if self.settings.fuse_stages else (stages, ())
        laps.mark("plan")
        # Step 2
        partitions = self._prepare_topics(sources, stages)
        laps.mark("topics")
        if self.continuous:
            needed = {stage.id: partitions[stage.topic] for stage in alone}
            local = str(self.spark.sparkContext.master).startswith("local")
            layout = self.settings.continuous_tasks
            wait_s = 0.0 if local else _EXECUTORS_S
            if check_slots(self.spark, needed, layout, wait_s=wait_s):
                self._shared = ContinuousJob(self.graph.name)
            laps.mark("slots")
        # Replays move the records earlier epochs lifted, from their first batch on.
        self._lifts = read_lifts(self.bootstrap, self.graph.name)
        laps.mark("lifts")
        # Step 3
        self.shipment = ship(self.spark, self.graph, self._code_dir())
        if not self.continuous:
            # Long-running tasks start their Python workers once, at once; a warm-up job
            # beside them only took CPU from their start (on a driver's restart its six
            # workers booted for 5.6-7.2 s while the stages' six tasks started).
            self.warmup = warm_workers(self.spark, tuple(sorted(self.shipment.roots)))
        laps.mark("shipping")
        # Step 4
        if self.embedded:
            self.services = embedded_services(self.settings, self.graph, self.epoch)
        else:  # the acker and barriers run elsewhere; stages still prune with the view
            self.services = ServiceSet(view=view_for(self.settings, self.graph, self.epoch))
        # A barrier's producers and positions took 1.1 s of a 1.5 s start-up (the peer
        # table's windowed count, embedded broker): the stage tasks start meanwhile.
        self.services.launch()
        laps.mark("launch")
        # Step 5
        for stage in alone:
            self._start_stage(stage, sources, partitions)
        for pair in fused:
            self._start_fused(pair, sources, partitions)
        if self._shared is not None:
            for member in self._shared.members:  # the job starts with the last
                member.start(self.spark)
        laps.mark("stages")
        self.services.wait_ready()
        laps.mark("services ready")
        self._start_drivers()
        laps.mark("rest")
        _log.info("%s: epoch %d started in %s", self.graph.name, self.epoch, laps)

    def _start_drivers(self) -> None:
        """The rest of step 5, and step 6: the driver's own threads beside the stages."""
        self.fronts = FrontHeartbeats(
            self.bootstrap,
            self.graph.name,
            acks_topic=self.topics.acks,
            shards=self.settings.acker_shards,
            sources={},
            delta_ms=self.graph.delta_ms,
            interval_ms=self.settings.heartbeat_ms,
            lag_ms=self.settings.front_lag_ms,
        )
        for q in self.queries.values():
            q.attach_fronts(self.fronts)
        self.fronts.start()
        aggregates = [due for q in self.queries.values() if (due := q.window_ticks()) is not None]
        if aggregates:
            self.ticks = WindowTicks(
                self.bootstrap, aggregates, interval_ms=self.settings.heartbeat_ms
            )
            if self.services.view is not None:
                self.services.view.subscribe(self.ticks.poke)
            self.ticks.start()
        if self.settings.trim_interval_ms > 0:
            self.janitor = TopicJanitor(
                self.bootstrap, self.trim_needs, interval_s=self.settings.trim_interval_ms / 1000
            )
            self.janitor.start()
        if self.continuous and not str(self.spark.sparkContext.master).startswith("local"):
            self.executor_warmup = ExecutorWarmup(self.spark, self._free_slots).start()
        if self.epoch > 0:  # nothing reads the internal topics of earlier epochs again
            remove_old_epochs(self.bootstrap, self.graph, self.epoch)
        # Step 6
        if self.settings.ui:
            self.watch = WatchServer(
                self.figures, host=self.settings.ui_host, port=self.settings.ui_port
            )
            self.watch.start()

    def trim_needs(self) -> dict[tuple[str, int], int]:
        """What each internal topic's reader may still read (`framework.operations.hygiene`)."""
        needs = dict(acker_needs(self.bootstrap, self.topics, self.settings.acker_shards))
        needs.update(
            barrier_needs(self.bootstrap, self.topics, self.graph.name, sink_nodes(self.graph))
        )
        for query in self.queries.values():
            needs.update(query.trim_needs())
        return needs

    def figures(self) -> Figures:
        """The run's figures now (`framework.runners.observe.figures`)."""
        return run_figures(self)

    def _read_epoch(self) -> None:
        from framework.coordination.epochs import read_epoch

        record = read_epoch(self.settings.zookeeper, self.graph.name)
        if record is not None:
            self.epoch, self.start_offsets = record.epoch, record.offsets
            self.topics = Topics(self.graph.name, self.epoch)

    def _prepare_topics(
        self, sources: Mapping[str, KafkaSource], stages: tuple[Stage, ...]
    ) -> dict[str, int]:
        counts: dict[str, int] = {s.topic: s.prepare(self.bootstrap) for s in sources.values()}
        for node in self.graph.by_kind(Kind.SINK):
            sink = node.endpoint
            assert isinstance(sink, KafkaSink)  # sink_nodes checked it
            counts[sink.topic] = sink.prepare(self.bootstrap)
        topics, parallelism = self.topics, self.settings.parallelism
        specs = [
            acks_topic_spec(self.graph.name, self.settings.acker_shards, self.epoch),
            mintime_topic_spec(self.graph.name, epoch=self.epoch),
            dlq_topic_spec(self.graph.name),
            lifts_topic_spec(self.graph.name),
        ]
        continuous = self.settings.execution == "continuous"
        for stage in stages:
            if not stage.is_source:
                specs.append(shuffle_topic_spec(stage.topic, parallelism))
                specs.append(changelog_topic_spec(topics.state(stage.id), parallelism))
            if continuous:
                tasks = counts[stage.topic] if stage.is_source else parallelism
                specs.append(positions_topic_spec(topics.positions(stage.id), tasks))
            for exit_ in stage.exits.values():
                if exit_.kind is ExitKind.SINK:
                    barriers = barrier_count(self.graph, exit_.target)
                    name = self.graph.name
                    specs.append(pre_topic_spec(name, exit_.target, self.epoch, barriers))
        ensure_topics(self.bootstrap, specs)
        counts.update({spec.name: spec.partitions for spec in specs})
        return counts

    def _spec(
        self,
        stage: Stage,
        sources: Mapping[str, KafkaSource],
        partitions: Mapping[str, int],
        **fused: Any,
    ) -> StageSpec:
        return StageSpec(
            self.graph,
            stage,
            dict(partitions),
            self.settings.acker_shards,
            sources.get(stage.entry),
            self.settings.fail_fast,
            self.epoch,
            columnar=self.settings.columnar,
            **fused,
        )

    @property
    def continuous(self) -> bool:
        """Whether stages run as long-running tasks (`Settings.execution`)."""
        return self.settings.execution == "continuous"

    def _start_stage(
        self, stage: Stage, sources: Mapping[str, KafkaSource], partitions: Mapping[str, int]
    ) -> None:
        spec = self._spec(stage, sources, partitions)
        if self.continuous:
            self._start_continuous(stage, spec)
            return
        query_id = QueryId.split(stage.id)
        self._refuse_other_mode(query_id)
        query = StageQuery(
            spec,
            self.bootstrap,
            f"{self._checkpoints()}/{query_id}",
            self.settings,
            self._min_time(stage),
            starting_offsets=self._starting_offsets(stage),
        )
        query.lifts = self._lifts.get(stage.topic, ())
        query.start(self.spark)
        self.queries[stage.id] = query

    def _start_fused(
        self, pair: Fused, sources: Mapping[str, KafkaSource], partitions: Mapping[str, int]
    ) -> None:
        """One query for a source stage and the keyed stage it alone feeds."""
        query_id = QueryId.fused(pair.map.id, pair.reduce.id)
        self._refuse_other_mode(query_id)
        query = FusedQuery(
            self._spec(pair.map, sources, partitions, unacked_exit=pair.reduce.entry),
            self._spec(pair.reduce, sources, partitions, unacked_input=True),
            self.bootstrap,
            f"{self._checkpoints()}/{query_id}",
            self.settings,
            self._min_time(pair.reduce),
            starting_offsets=self._starting_offsets(pair.map),
        )
        query.lifts = self._lifts.get(pair.map.topic, ())
        query.start(self.spark)
        self.queries[pair.map.id] = query
        name = self.graph.name
        _log.info("%s: stages %s and %s run fused as one query", name, pair.map.id, pair.reduce.id)

    def _start_continuous(self, stage: Stage, spec: StageSpec) -> None:
        """The stage as long-running tasks (`framework.runners.spark.continuous`)."""
        query_id = QueryId.continuous(stage.id)
        self._refuse_other_mode(query_id)
        starts = (self.start_offsets or {}).get(stage.topic) if stage.is_source else None
        query = ContinuousQuery(
            spec,
            self.bootstrap,
            f"{self._checkpoints()}/{query_id}",
            self.settings,
            starts={int(p): o for p, o in (starts or {}).items()},
            job=self._shared,
        )
        query.lifts = self._lifts.get(stage.topic, ())
        self.queries[stage.id] = query
        if self._shared is None:
            query.start(self.spark)
        shared = "" if self._shared is None else ", sharing them with the other stages"
        _log.info(
            "%s: stage %s runs as %d continuous tasks%s",
            self.graph.name,
            stage.id,
            query.tasks,
            shared,
        )

    def _refuse_other_mode(self, query_id: QueryId) -> None:
        """`ConfigError` if this epoch's checkpoints hold one of the query's stages in
        another mode: a fused query never reads the frames a split one left in the keyed
        stage's topic, and a split one would read them again; a continuous stage keeps its
        positions in a consumer group, not in a query's checkpoint."""
        names = checkpoint_names(self.spark, self._checkpoints())
        others = [QueryId.parse(c) for c in names if c != str(query_id)]
        clash = [c for c in others if c.mode != query_id.mode and c.overlaps(query_id)]
        if clash:
            raise ConfigError(
                f"{self.graph.name!r} ran {clash[0].mode} in epoch {self.epoch} (checkpoint "
                f"{clash[0]}) and its settings now ask for {query_id.mode}: switch in a new epoch "
                "(flamepipe replay), or set FLAMEPIPE_FUSE_STAGES / FLAMEPIPE_EXECUTION back"
            )

    def _min_time(self, stage: Stage) -> Callable[[], int]:
        """What a stage's tasks prune and complete windows by."""
        segment = self.graph.segments().of_node[stage.entry]
        view, committed = self.services.view, self._committed_slot()
        if view is None:
            min_time: Callable[[], int] = lambda: 0  # noqa: E731
        elif self.graph.node(stage.entry).kind is Kind.AGGREGATE:
            # An aggregate's min time completes windows, uncapped: a snapshot cuts its
            # changelog at a batch (`framework.snapshots.copies`), not its latest state.
            min_time = lambda: view.min_time(segment)  # noqa: E731
        else:
            # Prune only below the committed snapshot: a later snapshot is cut from the
            # state, which must still hold what it needs (snapshots-from-changelogs.md).
            min_time = lambda: min(view.min_time(segment), committed())  # noqa: E731
        return min_time

    def _committed_slot(self) -> CommittedSlot:
        if self._committed is None:
            self._committed = CommittedSlot(self.settings.zookeeper, self.graph.name)
        return self._committed

    def _starting_offsets(self, stage: Stage) -> str:
        """Spark's startingOffsets: the epoch's replay offsets for a source, else earliest."""
        offsets = (self.start_offsets or {}).get(stage.topic)
        if not stage.is_source or not offsets:
            return "earliest"
        return json.dumps({stage.topic: {str(p): o for p, o in sorted(offsets.items())}})

    def _checkpoints(self) -> str:
        """Spark checkpoints of this epoch (a URI): a new epoch starts every query afresh."""
        return epoch_checkpoints(self.settings, self.graph.name, self.epoch)

    def _code_dir(self) -> Path:
        """Where the shipped code's zips go: one per content, shared by the epochs (a
        driver that starts a new epoch ships into the Spark context it already has)."""
        return self.settings.state_dir / "apps" / self.graph.name / "code"

    def check(self) -> None:
        """Restart a stage query that died of a passing failure or hangs in a batch
        (`framework.runners.spark.supervision`); raise the failure of a query that cannot
        restart or of a service that died (`ServiceFailed`, or the flamepipe error that
        stopped the service)."""
        if not self._stopped:
            self.supervisor.heal()
        for service in self._drivers():
            service.check()
        self.services.check()

    def committed_slot_now(self) -> int | None:
        """The slot of the last committed snapshot (None: none yet, or not watched)."""
        if self._committed is None:
            return None
        return self._committed() or None

    def progress(self) -> str:
        """One line: records in and items out per stage, bundles per barrier, min time."""
        parts = [
            f"{stage} in={stats.items_in} out={stats.items_out}"
            + (f" moves={stats.moves}" if stats.workers and stats.catchup_bytes else "")
            for stage, stats in self.stats.items()
        ]
        parts += [
            f"{b.sink_node} bundles={b.stats.bundles} items={b.stats.items_out}"
            f"{' (reading to the committed end)' if b.catching_up else ''}"
            f" dropped={b.replays_dropped} applied min time={b.released_through()}"
            for b in self.barriers()
        ]
        if self.services.view is not None:
            parts.append(f"min time={self.services.view.min_time()}")
        return f"flamepipe {self.graph.name}: " + ", ".join(parts)

    def released(self, until_ms: int) -> bool:
        """Whether everything appended before ``until_ms`` went through the barriers."""
        if not self.embedded:
            raise PipelineError(
                "released() watches the barriers of this process; with external services read "
                "the output topic instead"
            )
        self.check()
        # A record stamped at until_ms is in this slot; min time must pass the whole slot.
        slot = GlobalTime.of_record(until_ms, "", 0, 0, self.graph.delta_ms).slot
        return all(b.released_through() > slot for b in self.barriers())

    def wait_released(self, until_ms: int, timeout_s: float) -> None:
        """Block until `released` (``until_ms``); `DeadlineExceeded` after ``timeout_s``.
        `stats` read after it returns count at least what was released."""
        deadline = Deadline(timeout_s)
        while not self.released(until_ms):
            if deadline.expired:
                raise DeadlineExceeded(
                    f"input appended before {until_ms} not released within {timeout_s:.0f} s"
                )
            time.sleep(0.05)
        for query in self.queries.values():
            query.recount()

    def barriers(self) -> list[BarrierService]:
        """The barrier services of the sinks (none with external services)."""
        return self.services.barriers

    def _drivers(self) -> list[Service]:
        """The driver's own services: front heartbeats, window ticks, the topic janitor,
        the executors' warm-up."""
        started = (self.fronts, self.ticks, self.janitor, self.executor_warmup)
        return [s for s in started if s is not None]

    def _free_slots(self) -> int:
        """Task slots no continuous task holds (a cluster's executors' warm-up)."""
        return int(self.spark.sparkContext.defaultParallelism) - held_slots(self.spark)

    def stop(self) -> None:
        """Stop heartbeats, queries, then services (each waits for its current work);
        raise the first failure once everything is stopped."""
        self._stopped = True  # the queries stop now: not a failure to heal
        failure: FlamepipeError | None = None
        watch, self.watch = self.watch, None
        if watch is not None:
            watch.stop()
        for driver in self._drivers():
            try:
                driver.stop()
            except FlamepipeError as exc:
                failure = failure or exc
        for query in self.queries.values():
            query.stop()
        if self.warmup is not None:
            self.warmup.join()
        try:
            self.services.stop()
        except FlamepipeError as exc:
            failure = failure or exc
        if self._committed is not None:
            self._committed.close()
        if failure is not None:
            raise failure


def _current_epoch(epochs: Epochs) -> EpochRecord | None:
    """The pipeline's epoch record; None while ZooKeeper does not answer (an outage only
    delays noticing a new epoch; the services ride it out on their own)."""
    try:
        return epochs.current()
    except CoordinationError as exc:
        _log.warning("cannot read the epoch now: %s", exc)
        return None
