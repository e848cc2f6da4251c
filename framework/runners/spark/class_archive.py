"""Building the class-data archives of Spark's JVMs (`framework.local.class_archives`):
the driver's, and the executors' of the embedded standalone cluster; ``main`` builds the
embedded ZooKeeper's and Kafka's too (`framework.local.stack.build_server_archives`).

Once per machine and jar set (``make bootstrap`` runs it); every later `spark_session`
maps the driver's, which takes a local session's start from 8.6-9.5 s to 4.9-5.2 s on 2
cores, and executors on a cluster of `framework.local.stack` map theirs:

    python -m framework.runners.spark.class_archive

Protocol of `build_driver_archive` and `build_executor_archive`:

1. If the archive for these settings exists, there is nothing to do.
2. A child process starts a session whose driver (a local session,
   `spark_session(dump_classes=...)`) or whose executors (on a one-worker cluster of its
   own, ``spark.executor.extraJavaOptions``; the cluster's master and worker write theirs
   too) write their classes at exit, runs what a pipeline's start runs (a DataFrame job, a
   ``mapInArrow`` job in a Python worker, a streaming query), and reports the JVM's pid,
   the file it wrote and its class path. The driver writes as it exits after the child;
   the executor is stopped while its application runs (`_exited`).
3. `publish`: once that JVM has exited and a JVM on its class path maps what it wrote,
   the archive takes its name. A failure logs why and leaves no archive: sessions then
   start without one, only slower.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.config import Settings
from framework.local.class_archives import archive_path, dump_flags, partial_path, publish
from framework.local.servers import spark_classpath
from framework.local.stack import build_server_archives, dumping_stack
from framework.local.tools import pyspark_jars_dir
from framework.runners.spark.session import (
    driver_class_archive,
    executor_class_archive,
    spark_session,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)
_PID = "jvm-pid\t"
_MODULE = "framework.runners.spark.class_archive"


def build_driver_archive(settings: Settings, timeout_s: float = 300.0) -> Path | None:
    """Steps 1-3 for the driver: its class archive for ``settings``, built if missing;
    None if it could not be built."""
    archive = driver_class_archive(settings)
    if archive.is_file():  # Step 1
        return archive
    _log.info("building the Spark driver's class archive (once, ~30 s)")
    return _build(archive, ["driver"], timeout_s)


def build_executor_archive(settings: Settings, timeout_s: float = 300.0) -> Path | None:
    """Steps 1-3 for the embedded cluster (`framework.local.stack`): the class archive of
    its executors, and those of its master and worker, built if missing on a one-worker
    cluster of its own; None if the executors' could not be built."""
    archive = executor_class_archive(settings)
    home = pyspark_jars_dir().parent
    daemons = [
        archive_path(settings.cache_dir, name, [spark_classpath(home)])
        for name in ("spark-master", "spark-worker")
    ]
    if archive.is_file() and all(a.is_file() for a in daemons):  # Step 1
        return archive
    _log.info("building the Spark cluster's class archives (once, ~60 s)")
    built: Path | None = archive
    try:
        with dumping_stack(settings, spark_workers=1) as stack:
            if not archive.is_file():
                built = _build(archive, ["executor", stack.master_url], timeout_s)
    finally:
        # What the executor started in place of the one that wrote the archive wrote.
        partial_path(archive).unlink(missing_ok=True)
    return built


def _build(archive: Path, child: list[str], timeout_s: float) -> Path | None:
    flags, partial = dump_flags(archive)
    try:  # Step 2
        done = subprocess.run(
            [sys.executable, "-m", _MODULE, "--child", *child, *flags],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        _log.warning("the class archive's session did not finish in %.0f s", timeout_s)
        partial.unlink(missing_ok=True)
        return None
    found = [ln.split("\t")[1:] for ln in done.stdout.splitlines() if ln.startswith(_PID)]
    if done.returncode != 0 or not found or len(found[-1]) != 3:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        _log.warning("no class archive: its session failed (%s)", tail[0])
        partial.unlink(missing_ok=True)
        return None
    pid, written, classpath = found[-1]
    # Step 3
    return archive if publish(Path(written), archive, int(pid), classpath, timeout_s) else None


def _same(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def _workload(spark: SparkSession) -> None:
    """What a pipeline's start runs: a shuffle, Arrow to a Python worker, a stream."""
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


def _executor(marker: str) -> tuple[int, str]:
    """The pid and class path of the executor JVM whose command line names ``marker``."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and any(
            marker in a for a in argv
        ):
            return int(proc.name), argv[argv.index("-cp") + 1]
    raise RuntimeError(f"no executor JVM with {marker} in its command line")


def _exited(pid: int, partial: Path, timeout_s: float = 120.0) -> Path:
    """SIGTERM the executor ``pid`` while its application still runs, wait for its exit
    (it writes its archive as it exits), and move what it wrote aside: stopped with the
    application instead, its worker would SIGKILL it 10 s into that write, and the
    executor the master starts in its place writes to ``partial`` again at its own exit."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    written = partial.with_name(partial.name + ".done")
    if partial.exists():
        os.replace(partial, written)
    return written


def _child(role: str, args: list[str]) -> None:
    settings = Settings.load()
    if role == "driver":
        flags = args
        spark = spark_session(
            settings.with_(spark_master="local[2]"), "flamepipe-class-archive", dump_classes=flags
        )
        jvm: Any = spark.sparkContext._jvm
        pid = jvm.java.lang.ProcessHandle.current().pid()
        classpath = jvm.System.getProperty("java.class.path")
        _workload(spark)
        written = Path(flags[0].split("=", 1)[1])
    else:
        master, flags = args[0], args[1:]
        conf = {"spark.executor.extraJavaOptions": " ".join(flags)}
        spark = spark_session(settings.with_(spark_master=master), "flamepipe-class-archive", conf)
        _workload(spark)
        partial = Path(flags[0].split("=", 1)[1])
        pid, classpath = _executor(str(partial))
        written = _exited(pid, partial)
    spark.stop()
    # The report to the parent (`_build`), on the child's stdout: not a log line.
    sys.stdout.write(f"{_PID}{pid}\t{written}\t{classpath}\n")
    sys.stdout.flush()


def main() -> None:
    """``python -m framework.runners.spark.class_archive``: build it if missing."""
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3:])
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    settings = Settings.load()
    servers = build_server_archives(settings)
    built = [build_driver_archive(settings), build_executor_archive(settings)]
    if None in built or not servers:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
