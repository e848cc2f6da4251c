"""A pipeline driver as its own process, for tests that kill it (``kill -9``) and restart it.

Usage: ``python -m integration_tests.harness.driver_main BOOTSTRAP ZOOKEEPER STATE_DIR APP
SOURCE SINK [windowed|joined|eventtime|stateful]``. It runs `wordcount` (or, with
``windowed``, `windowed_counts` over 200 ms windows; with ``joined``,
`framework.demos.orders.priced_orders`; with ``eventtime``,
`framework.demos.readings.windowed_readings`) on Spark until killed; ``stateful`` runs all
four at once, as four pipelines in one Spark session, and the windowed and running counts
again with fused stages (`stateful_names` gives each one's app, source and sink;
``counted`` is `wordcount`); a comma-separated list of those four kinds (``joined,eventtime``)
runs just them. It prints ``running`` once every part started.
"""

from __future__ import annotations

import sys
import time

from connectors import KafkaSink, KafkaSource
from framework.config import Settings
from framework.demos.orders import priced_orders
from framework.demos.readings import windowed_readings
from framework.demos.wordcount import windowed_counts, wordcount
from framework.errors import FlamepipeError
from framework.pipeline import Pipeline
from framework.runners.spark.continuous import tasks_needed
from framework.runners.spark.runner import SparkRunner
from framework.runners.spark.session import spark_session
from framework.runners.startup import is_passing

WINDOW_MS = 200


def main(argv: list[str]) -> None:
    bootstrap, zookeeper, state_dir, app, source, sink = argv[:6]
    kind = argv[6] if len(argv) > 6 else ""
    settings = Settings.load(
        bootstrap_servers=bootstrap,
        zookeeper_connect=zookeeper,  # the epoch is read from ZooKeeper at start
        state_dir=state_dir,
        parallelism=2,
        spark_master="local[2]",
    )
    pipelines = [(settings, _pipeline(kind, app, source, sink))]
    if "," in kind:  # some of the stateful ones, alone, named as there
        named = stateful_names(app, source, sink)
        pipelines = [(settings, _pipeline(k, *named[k])) for k in kind.split(",")]
    if kind == "stateful":
        named = stateful_names(app, source, sink)
        # Fused stages are micro-batches only: with FLAMEPIPE_EXECUTION=continuous they
        # run beside the continuous pipelines in the same session.
        fused = settings.with_(fuse_stages=True, execution="micro-batch")
        pipelines = [(settings, _pipeline(k, *named[k])) for k in STATEFUL]
        pipelines += [(fused, _pipeline(k, *named[f"{k}-fused"])) for k in FUSED]
    if settings.execution == "continuous" and len(pipelines) > 1:
        # Several pipelines on two cores: each one's stages share their tasks (unless a
        # test asks for a layout), so the driver does not run dozens of Python workers.
        shared = "shared" if settings.continuous_tasks == "auto" else settings.continuous_tasks
        pipelines = [
            (s.with_(continuous_tasks=shared) if s.execution == "continuous" else s, p)
            for s, p in pipelines
        ]
    if settings.execution == "continuous":
        # A slot per long-running task, and two for any micro-batch pipeline's tasks.
        tasks = sum(
            tasks_needed(p.graph(), s) for s, p in pipelines if s.execution == settings.execution
        )
        settings = settings.with_(spark_master=f"local[{tasks + 2}]")
    spark = spark_session(settings, f"driver-{app}")
    runs = [SparkRunner(s, spark).start(p.graph()) for s, p in pipelines]
    print("running", flush=True)
    reported = time.monotonic()
    while True:
        for i, run in enumerate(runs):
            try:
                run.check()
            except FlamepipeError as exc:  # as `SparkRunner.run` does (a busy broker)
                if not is_passing(exc):
                    raise
                print(f"flamepipe restart: {run.graph.name}: {exc}", file=sys.stderr, flush=True)
                run.stop()
                s, p = pipelines[i]
                runs[i] = SparkRunner(s, spark).start(p.graph())
        time.sleep(0.2)
        if time.monotonic() - reported >= 10:  # into the driver log a failing test prints
            reported = time.monotonic()
            for run in runs:
                print(f"flamepipe progress: {run.progress()}", file=sys.stderr, flush=True)


STATEFUL = ("windowed", "joined", "eventtime", "counted")
"""The pipelines of the ``stateful`` driver."""
FUSED = ("windowed", "counted")
"""Those the ``stateful`` driver also runs with fused stages, as pipelines of their own."""


def stateful_names(app: str, source: str, sink: str) -> dict[str, tuple[str, str, str]]:
    """Each ``stateful`` pipeline's app, source and sink, made from the driver's (the fused
    copies' names end in ``-fused``)."""
    names = {k: (f"{app}{k[0]}", f"{source}-{k}", f"{sink}-{k}") for k in STATEFUL}
    for k in FUSED:
        names[f"{k}-fused"] = (f"{app}{k[0]}f", f"{source}-{k}-fused", f"{sink}-{k}-fused")
    return names


def _pipeline(kind: str, app: str, source: str, sink: str) -> Pipeline:
    if kind == "windowed":
        return windowed_counts(app, source, sink, window_ms=WINDOW_MS)
    if kind == "joined":
        return priced_orders(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    if kind == "eventtime":
        return windowed_readings(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    return wordcount(app, source, sink)


if __name__ == "__main__":
    main(sys.argv[1:])
