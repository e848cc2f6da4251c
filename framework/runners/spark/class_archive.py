"""Building the Spark driver's class-data archive (`framework.local.class_archives`).

Once per machine and jar set (``make bootstrap`` runs it); every later `spark_session`
maps it, which takes a local session's start from 8.6-9.5 s to 4.9-5.2 s on 2 cores:

    python -m framework.runners.spark.class_archive

Protocol of `build_driver_archive`:

1. If the archive for these settings exists, there is nothing to do.
2. A child process starts a local session that writes its classes at exit
   (`spark_session(dump_classes=...)`), runs what a pipeline's start runs (a DataFrame
   job, a ``mapInArrow`` job in a Python worker, a streaming query), prints its JVM's pid
   and stops; its JVM writes the archive as it exits after the child.
3. `publish`: once that JVM has exited, the archive takes its name. A failure logs why
   and leaves no archive: sessions then start without one, only slower.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from framework.config import Settings
from framework.local.class_archives import dump_flags, publish
from framework.runners.spark.session import driver_class_archive, spark_session

__all__ = ["build_driver_archive"]

_log = logging.getLogger(__name__)
_PID = "jvm-pid "
_MODULE = "framework.runners.spark.class_archive"


def build_driver_archive(settings: Settings, timeout_s: float = 300.0) -> Path | None:
    """Steps 1-3: the driver's class archive for ``settings``, built if missing; None if
    it could not be built."""
    archive = driver_class_archive(settings)
    if archive.is_file():  # Step 1
        return archive
    _log.info("building the Spark driver's class archive (once, ~20 s)")
    flags, partial = dump_flags(archive)
    try:  # Step 2
        done = subprocess.run(
            [sys.executable, "-m", _MODULE, "--child", *flags],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        _log.warning("the class archive's session did not finish in %.0f s", timeout_s)
        return None
    pids = [ln[len(_PID) :] for ln in done.stdout.splitlines() if ln.startswith(_PID)]
    if done.returncode != 0 or not pids:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        _log.warning("no class archive: its session failed (%s)", tail[0])
        partial.unlink(missing_ok=True)
        return None
    return archive if publish(partial, archive, int(pids[-1]), timeout_s) else None  # Step 3


def _same(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def _child(flags: list[str]) -> None:
    settings = Settings.load().with_(spark_master="local[2]")
    spark = spark_session(settings, "flamepipe-class-archive", dump_classes=flags)
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    df = spark.range(1000).selectExpr("id", "id % 7 AS k", "cast(id AS string) AS s")
    df.groupBy("k").count().collect()
    df.mapInArrow(_same, df.schema).count()
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .load()
        .writeStream.format("memory")
        .queryName("class_archive")
        .start()
    )
    query.processAllAvailable()
    query.stop()
    spark.stop()
    print(f"{_PID}{pid}", flush=True)


def main() -> None:
    """``python -m framework.runners.spark.class_archive``: build it if missing."""
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    archive = build_driver_archive(Settings.load())
    if archive is None:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
