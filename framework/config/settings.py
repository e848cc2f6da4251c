"""The one settings object of flamepipe."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from framework.config.loader import ENV_PREFIX, load_dataclass
from framework.errors import ConfigError

STATE_BACKENDS = ("memory", "file", "rocksdb")
EXECUTIONS = ("micro-batch", "continuous")
"""How stages run (`Settings.execution`)."""
TASK_LAYOUTS = ("auto", "per-stage", "shared")
"""How continuous stages take Spark's task slots (`Settings.continuous_tasks`)."""
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
"""Values of ``state_backend``: where operation state snapshots are kept."""

_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://.+|yarn|k8s://.+|mesos://.+)$")


# "hdfs://x" as a Path becomes "hdfs:/x", so a URI is recognised in either spelling.
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")
_CHECKPOINT = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+://\S+|[^:\s].*)$")


def _home() -> Path:
    return Path(os.environ.get("FLAMEPIPE_HOME", "~/.flamepipe")).expanduser()


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "~/.cache")
    return Path(base).expanduser() / "flamepipe"


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the stack is and how pipelines run.

    ``bootstrap_servers`` / ``zookeeper_connect`` point at an existing cluster; left unset,
    flamepipe uses the embedded local stack on ``kafka_port`` / ``zookeeper_port``.
    ``spark_master`` is where stages run (``local[*]``, ``spark://host:port``, ...);
    ``spark_driver_host`` the address executors reach the driver at and
    ``spark_driver_bind_address`` the one it listens on (unset: 127.0.0.1 for a local
    master or a master on the loopback address, else this host's routable address and
    all interfaces; `framework.runners.spark.session.driver_addresses`).
    ``spark_workers`` > 0 makes the embedded stack start a Spark standalone master on
    ``spark_master_port`` and that many workers (``flamepipe up --spark-workers N``), each
    offering ``spark_worker_cores`` task slots (``--spark-worker-cores``; a slot is a
    thread, so a worker may offer more than the machine's cores: continuous stages hold
    one per long-running task, which mostly waits on Kafka).
    ``registry_port`` > 0 makes it start a schema registry there too (Apicurio Registry's
    Confluent API, `framework.local.apicurio`; ``flamepipe up --registry-port 8081``).
    ``parallelism`` is the partition count of the topics between stages (the hash units of
    groupings); ``acker_shards`` the partitions of the acks topic; ``trigger_ms`` Spark's
    micro-batch interval; ``heartbeat_ms`` how often fronts heartbeat; ``front_lag_ms`` the
    longest a source record may take from its LogAppendTime to being readable (broker
    pauses, replication): an idle source partition heartbeats that far behind the clock,
    so it adds up to that much latency to the last records before a pause;
    ``max_batch_records`` caps the records a stage reads per micro-batch; ``fail_fast`` fails
    the run on the first bad record instead of sending it to the dead-letter topic.
    ``fuse_stages`` runs a source stage and the keyed stage it alone feeds as one Spark
    query, a Spark shuffle instead of a Kafka topic between them (one micro-batch less on
    the path: docs/decisions/fused-stages.md); a pipeline switches only in a new epoch.
    ``columnar`` runs a source stage's chain of stateless operations on columns of items
    (`framework.plan.columnar`; the same output, less work per item; on by default).
    ``execution``: ``continuous`` (the default) runs every stage as long-running Spark
    tasks, one per input partition, each polling Kafka and committing a transaction
    whenever it has something to commit (`framework.runners.spark.continuous`; task slots
    checked at the start); ``micro-batch`` as a Spark streaming query; a pipeline switches
    only in a new epoch. ``commit_interval_ms``: the least time
    between two commits of a continuous task (each is a Kafka transaction, whose cost
    falls on the broker); input that arrives meanwhile waits for the next one.
    ``continuous_tasks``: ``per-stage`` gives every stage's partition a task (and a slot)
    of its own; ``shared`` runs partition ``i`` of every stage in task ``i``, taking turns
    in one Python worker (as many slots as the widest stage has partitions); ``auto``
    (the default) is per-stage when Spark has the slots for it, else shared.
    ``state_backend`` keeps state snapshots in memory, files or RocksDB (see
    ``framework.snapshots.backends``) under ``snapshot_dir`` (default ``<state_dir>/snapshots``);
    ``snapshot_interval_ms`` is how often the acker asks for a snapshot;
    ``secret`` / ``secret_file``: the pipeline's keys, which authenticate every record it
    writes (`framework.config.secrets`; default: ``<state_dir>/pipeline.key``, made once);
    ``kafka_config_file``: Kafka client properties (SASL, SSL) every client gets
    (`framework.config.kafka_properties`);
    ``checkpoint_uri`` where Spark checkpoints live: a directory or a Hadoop URI
    (``hdfs://...``, ``s3a://...``; default ``<state_dir>/apps``). A driver that may restart
    on another host needs both on shared storage (a shared mount for ``snapshot_dir``);

    ``log_level`` is the least level of flamepipe's lines on the console (DEBUG, INFO,
    WARNING, ERROR); ``log_json`` writes ``<state_dir>/logs/flamepipe.log`` as JSON lines;
    ``verbose`` also shows the client libraries' lines (librdkafka, kazoo) and Spark's
    warnings on the console, which otherwise go to the log files only (`framework.logs`).
    ``trim_interval_ms``: how often the driver trims internal topics below what their
    readers may still read (0: never; `framework.operations.hygiene`).
    ``ui``: every pipeline process (driver, ``flamepipe acker``, ``flamepipe barrier``)
    serves its live page and Prometheus metrics on ``ui_host:ui_port`` (0: a free port,
    logged at start; `framework.runners.observe`).

    ``stall_timeout_ms``: a min time that does not advance that long (lost acks) starts a
    recovery, a new epoch from the last snapshot. ``stuck_batch_ms``: a stage's micro-batch
    that runs that long is cancelled and its query restarted (a Kafka client stuck after a
    broker crash; `framework.runners.spark.supervision`): keep it well above the longest
    batch a backlog makes. ``startup_wait_ms``: how long a driver waits for Kafka and
    ZooKeeper to answer, and tries a start they fail again, before it gives up
    (`framework.runners.startup`; 0: not at all). ``max_future_ms``: a heartbeat further
    ahead of the broker's clock is refused by the acker, never applied.
    """

    bootstrap_servers: str | None = None
    zookeeper_connect: str | None = None
    spark_master: str = "local[*]"
    spark_driver_host: str | None = None
    spark_driver_bind_address: str | None = None
    spark_workers: int = 0
    spark_worker_cores: int = 1
    spark_master_port: int = 7077
    registry_port: int = 0
    kafka_port: int = 9092
    controller_port: int = 9093
    zookeeper_port: int = 2181
    state_dir: Path = field(default_factory=lambda: _home() / "stack")
    cache_dir: Path = field(default_factory=_cache)
    java_heap_mb: int = 512
    parallelism: int = 4
    acker_shards: int = 2
    trigger_ms: int = 0
    heartbeat_ms: int = 50
    front_lag_ms: int = 250
    max_batch_records: int = 100_000
    fail_fast: bool = False
    fuse_stages: bool = False
    columnar: bool = True
    execution: str = "continuous"
    commit_interval_ms: int = 20
    continuous_tasks: str = "auto"
    state_backend: str = "file"
    snapshot_dir: Path | None = None
    checkpoint_uri: str | None = None
    secret_file: Path | None = None
    kafka_config_file: Path | None = None
    secret: str | None = field(default=None, repr=False)
    snapshot_interval_ms: int = 1000
    stall_timeout_ms: int = 120_000
    stuck_batch_ms: int = 60_000
    startup_wait_ms: int = 120_000
    max_future_ms: int = 60_000
    log_level: str = "INFO"
    log_json: bool = False
    verbose: bool = False
    ui: bool = True
    trim_interval_ms: int = 30_000
    ui_host: str = "127.0.0.1"
    ui_port: int = 0

    def __post_init__(self) -> None:
        self._validate()

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Settings:
        """Defaults < TOML file (``FLAMEPIPE_CONFIG`` if no path) < environment < overrides."""
        env = os.environ if env is None else env
        path = path or env.get(ENV_PREFIX + "CONFIG") or None
        return load_dataclass(cls, path, env, overrides)

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    @property
    def embedded(self) -> bool:
        """True when flamepipe starts and owns Kafka and ZooKeeper itself."""
        return self.bootstrap_servers is None

    @property
    def kafka_bootstrap(self) -> str:
        """Bootstrap servers to connect to, external or embedded."""
        return self.bootstrap_servers or f"127.0.0.1:{self.kafka_port}"

    @property
    def zookeeper(self) -> str:
        """ZooKeeper connect string, external or embedded."""
        return self.zookeeper_connect or f"127.0.0.1:{self.zookeeper_port}"

    @property
    def snapshot_path(self) -> Path:
        """Directory of state snapshots: ``snapshot_dir``, or ``<state_dir>/snapshots``."""
        return self.snapshot_dir or self.state_dir / "snapshots"

    def _validate(self) -> None:
        """Every field against its declared check (`_PORTS`, `_LEAST`, `_ONE_OF`), then the
        rules that tie fields together; the first failure is a `ConfigError` in one line."""
        for name, least in _PORTS.items():
            port = getattr(self, name)
            if not least <= port <= 65535:
                raise ConfigError(
                    f"{name}={port} is not a TCP port: use {least}..65535{_env(name)}"
                )
        for name, (least, note) in _LEAST.items():
            if getattr(self, name) < least:
                raise ConfigError(
                    f"{name}={getattr(self, name)} must be >= {least}{note}{_env(name)}"
                )
        for name, (choices, what) in _ONE_OF.items():
            value = getattr(self, name)
            if (value.upper() if name == "log_level" else value) not in choices:
                raise ConfigError(
                    f"{name}={value!r} is not {what}: use one of {', '.join(choices)}{_env(name)}"
                )
        self._validate_together()

    def _validate_together(self) -> None:
        stack = {name: getattr(self, name) for name in _STACK_PORTS}
        if len(set(stack.values())) != len(stack):
            raise ConfigError(f"ports must differ, got {stack}: give each its own port")
        if not _MASTER.match(self.spark_master):
            raise ConfigError(
                f"spark_master={self.spark_master!r} is not a Spark master URL: "
                "use local[*], local[N], spark://host:port, yarn or k8s://..."
            )
        if self.execution == "continuous" and self.fuse_stages:
            raise ConfigError(
                "fuse_stages runs micro-batches only: unset FLAMEPIPE_FUSE_STAGES or use "
                "FLAMEPIPE_EXECUTION=micro-batch"
            )
        for name in ("state_dir", "snapshot_dir"):
            value = getattr(self, name)
            if value is not None and _URI.match(str(value)):
                raise ConfigError(
                    f"{name}={str(value)!r} is a URI, not a directory: give a local path or a "
                    "shared mount (only checkpoint_uri takes hdfs://, s3a://, ... URIs)"
                )
        if self.checkpoint_uri is not None and not _CHECKPOINT.match(self.checkpoint_uri):
            raise ConfigError(
                f"checkpoint_uri={self.checkpoint_uri!r} is neither a directory nor a URI "
                "like hdfs://namenode:8020/flamepipe or s3a://bucket/flamepipe"
            )
        if self.zookeeper_connect is not None and self.bootstrap_servers is None:
            raise ConfigError(
                "zookeeper_connect is set but bootstrap_servers is not: an external cluster "
                "needs both (FLAMEPIPE_BOOTSTRAP_SERVERS and FLAMEPIPE_ZOOKEEPER_CONNECT)"
            )


def _env(name: str) -> str:
    return f" ({ENV_PREFIX}{name.upper()})"


# The checks of single fields, declared once: `Settings._validate` runs them in order.
_STACK_PORTS = ("kafka_port", "controller_port", "zookeeper_port")
_PORTS = {
    **dict.fromkeys(_STACK_PORTS, 1),
    "spark_master_port": 1,
    "ui_port": 0,  # 0: any free port
    "registry_port": 0,  # 0: no schema registry
}
"""field -> the least port it takes."""
_LEAST: dict[str, tuple[int, str]] = {
    "parallelism": (1, ""),
    "acker_shards": (1, ""),
    "heartbeat_ms": (1, ""),
    "front_lag_ms": (0, ""),
    "commit_interval_ms": (0, ""),
    "max_batch_records": (1, ""),
    "snapshot_interval_ms": (1, ""),
    "stall_timeout_ms": (1000, ""),
    "stuck_batch_ms": (1000, ""),
    "startup_wait_ms": (0, " (0: do not wait)"),
    "max_future_ms": (0, ""),
    "trigger_ms": (0, " (0: run batches back to back)"),
    "trim_interval_ms": (0, " (0: never)"),
    "spark_workers": (0, " (0: none)"),
    "spark_worker_cores": (1, ""),
    "java_heap_mb": (128, ""),
}
"""field -> (its least value, what that least value means)."""
_ONE_OF: dict[str, tuple[tuple[str, ...], str]] = {
    "execution": (EXECUTIONS, "an execution mode"),
    "continuous_tasks": (TASK_LAYOUTS, "a task layout"),
    "state_backend": (STATE_BACKENDS, "a state backend"),
    "log_level": (_LOG_LEVELS, "a level"),
}
"""field -> (the values it takes, what they are)."""
