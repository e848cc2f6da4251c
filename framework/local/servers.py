"""Configuration and readiness of the embedded servers: ZooKeeper, Kafka (KRaft) and an
optional Spark standalone master with workers, all on 127.0.0.1."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from framework.errors import StackError

_LOG4J2 = """\
status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.kafkalog.name = kafka.log
logger.kafkalog.level = warn
logger.coord.name = org.apache.kafka.coordinator
logger.coord.level = warn
"""


# On a laptop-sized machine the servers share a few cores with Spark and Python: for the
# first minutes of a run the C2 compiler and G1's threads take the CPU the pipeline needs
# (README, "The local stack"). Long runs that want peak throughput set the variable empty.
DEFAULT_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
JVM_FLAGS_VARIABLE = "FLAMEPIPE_JVM_FLAGS"


def local_jvm_flags() -> list[str]:
    """JVM flags of the embedded stack's servers and local Spark driver."""
    return os.environ.get(JVM_FLAGS_VARIABLE, DEFAULT_JVM_FLAGS).split()


def _write_log4j(path: Path, level: str = "info") -> Path:
    path.write_text(_LOG4J2.replace("{level}", level))
    return path


def _jvm(
    java: str,
    heap_mb: int,
    log4j: Path,
    marker: str,
    classpath: str,
    *,
    classes: Sequence[str] = (),
) -> list[str]:
    """``classes``: the flags of its class archive (`framework.local.class_archives`)."""
    return [
        java,
        f"-Xmx{heap_mb}m",
        *local_jvm_flags(),
        *classes,
        "-Djava.net.preferIPv4Stack=true",
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dflamepipe.stack={marker}",
        "-cp",
        classpath,
    ]


def spark_classpath(pyspark_home: Path) -> str:
    """The Spark master's and workers' class path: pyspark's jars."""
    return f"{pyspark_home}/jars/*"


def zookeeper_classpath(jars_dir: Path) -> str:
    """ZooKeeper's class path: pyspark's bundled jars."""
    return f"{jars_dir}/*"


@dataclass(frozen=True, slots=True)
class ZooKeeperSpec:
    """A standalone ZooKeeper on 127.0.0.1, run from pyspark's bundled jars."""

    port: int
    home: Path

    def argv(
        self, java: str, jars_dir: Path, heap_mb: int, marker: str, classes: Sequence[str] = ()
    ) -> list[str]:
        """Write zoo.cfg and return the command that starts the server (``classes``: the
        flags of its class archive)."""
        data = self.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.home / "zoo.cfg"
        cfg.write_text(
            "tickTime=2000\ninitLimit=10\nsyncLimit=5\n"
            f"dataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
            "maxClientCnxns=0\n"
        )
        log4j = _write_log4j(self.home / "log4j2.properties")
        jvm = _jvm(java, heap_mb, log4j, marker, zookeeper_classpath(jars_dir), classes=classes)
        return [*jvm, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)]


@dataclass(frozen=True, slots=True)
class KafkaSpec:
    """A single-node KRaft broker+controller with transactions enabled.

    ``listeners`` adds ``(name, security protocol, port)`` listeners beside PLAINTEXT (a
    SASL or SSL listener for tests of secured clients) and ``extra`` more properties.
    """

    port: int
    controller_port: int
    home: Path
    listeners: tuple[tuple[str, str, int], ...] = ()
    extra: tuple[str, ...] = ()

    def properties(self) -> str:
        """server.properties for one node that is broker and controller at once."""
        more = "".join(f",{name}://127.0.0.1:{port}" for name, _, port in self.listeners)
        protocols = "".join(f",{name}:{protocol}" for name, protocol, _ in self.listeners)
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}{more}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}{more}",
                "controller.listener.names=CONTROLLER",
                f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={self.home / 'data'}",
                "num.partitions=1",
                "auto.create.topics.enable=false",
                # One node: every internal topic has one replica, or transactions never start.
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=4",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=4",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms=2000",
                # A node restarted after kill -9 is fenced until the controller times out
                # the session its previous process left (9 s by default): a broker restart
                # took 12 s to serve again, with these 3 s it takes about 6.
                "broker.session.timeout.ms=3000",
                "broker.heartbeat.interval.ms=500",
                *self.extra,
                "",
            ]
        )

    def argv(
        self, java: str, classpath: str, heap_mb: int, marker: str, classes: Sequence[str] = ()
    ) -> list[str]:
        """Write the config, format storage on first use, return the start command
        (``classes``: the flags of its class archive)."""
        self.home.mkdir(parents=True, exist_ok=True)
        props = self.home / "server.properties"
        props.write_text(self.properties())
        log4j = _write_log4j(self.home / "log4j2.properties")
        jvm = _jvm(java, heap_mb, log4j, marker, classpath, classes=classes)
        if not (self.home / "data" / "meta.properties").exists():
            self._format(jvm, props)
        return [*jvm, "kafka.Kafka", str(props)]

    def _format(self, jvm: list[str], props: Path) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # An id starting with "-" would parse as an option (one start in 64 failed so).
        # Formatting is not what a class archive being built should hold.
        jvm = [a for a in jvm if not a.startswith("-XX:ArchiveClassesAtExit")]
        cmd = [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}"]
        cmd += ["-c", str(props)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise StackError(f"formatting Kafka storage in {self.home} failed:\n{tail}")


def _spark_env(pyspark_home: Path) -> dict[str, str]:
    """Environment of the Spark daemons: everything binds to the loopback address, and the
    executors a worker launches run this Python (with flamepipe importable)."""
    # Spark's launcher builds executor commands and needs the Scala version, which
    # `bin/spark-class` would export: read it from the bundled spark-core jar's name.
    cores = sorted((pyspark_home / "jars").glob("spark-core_*.jar"))
    scala = cores[0].name.split("_")[1].split("-")[0] if cores else "2.13"
    return {
        **os.environ,
        "SPARK_HOME": str(pyspark_home),
        "SPARK_SCALA_VERSION": scala,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }


@dataclass(frozen=True, slots=True)
class SparkMasterSpec:
    """A Spark standalone master on 127.0.0.1, run from pyspark's own jars."""

    port: int
    home: Path

    def argv(
        self, java: str, pyspark_home: Path, marker: str, classes: Sequence[str] = ()
    ) -> tuple[list[str], dict[str, str]]:
        """The command and environment that start the master (web UI on a free port;
        ``classes``: the flags of its class archive)."""
        self.home.mkdir(parents=True, exist_ok=True)
        log4j = _write_log4j(self.home / "log4j2.properties", "warn")
        jvm = _jvm(java, 256, log4j, marker, spark_classpath(pyspark_home), classes=classes)
        # No REST submission server: jobs come from flamepipe's driver, and an open
        # submission port would run whatever anyone on this host sends it.
        jvm.insert(1, "-Dspark.master.rest.enabled=false")
        master = "org.apache.spark.deploy.master.Master"
        args = ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0"]
        return [*jvm, master, *args], _spark_env(pyspark_home)

    @property
    def url(self) -> str:
        """The master URL workers and drivers connect to."""
        return f"spark://127.0.0.1:{self.port}"


@dataclass(frozen=True, slots=True)
class SparkWorkerSpec:
    """One Spark standalone worker: its executors run in JVMs of their own, in ``home``."""

    master_url: str
    home: Path
    cores: int = 1
    memory_mb: int = 1024

    def argv(
        self, java: str, pyspark_home: Path, marker: str, classes: Sequence[str] = ()
    ) -> tuple[list[str], dict[str, str]]:
        """The command and environment that start the worker (``classes``: the flags of
        its class archive)."""
        work = self.home / "work"
        work.mkdir(parents=True, exist_ok=True)
        log4j = _write_log4j(self.home / "log4j2.properties", "info")
        jvm = _jvm(java, 256, log4j, marker, spark_classpath(pyspark_home), classes=classes)
        args = [self.master_url, "--host", "127.0.0.1", "--webui-port", "0"]
        args += ["--cores", str(self.cores), "--memory", f"{self.memory_mb}m"]
        args += ["--work-dir", str(work)]
        return [*jvm, "org.apache.spark.deploy.worker.Worker", *args], _spark_env(pyspark_home)


def tcp_ready(port: int, timeout_s: float = 1.0) -> bool:
    """True if something accepts connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def spark_worker_registered(log_file: Path) -> bool:
    """True once the worker's log says the master accepted it."""
    try:
        return "Successfully registered with master" in log_file.read_text(errors="replace")
    except FileNotFoundError:
        return False


def zookeeper_ready(port: int, timeout_s: float = 1.0) -> bool:
    """True if ZooKeeper on 127.0.0.1:port answers ``ruok`` with ``imok``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


def kafka_ready(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """True if the broker answers a metadata request and lists itself."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception:  # KafkaException while the broker is still starting
        return False
    return len(meta.brokers) > 0
