"""The embedded local stack: ZooKeeper and a Kafka broker on 127.0.0.1, owned by flamepipe.

``up`` protocol:

1. Find Java (fail fast with the fix if missing).
2. For each server, reuse it if our pid file names a live process that answers; else make
   sure its ports are free (fail fast naming the port and the setting to change).
3. Fetch the broker jars once into the cache (Maven), reuse them afterwards.
4. Start ZooKeeper and wait for ``ruok``; start Kafka and wait for a metadata answer. A
   server that exits during start-up fails with the tail of its log.
5. With ``spark_workers`` > 0: start a Spark standalone master on ``spark_master_port`` and
   wait until it accepts connections, then that many workers (one core, 1 GiB, a work
   directory each; their executors run in JVMs of their own) and wait until each has
   registered with the master.
6. With ``registry_port`` > 0: start a schema registry there (`framework.local.apicurio`,
   fetched once from Maven Central) and wait until it lists its subjects.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from framework.config import Settings
from framework.errors import StackError
from framework.local.apicurio import SchemaRegistry
from framework.local.class_archives import archive_path, dump_flags, publish, use_flags
from framework.local.jars import jar_bundle
from framework.local.process import Daemon, log_tail, port_free, wait_for
from framework.local.servers import (
    KafkaSpec,
    SparkMasterSpec,
    SparkWorkerSpec,
    ZooKeeperSpec,
    kafka_ready,
    spark_classpath,
    spark_worker_registered,
    tcp_ready,
    zookeeper_classpath,
    zookeeper_ready,
)
from framework.local.tools import java_executable, pyspark_jars_dir

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """How clients reach a running stack."""

    bootstrap_servers: str
    zookeeper_connect: str


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """One server's state as `flamepipe status` shows it."""

    name: str
    pid: int | None
    port: int
    ready: bool
    log: Path

    def line(self) -> str:
        """A one-line human summary."""
        state = "ready" if self.ready else ("starting" if self.pid else "stopped")
        pid = str(self.pid) if self.pid else "-"
        return f"{self.name:<10} {state:<9} pid={pid:<8} 127.0.0.1:{self.port:<6} log={self.log}"


class LocalStack:
    """Start, inspect and stop the embedded ZooKeeper + Kafka of one state directory."""

    def __init__(
        self,
        settings: Settings,
        quiet: bool = False,
        *,
        kafka_listeners: tuple[tuple[str, str, int], ...] = (),
        kafka_properties: tuple[str, ...] = (),
        dump_classes: bool = False,
    ) -> None:
        """``kafka_listeners`` / ``kafka_properties``: more of the broker's listeners and
        settings (`KafkaSpec`), for tests of secured clients. ``dump_classes``: ZooKeeper
        and Kafka write the class archives they have none of at their exit
        (`build_server_archives`)."""
        self.settings = settings
        self.kafka_listeners = kafka_listeners
        self.kafka_properties = kafka_properties
        self.quiet = quiet
        self.state_dir = settings.state_dir.expanduser().resolve()
        self.zookeeper = Daemon("zookeeper", self.state_dir, f"{self.state_dir}#zookeeper")
        self.kafka = Daemon("kafka", self.state_dir, f"{self.state_dir}#kafka")
        self.spark_master = Daemon("spark-master", self.state_dir, f"{self.state_dir}#spark-master")
        self.registry = (
            SchemaRegistry(self.state_dir, settings.cache_dir, settings.registry_port, quiet)
            if settings.registry_port
            else None
        )
        self.started: list[str] = []
        """The servers the last `up` started (not those it found running)."""
        self.dump_classes = dump_classes
        self.dumps: dict[str, tuple[Path, Path, str]] = {}
        """Per server writing a class archive at its exit: (temporary file, archive, class
        path)."""

    @property
    def endpoints(self) -> Endpoints:
        """Connection strings of this stack."""
        return Endpoints(self.settings.kafka_bootstrap, self.settings.zookeeper)

    def up(self, timeout_s: float = 90.0) -> Endpoints:
        """Start whatever is not running yet (see module docstring); returns the endpoints."""
        s = self.settings
        # Step 1
        java = java_executable()
        # Step 2
        start_zk = not self._reuse(self.zookeeper, [s.zookeeper_port], "zookeeper_port")
        start_kafka = not self._reuse(
            self.kafka, [s.kafka_port, s.controller_port], "kafka_port/controller_port"
        )
        # Step 3
        broker_cp = ":".join(str(j) for j in jar_bundle("kafka-broker", s.cache_dir, self.quiet))
        # Step 4
        if start_zk:
            spec = ZooKeeperSpec(s.zookeeper_port, self.state_dir / "zookeeper")
            self._say(f"starting ZooKeeper on 127.0.0.1:{s.zookeeper_port}")
            self.started.append(self.zookeeper.name)
            jars = pyspark_jars_dir()
            classes = self._classes("zookeeper", zookeeper_classpath(jars))
            self.zookeeper.start(spec.argv(java, jars, 256, self.zookeeper.marker, classes))
        self._await(self.zookeeper, lambda: zookeeper_ready(s.zookeeper_port), timeout_s)
        if start_kafka:
            kspec = KafkaSpec(
                s.kafka_port,
                s.controller_port,
                self.state_dir / "kafka",
                self.kafka_listeners,
                self.kafka_properties,
            )
            self._say(f"starting Kafka on 127.0.0.1:{s.kafka_port}")
            self.started.append(self.kafka.name)
            classes = self._classes("kafka", broker_cp)
            self.kafka.start(
                kspec.argv(java, broker_cp, s.java_heap_mb, self.kafka.marker, classes)
            )
        self._await(self.kafka, lambda: kafka_ready(s.kafka_bootstrap), timeout_s)
        # Step 5
        if s.spark_workers > 0:
            self._spark_up(java, timeout_s)
        # Step 6
        if self.registry is not None:
            if not self.registry.daemon.alive():
                self.started.append(self.registry.daemon.name)
            self.registry.up(timeout_s)
        spark = f" spark={self.master_url}" if s.spark_workers > 0 else ""
        self._say(f"stack ready: kafka={s.kafka_bootstrap} zookeeper={s.zookeeper}{spark}")
        return self.endpoints

    @property
    def master_url(self) -> str:
        """The URL of this stack's Spark standalone master (when it runs one)."""
        return f"spark://127.0.0.1:{self.settings.spark_master_port}"

    def _workers(self, count: int | None = None) -> list[Daemon]:
        """Worker daemons 1..count (None: every one with a pid file, to stop them all)."""
        if count is None:
            count = len(list(self.state_dir.glob("spark-worker-*.pid")))
        return [
            Daemon(f"spark-worker-{i}", self.state_dir, f"{self.state_dir}#spark-worker-{i}")
            for i in range(1, count + 1)
        ]

    def _spark_up(self, java: str, timeout_s: float) -> None:
        s = self.settings
        home = pyspark_jars_dir().parent
        if not self._reuse(self.spark_master, [s.spark_master_port], "spark_master_port"):
            spec = SparkMasterSpec(s.spark_master_port, self.state_dir / "spark-master")
            classes = self._classes("spark-master", spark_classpath(home))
            argv, env = spec.argv(java, home, self.spark_master.marker, classes)
            self._say(f"starting Spark master on 127.0.0.1:{s.spark_master_port}")
            self.started.append(self.spark_master.name)
            self.spark_master.start(argv, env)
        self._await(self.spark_master, lambda: tcp_ready(s.spark_master_port), timeout_s)
        # The same Daemon objects start and await: one that started a process knows its
        # child, while a fresh one reads /proc, which right after fork shows our command.
        workers = self._workers(s.spark_workers)
        for worker in workers:
            if worker.alive():
                continue
            worker.log_file.unlink(missing_ok=True)  # registration is read from the log
            worker_home = self.state_dir / worker.name
            spec_w = SparkWorkerSpec(self.master_url, worker_home, cores=s.spark_worker_cores)
            classes = self._classes("spark-worker", spark_classpath(home))
            argv, env = spec_w.argv(java, home, worker.marker, classes)
            self._say(f"starting {worker.name}")
            self.started.append(worker.name)
            worker.start(argv, env)
        for worker in workers:
            self._await(worker, lambda w=worker: spark_worker_registered(w.log_file), timeout_s)

    def _classes(self, server: str, classpath: str) -> list[str]:
        """The class archive flags of ``server`` (`framework.local.class_archives`): map
        its archive, or, building them, write the one it has none of."""
        archive = archive_path(self.settings.cache_dir, server, [classpath])
        if not self.dump_classes or archive.is_file():
            return use_flags(archive)
        flags, partial = dump_flags(archive)
        self.dumps[server] = (partial, archive, classpath)
        return flags

    def server_pids(self) -> dict[str, int | None]:
        """The pid of each server whose class archive this stack may write (by the name
        `_classes` knows it by; one worker)."""
        workers = self._workers(self.settings.spark_workers)
        return {
            "zookeeper": self.zookeeper.pid(),
            "kafka": self.kafka.pid(),
            "spark-master": self.spark_master.pid(),
            "spark-worker": workers[0].pid() if workers else None,
        }

    def publish_archives(self, pids: dict[str, int | None]) -> None:
        """After `down`: publish the class archives the servers (``pids``: `server_pids`
        before it) wrote as they exited, those that are usable."""
        for server, (partial, archive, classpath) in self.dumps.items():
            pid = pids.get(server)
            if pid is not None:
                publish(partial, archive, pid, classpath)

    def status(self) -> list[ServiceStatus]:
        """State of each server, without changing anything."""
        s = self.settings
        zk_pid, kafka_pid = self.zookeeper.pid(), self.kafka.pid()
        return [
            ServiceStatus(
                "zookeeper",
                zk_pid,
                s.zookeeper_port,
                zk_pid is not None and zookeeper_ready(s.zookeeper_port),
                self.zookeeper.log_file,
            ),
            ServiceStatus(
                "kafka",
                kafka_pid,
                s.kafka_port,
                kafka_pid is not None and kafka_ready(s.kafka_bootstrap, 1.0),
                self.kafka.log_file,
            ),
            *self._spark_status(),
            *self._registry_status(),
        ]

    def _registry_status(self) -> list[ServiceStatus]:
        registry = self.registry or SchemaRegistry(self.state_dir, self.settings.cache_dir, 0)
        pid = registry.daemon.pid()
        if pid is None and self.registry is None:
            return []
        ready = pid is not None and registry.ready()
        return [ServiceStatus("registry", pid, registry.port, ready, registry.daemon.log_file)]

    def _spark_status(self) -> list[ServiceStatus]:
        s = self.settings
        master_pid = self.spark_master.pid()
        if master_pid is None and s.spark_workers == 0:
            return []
        found = [
            ServiceStatus(
                "spark-master",
                master_pid,
                s.spark_master_port,
                master_pid is not None and tcp_ready(s.spark_master_port),
                self.spark_master.log_file,
            )
        ]
        for worker in self._workers(max(s.spark_workers, len(self._workers()))):
            pid = worker.pid()
            registered = pid is not None and spark_worker_registered(worker.log_file)
            found.append(ServiceStatus(worker.name, pid, 0, registered, worker.log_file))
        return found

    def down(self, purge: bool = False) -> None:
        """Stop the Spark workers and master, Kafka, then ZooKeeper; ``purge`` also deletes
        their data."""
        registry = SchemaRegistry(self.state_dir, self.settings.cache_dir, 0).daemon
        for daemon in (registry, *self._workers(), self.spark_master, self.kafka, self.zookeeper):
            if daemon.stop():
                self._say(f"stopped {daemon.name}")
        if purge:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> Endpoints:
        return self.up()

    def __exit__(self, *_exc_info: object) -> None:
        self.down()

    def _reuse(self, daemon: Daemon, ports: list[int], setting: str) -> bool:
        if daemon.alive():
            self._say(f"{daemon.name} already running (pid {daemon.pid()})")
            return True
        first = setting.split("/", maxsplit=1)[0]
        for port in ports:
            if not port_free(port):
                raise StackError(
                    f"port {port} on 127.0.0.1 is taken by another process: stop it, or "
                    f"choose other ports ({setting}, e.g. --{first.replace('_', '-')} <free port> "
                    f"or FLAMEPIPE_{first.upper()}=<free port>)"
                )
        return False

    def _await(self, daemon: Daemon, ready: object, timeout_s: float) -> None:
        assert callable(ready)
        try:
            wait_for(ready, timeout_s, daemon.alive, daemon.name)
        except StackError as exc:
            daemon.stop(timeout_s=5)
            raise StackError(
                f"{exc}; last lines of {daemon.log_file}:\n{log_tail(daemon.log_file)}"
            ) from None

    def _say(self, text: str) -> None:
        if not self.quiet:
            _log.info("%s", text)


@contextlib.contextmanager
def dumping_stack(settings: Settings, spark_workers: int = 0) -> Iterator[LocalStack]:
    """A started stack of its own (a temporary directory, free ports, ``spark_workers``
    one-core workers) whose servers write the class archives they have none of
    (`framework.local.class_archives`); on exit it is stopped (SIGTERM: the servers exit,
    writing them) and what they wrote is published."""
    from framework.local.provision import free_port

    with tempfile.TemporaryDirectory(prefix="flamepipe-class-archive-") as state:
        own = settings.with_(
            state_dir=Path(state),
            kafka_port=free_port(),
            controller_port=free_port(),
            zookeeper_port=free_port(),
            spark_master_port=free_port(),
            spark_workers=spark_workers,
            spark_worker_cores=1,
            registry_port=0,
        )
        stack = LocalStack(own, quiet=True, dump_classes=True)
        pids: dict[str, int | None] = {}
        try:
            stack.up()
            pids = stack.server_pids()
            yield stack
        finally:
            stack.down()
            stack.publish_archives(pids)


def build_server_archives(settings: Settings) -> bool:
    """The class archives of the embedded ZooKeeper and Kafka, built if missing on a
    `dumping_stack`; True if both exist after it."""
    with dumping_stack(settings) as stack:
        pass
    return all(archive.is_file() for _, archive, _ in stack.dumps.values())
