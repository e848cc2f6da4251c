"""Provide a Kafka + ZooKeeper for tests and tools, in one of three ways.

``FLAMEPIPE_STACK`` chooses:

* ``embedded`` (default): flamepipe's own local stack on free ports in a temporary state
  directory, stopped and deleted afterwards. Needs Java and (once) Maven.
* ``external``: an existing cluster from ``FLAMEPIPE_BOOTSTRAP_SERVERS`` and
  ``FLAMEPIPE_ZOOKEEPER_CONNECT``; nothing is started or stopped.
* ``testcontainers``: Kafka and ZooKeeper containers, where a Docker engine is reachable.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from framework.config import Settings
from framework.errors import ConfigError, StackError
from framework.local.stack import LocalStack

MODES = ("embedded", "external", "testcontainers")
_EXTERNAL = ("FLAMEPIPE_BOOTSTRAP_SERVERS", "FLAMEPIPE_ZOOKEEPER_CONNECT")


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and not handed out before.

    The kernel may give the same ephemeral port to two binds in a row once the first
    socket is closed (CI saw Kafka's and its controller's ports collide), so this process
    never hands out a port twice.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise StackError("no free TCP port on 127.0.0.1 that was not handed out already")


@contextlib.contextmanager
def provision(mode: str | None = None, quiet: bool = True) -> Iterator[Settings]:
    """Yield settings pointing at a running stack; stop what was started on exit."""
    mode = mode or os.environ.get("FLAMEPIPE_STACK", "embedded")
    if mode == "external":
        settings = Settings.load()
        if settings.embedded or settings.zookeeper_connect is None:
            raise ConfigError(
                "FLAMEPIPE_STACK=external needs FLAMEPIPE_BOOTSTRAP_SERVERS and "
                "FLAMEPIPE_ZOOKEEPER_CONNECT"
            )
        yield settings
    elif mode == "embedded":
        with _embedded(quiet) as settings:
            yield settings
    elif mode == "testcontainers":
        with _containers() as settings:
            yield settings
    else:
        raise ConfigError(f"FLAMEPIPE_STACK={mode!r}: use one of {', '.join(MODES)}")


@contextlib.contextmanager
def _embedded(quiet: bool) -> Iterator[Settings]:
    with tempfile.TemporaryDirectory(prefix="flamepipe-stack-") as state:
        # An embedded stack ignores external endpoints that may be set in the environment.
        env = {k: v for k, v in os.environ.items() if k not in _EXTERNAL}
        settings = Settings.load(
            env=env,
            state_dir=Path(state),
            kafka_port=free_port(),
            controller_port=free_port(),
            zookeeper_port=free_port(),
        )
        stack = LocalStack(settings, quiet=quiet)
        try:
            stack.up()
            yield settings
        finally:
            stack.down()


KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.0"
"""testcontainers' Kafka module drives Confluent images (its KRaft mode checks their
version): 7.9 is Kafka 3.9, which has everything flamepipe uses (transactions, KRaft)."""
ZOOKEEPER_IMAGE = "zookeeper:3.9"

# One node: the transaction log and the group offsets need a replication factor of 1.
_SINGLE_NODE = {
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
}


def containers() -> tuple[Any, Any]:
    """The Kafka (KRaft, one node, transactions) and ZooKeeper containers, not started."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:
        try:
            from testcontainers.kafka import KafkaContainer
        except ImportError:
            raise StackError(
                "FLAMEPIPE_STACK=testcontainers needs `pip install flamepipe[testcontainers]`"
            ) from None
    from testcontainers.core.container import DockerContainer

    kafka = KafkaContainer(KAFKA_IMAGE).with_kraft()
    for key, value in _SINGLE_NODE.items():
        kafka.with_env(key, value)
    zookeeper = DockerContainer(ZOOKEEPER_IMAGE).with_exposed_ports(2181)
    zookeeper.with_env("ZOO_4LW_COMMANDS_WHITELIST", "ruok,srvr,stat,mntr")
    return kafka, zookeeper


@contextlib.contextmanager
def _containers() -> Iterator[Settings]:  # pragma: no cover - needs a Docker engine
    kafka_container, zookeeper_container = containers()
    with kafka_container as kafka, zookeeper_container as zk:
        zk_connect = f"{zk.get_container_host_ip()}:{zk.get_exposed_port(2181)}"
        yield Settings.load(
            bootstrap_servers=kafka.get_bootstrap_server(), zookeeper_connect=zk_connect
        )
