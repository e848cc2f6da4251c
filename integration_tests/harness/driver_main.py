"""A pipeline driver as its own process, for tests that kill it (``kill -9``) and restart it.

Usage: ``python -m integration_tests.harness.driver_main BOOTSTRAP ZOOKEEPER STATE_DIR APP
SOURCE SINK [windowed|joined|eventtime]``. It runs `wordcount` (or, with ``windowed``,
`windowed_counts` over 200 ms windows; with ``joined``, `framework.demos.orders.priced_orders`;
with ``eventtime``, `framework.demos.readings.windowed_readings`) on Spark until killed; it
prints ``running`` once every part started.
"""

from __future__ import annotations

import sys
import time

from connectors import KafkaSink, KafkaSource
from framework.config import Settings
from framework.demos.orders import priced_orders
from framework.demos.readings import windowed_readings
from framework.demos.wordcount import windowed_counts, wordcount
from framework.runners.spark import SparkRunner, spark_session

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
    spark = spark_session(settings, f"driver-{app}")
    if kind == "windowed":
        pipeline = windowed_counts(app, source, sink, window_ms=WINDOW_MS)
    elif kind == "joined":
        pipeline = priced_orders(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    elif kind == "eventtime":
        pipeline = windowed_readings(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    else:
        pipeline = wordcount(app, source, sink)
    run = SparkRunner(settings, spark).start(pipeline.graph())
    print("running", flush=True)
    reported = time.monotonic()
    while True:
        run.check()
        time.sleep(0.2)
        if time.monotonic() - reported >= 10:  # into the driver log a failing test prints
            reported = time.monotonic()
            print(f"flamepipe progress: {run.progress()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
