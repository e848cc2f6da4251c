"""A pipeline driver as its own process, for tests that kill it (``kill -9``) and restart it.

Usage: ``python -m integration_tests.driver_main BOOTSTRAP ZOOKEEPER STATE_DIR APP SOURCE SINK``
It runs `wordcount` on Spark until killed; it prints ``running`` once every part started.
"""

from __future__ import annotations

import sys
import time

from framework.config import Settings
from framework.demos.wordcount import wordcount
from framework.spark import SparkRunner, spark_session


def main(argv: list[str]) -> None:
    bootstrap, zookeeper, state_dir, app, source, sink = argv
    settings = Settings.load(
        bootstrap_servers=bootstrap,
        zookeeper_connect=zookeeper,  # the epoch is read from ZooKeeper at start
        state_dir=state_dir,
        parallelism=2,
        spark_master="local[2]",
    )
    spark = spark_session(settings, f"driver-{app}")
    run = SparkRunner(settings, spark).start(wordcount(app, source, sink).graph())
    print("running", flush=True)
    while True:
        run.check()
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1:])
