"""The one SparkSession factory: adds Spark's Kafka connector jars and sane local defaults."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.config import Settings
from framework.local.class_archives import archive_path, use_flags
from framework.local.jars import NIO_LOCAL_FS, flamepipe_jar, jar_bundle
from framework.local.servers import local_jvm_flags
from framework.local.tools import pyspark_jars_dir
from framework.logs import spark_log4j_options
from framework.runners.spark.continuous import held_slots
from framework.runners.spark.warmup import warm_workers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _embedded_cluster(master: str) -> bool:
    return any(master.startswith(f"spark://{host}") for host in _LOOPBACK)


def driver_addresses(settings: Settings) -> tuple[str, str]:
    """``(advertised host, bind address)`` of the Spark driver.

    The settings decide when given. Otherwise a local master, or a standalone master on
    the loopback address (the embedded cluster), keeps everything on 127.0.0.1; any other
    master gets this host's routable address, bound on all interfaces, so executors on
    other hosts or in containers can connect back.
    """
    master = settings.spark_master
    local = master.startswith("local") or any(
        master.startswith(f"spark://{host}") for host in _LOOPBACK
    )
    host = settings.spark_driver_host or ("127.0.0.1" if local else routable_address())
    bind = settings.spark_driver_bind_address or ("127.0.0.1" if local else "0.0.0.0")
    return host, bind


def routable_address() -> str:
    """The address this host's default route leaves from (no packet is sent); the host
    name's address if there is no route."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        address: str = s.getsockname()[0]
        return address
    return socket.gethostbyname(socket.gethostname())


def driver_class_archive(settings: Settings) -> Path:
    """Where the driver JVM's class-data archive lives (`framework.local.class_archives`):
    one per JDK, pyspark and jar set, built by `framework.runners.spark.class_archive`."""
    import pyspark

    own = flamepipe_jar(settings.cache_dir)
    jars = [*jar_bundle("spark-kafka", settings.cache_dir), own]
    inputs = [pyspark.__version__, str(pyspark_jars_dir()), *map(str, jars)]
    return archive_path(settings.cache_dir, "spark-driver", inputs)


def executor_class_archive(settings: Settings) -> Path:
    """Where the class-data archive of the embedded cluster's executors lives (their class
    path: pyspark's jars and flamepipe's own); built by
    `framework.runners.spark.class_archive`."""
    import pyspark

    inputs = [pyspark.__version__, str(pyspark_jars_dir()), str(flamepipe_jar(settings.cache_dir))]
    return archive_path(settings.cache_dir, "spark-executor", inputs)


def spark_session(
    settings: Settings,
    app_name: str = "flamepipe",
    extra_conf: dict[str, Any] | None = None,
    *,
    dump_classes: list[str] | None = None,
) -> SparkSession:
    """A SparkSession on ``settings.spark_master`` with the Kafka connector on its classpath.

    The connector jars come from the jar cache (fetched with Maven on first use), with
    flamepipe's own (its local file system, built on first use). Spark's
    Python workers run the same interpreter as the driver so user functions import alike.
    The driver JVM maps its class-data archive when one was built (a start 1.8x faster,
    `framework.local.class_archives`); ``dump_classes`` are the flags that build it
    instead (`framework.runners.spark.class_archive`).
    """
    from pyspark.sql import SparkSession

    own = flamepipe_jar(settings.cache_dir)
    jars = [*jar_bundle("spark-kafka", settings.cache_dir), own]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf: dict[str, Any] = {
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # Small stages on few cores: 200 shuffle partitions would be pure scheduling cost.
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Executor JVM <-> Python worker over a Unix domain socket, not TCP: over TCP a
        # mapInArrow task waited 40 ms for its first Arrow batch (Nagle against delayed
        # ACKs), in every micro-batch of every stage; over the socket 0.1-5 ms
        # (docs/latency.md, "Against the peers: the micro-batch's fixed costs").
        "spark.python.unix.domain.socket.enabled": "true",
        # Workers forked from a daemon that already imported the stage tasks' modules
        # (`framework.runners.spark.daemon`).
        "spark.python.daemon.module": "framework.runners.spark.daemon",
        # Checkpoints live on the driver's local disk (settings.state_dir), where a rename is
        # atomic: the FileSystem-based manager writes the offset and commit logs of every
        # micro-batch in 24 and 42 ms instead of the FileContext-based default's 89 and
        # 100 ms (p50, 1k records/s, 2 cores; docs/latency.md).
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager"
        ),
        # Hadoop's default local file system sets the permissions of every file it creates
        # by forking `chmod` (no native Hadoop library here), twice per file with its .crc
        # twin: four process spawns per micro-batch from the driver JVM (14 ms per log
        # write at p50). flamepipe's local file system sets them through java.nio and is
        # still a LocalFileSystem, which the RocksDB state store of any other Spark query
        # in the session casts it to (the raw local file system broke those queries).
        "spark.hadoop.fs.file.impl": NIO_LOCAL_FS,
        # On the class path from the start: spark-submit opens local files through Hadoop
        # before it adds spark.jars. Executors on this host take it from the same path,
        # executors elsewhere from spark.jars (their task class loader).
        "spark.driver.extraClassPath": str(own),
        "spark.executor.extraClassPath": str(own),
    }
    # The driver's JVM log goes to <state_dir>/logs/spark-driver.log (framework.logs).
    flags = spark_log4j_options(settings.state_dir, settings.verbose)
    if settings.spark_master.startswith("local"):
        flags += local_jvm_flags()
    flags += dump_classes if dump_classes is not None else use_flags(driver_class_archive(settings))
    if _embedded_cluster(settings.spark_master):
        # Executors of this host's own standalone cluster (`framework.local.stack`) share
        # its JDK and jars: theirs maps too (a JVM for which it does not fits runs without).
        executor_flags = use_flags(executor_class_archive(settings))
        if executor_flags:
            conf["spark.executor.extraJavaOptions"] = " ".join(executor_flags)
    conf["spark.driver.extraJavaOptions"] = " ".join(flags)
    host, bind = driver_addresses(settings)
    conf["spark.driver.host"], conf["spark.driver.bindAddress"] = host, bind
    conf.update(extra_conf or {})
    builder = SparkSession.builder.master(settings.spark_master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    # Python workers start while the driver prepares the pipeline, not in its first tasks
    # (`framework.runners.spark.warmup`: the measurement).
    # Not when running continuous stages hold task slots (a session made again): the job
    # would wait for a slot that frees only when they stop.
    if not held_slots(session):
        warm_workers(session, plain=settings.execution == "continuous")
    return session
