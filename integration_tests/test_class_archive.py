"""Class-data archives: built once, then mapped by every JVM of their kind (the Spark
driver; the embedded ZooKeeper and Kafka). The cluster's executors: `test_cluster.py`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from framework.config import Settings
from framework.local.class_archives import archive_path
from framework.local.jars import jar_bundle
from framework.local.provision import free_port
from framework.local.servers import zookeeper_classpath
from framework.local.stack import LocalStack, build_server_archives
from framework.local.tools import pyspark_jars_dir
from framework.runners.spark.class_archive import build_driver_archive
from framework.runners.spark.session import driver_class_archive

_PROBE = """
import sys
from framework.config import Settings
from framework.spark import spark_session
settings = Settings.load().with_(spark_master="local[1]")
spark = spark_session(settings, "class-archive-probe")
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
maps = open(f"/proc/{pid}/maps").read()
spark.stop()
sys.stdout.write("mapped" if sys.argv[1] in maps else "not mapped")
"""


def test_a_built_archive_is_mapped_by_the_next_sessions_jvm() -> None:
    archive = build_driver_archive(Settings.load())  # bootstrap built it already, or now
    assert archive is not None, "the class archive could not be built (see the log)"
    assert archive == driver_class_archive(Settings.load()) and archive.is_file()

    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(archive)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # Mapped, not merely named on the command line: -Xshare:auto would run without it.
    assert done.stdout == "mapped"


def _maps(pid: int | None, archive: Path) -> bool:
    assert pid is not None
    return str(archive) in Path(f"/proc/{pid}/maps").read_text()


def test_the_embedded_servers_map_their_class_archives(tmp_path: Path) -> None:
    assert build_server_archives(Settings.load()), "not built (see the log)"
    settings = Settings.load().with_(
        state_dir=tmp_path,
        kafka_port=free_port(),
        controller_port=free_port(),
        zookeeper_port=free_port(),
    )
    stack = LocalStack(settings, quiet=True)
    try:
        stack.up()
        broker_cp = ":".join(str(j) for j in jar_bundle("kafka-broker", settings.cache_dir))
        zk_cp = zookeeper_classpath(pyspark_jars_dir())
        kafka = archive_path(settings.cache_dir, "kafka", [broker_cp])
        zookeeper = archive_path(settings.cache_dir, "zookeeper", [zk_cp])
        assert _maps(stack.kafka.pid(), kafka)
        assert _maps(stack.zookeeper.pid(), zookeeper)
    finally:
        stack.down()
