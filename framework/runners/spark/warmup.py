"""Python workers started before a stage's first micro-batch needs them.

A stage task runs in a Python worker that Spark forks from its daemon and that imports
flamepipe and the user's modules while it unpickles its first task. Measured on 2 cores
(``local[2]``, the windowed word count of `benchmarks/bench_peer_table.py`): Spark's log gave
the first tasks ``boot = 1251, init = 1296`` ms, and the two tasks of an aggregate
stage's first, nearly empty batch held both task slots for 3.3-3.6 s while the source
stage's 100 000 records waited behind them. Spark keeps a finished task's worker for the
next task (``spark.python.worker.reuse``, on by default), so one job of tiny tasks, one per
task slot, run while the driver prepares topics and services, leaves a warm worker in
every slot.

Continuous stages run plain (RDD) tasks, whose workers Spark keeps apart from the
``mapInArrow`` ones: for them the warm-up is a plain job (``plain``) of one task per task
slot, with a local master at most one per core (``local[32]`` on 2 cores would fork 32
workers to warm the few its first tasks take). Measured with the peer benchmark's windowed
count (`benchmarks/bench_peer_table.py --phases throughput --lines 200000`, ``local[*]`` on
2 cores, five runs each, alternating): 140 000 words/s from launch (median) and 9.2 CPU-s
per 1M words with it, 127 000 and 9.7 without; it won every pair. (Before the stage tasks
started while the services open, the same warm-up bought nothing: it then only competed
with the tasks' own start.)

Protocol of `warm_workers`:

1. Once per Spark context and kind of task, and again once the last warm-up is
   `_STALE_S` old (Spark stops a worker idle for a minute): `spark_session` right after
   it made the session, so the job overlaps the driver's whole start-up; `SparkRunner`
   before its micro-batch stages. On a thread of its own, run one job (``mapInArrow``, or
   plain for continuous stages: the evaluation path of the stage tasks, so the same pool
   of workers) of one partition per task slot; each task imports the stage task's modules
   and the given user modules.
2. A failure is logged and ignored: the first tasks then start their own workers, as they
   would without the warm-up.
3. `WorkerWarmup.join` waits a bounded time (a run's stop), so the job does not outlive
   the run that needed it.

On a cluster, continuous stages' tasks hold the slots of the executors they landed on,
and the others stay cold: no Python daemon has started there. An executor lost (kill -9
on the cluster tier) sends its tasks to such an executor, whose daemon then starts and
imports flamepipe while the tasks wait: 1.5 s of the 3.8 s from the kill to the output
caught up (the harness's executor kills, 2 workers of 6 slots). `ExecutorWarmup` (a
driver service beside continuous stages on a non-local master) warms them:

1. Every `_EXECUTORS_POLL_S`, read the executors Spark has registered.
2. When one came that was not warmed yet (the first look counts every executor), and the
   executor set stayed the same for `_SETTLE_S`: start a plain warm-up of one task per
   free slot (slots not held by continuous tasks), which Spark spreads over the executors
   with free slots, the new ones among them. A warm-up that fails is logged; the next new
   executor tries again.
3. An executor lost while a warm-up runs cancels it: the lost executor's tasks need the
   slots its tasks hold (measured: a kill during a warm-up, caught up after 4.4 s
   against 1.7 s at the p50). Its executors are not warmed again: a warm-up right after
   a loss competes with the lost tasks' restart (measured: caught up 3.0 / 5.7 s p50 /
   max with it, 2.6 / 3.6 s without, one run each).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from framework.service import Service

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

# What every stage task imports; the user's modules come from the shipment.
_STAGE_MODULES = ("framework.runners.spark.tasks", "framework.runners.spark.fused_tasks")
_CONTINUOUS_MODULES = ("framework.runners.spark.continuous_tasks",)


_SCHEMA = "seconds DOUBLE, pid LONG"


def _warm(modules: tuple[str, ...], batches: Iterator[Any]) -> Iterator[Any]:
    """Step 1, in a Python worker of ``mapInArrow``: import ``modules``; one row with the
    seconds it took and the worker's process id."""
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([_imported(_STAGE_MODULES + modules)])


def _warm_plain(modules: tuple[str, ...], rows: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """Step 1, in a Python worker of plain tasks: as `_warm`."""
    for _ in rows:
        pass
    yield _imported(_CONTINUOUS_MODULES + modules)


def _imported(modules: tuple[str, ...]) -> dict[str, Any]:
    started = time.monotonic()
    for name in modules:
        importlib.import_module(name)
    return {"seconds": time.monotonic() - started, "pid": os.getpid()}


# Spark stops a Python worker idle for 60 s (its PythonWorkerFactory); a warm-up older
# than this may have warmed workers that are gone.
_STALE_S = 50.0

_started: weakref.WeakKeyDictionary[Any, dict[bool, WorkerWarmup]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def warm_workers(
    spark: SparkSession, modules: tuple[str, ...] = (), *, plain: bool = False
) -> WorkerWarmup:
    """Step 1: the Spark context's warm-up of ``mapInArrow`` workers (``plain``: of plain
    tasks' workers), started on the first call and when the last one is stale."""
    with _lock:
        context = spark.sparkContext
        kinds = _started.setdefault(context, {})
        warmup = kinds.get(plain)
        if warmup is None or warmup.age_s() > _STALE_S:
            warmup = kinds[plain] = WorkerWarmup(spark, modules, plain=plain).start()
        return warmup


class WorkerWarmup:
    """One warm-up job, running on its own thread (see the module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        modules: tuple[str, ...] = (),
        *,
        plain: bool = False,
        slots: int | None = None,
        group: str | None = None,
    ) -> None:
        """``slots``: tasks to run (default: one per task slot Spark has); ``group``: the
        Spark job group to run in, so it can be cancelled."""
        self.spark = spark
        self.group = group
        self.cancelled = False  # set by whoever cancels its job group
        self.modules = modules
        self.plain = plain
        self.slots = max(1, slots or int(spark.sparkContext.defaultParallelism))
        if plain and str(spark.sparkContext.master).startswith("local"):
            self.slots = min(self.slots, os.cpu_count() or 1)
        self.seconds: float | None = None  # the slowest task's import time, once done
        self.pids: frozenset[int] = frozenset()  # the warmed workers' process ids, once done
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="flamepipe-warmup", daemon=True)

    def start(self) -> WorkerWarmup:
        """Start the job and return at once."""
        self._thread.start()
        return self

    def age_s(self) -> float:
        """Seconds since the warm-up was made (it starts at once)."""
        return time.monotonic() - self._started

    def _run(self) -> None:
        # Step 1
        started = time.monotonic()
        try:
            if self.group is not None:
                self.spark.sparkContext.setJobGroup(self.group, "flamepipe warm-up", True)
            if self.plain:
                sc = self.spark.sparkContext
                rdd = sc.parallelize(range(self.slots), self.slots)
                rows: list[Any] = rdd.mapPartitions(
                    functools.partial(_warm_plain, self.modules)
                ).collect()
            else:
                rows = (
                    self.spark.range(0, self.slots, 1, self.slots)
                    .mapInArrow(functools.partial(_warm, self.modules), _SCHEMA)
                    .collect()
                )
        except Exception as exc:  # step 2: an optimisation, never a failure
            if self.cancelled:
                _log.debug("the warm-up was cancelled: %s", exc)
            else:
                _log.info("warming the Python workers failed (first batches start them): %s", exc)
            return
        self.pids = frozenset(row["pid"] for row in rows)
        self.seconds = max((row["seconds"] for row in rows), default=0.0)
        _log.debug(
            "%d Python workers warm in %.2f s (imports %.2f s)",
            self.slots,
            time.monotonic() - started,
            self.seconds,
        )

    def join(self, timeout_s: float = 10.0) -> bool:
        """Step 3: wait at most ``timeout_s`` for the job; whether it has ended."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()


_EXECUTORS_POLL_S = 1.0
_SETTLE_S = 2.0  # a worker's replacement executor registers, then its cores free up


class ExecutorWarmup(Service):
    """Starts the Python daemons of executors that hold no task yet (see the module
    docstring, steps 1-2 of the cluster's warm-up)."""

    def __init__(self, spark: SparkSession, free_slots: Callable[[], int]) -> None:
        super().__init__("flamepipe-executor-warmup")
        self.spark = spark
        self.free_slots = free_slots
        self.warmed: set[str] = set()
        self.runs = 0
        self.cancelled = 0
        self._seen: frozenset[str] = frozenset()
        self._changed = 0.0
        self._running: WorkerWarmup | None = None
        self._group = f"flamepipe-executor-warmup-{id(self)}"

    def _open(self) -> None:
        pass

    def _step(self) -> None:
        # Step 1
        if self._stopping.wait(_EXECUTORS_POLL_S):
            return
        executors = _executors(self.spark)
        now = time.monotonic()
        running = self._running is not None and not self._running.join(0)
        if executors != self._seen:
            lost = bool(self._seen - executors)
            self._seen, self._changed = executors, now
            # Step 3
            if lost and running and self._running is not None:
                self._running.cancelled = True
                self.spark.sparkContext.cancelJobGroup(self._group)
                self.cancelled += 1
                _log.info("an executor was lost: the warm-up's tasks give their slots back")
            return
        # Step 2
        new = executors - self.warmed
        if running or not new or now - self._changed < _SETTLE_S:
            return
        slots = self.free_slots()
        self.warmed |= new
        if slots > 0:
            self._running = WorkerWarmup(self.spark, plain=True, slots=slots, group=self._group)
            self._running.start()
            self.runs += 1
            _log.info("warming the Python workers of %d executor(s) in %d tasks", len(new), slots)

    def _close(self) -> None:
        if self._running is not None and not self._running.join(0):
            self.spark.sparkContext.cancelJobGroup(self._group)


def _executors(spark: SparkSession) -> frozenset[str]:
    """The block managers Spark knows (``host:port``): every executor's, and the
    driver's, which never changes."""
    try:
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
        return frozenset(str(k) for k in _scala_keys(status))
    except Exception as exc:  # py4j: a context stopping under us; try again next poll
        _log.debug("reading the executors: %s", exc)
        return frozenset()


def _scala_keys(scala_map: Any) -> list[Any]:
    keys = scala_map.keys().iterator()
    out = []
    while keys.hasNext():
        out.append(keys.next())
    return out
