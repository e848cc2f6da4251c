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

from framework.config import Settings
from framework.errors import ConfigError, StackError
from framework.local.stack import LocalStack

__all__ = ["free_port", "provision"]

MODES = ("embedded", "external", "testcontainers")
_EXTERNAL = ("FLAMEPIPE_BOOTSTRAP_SERVERS", "FLAMEPIPE_ZOOKEEPER_CONNECT")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


@contextlib.contextmanager
def _containers() -> Iterator[Settings]:  # pragma: no cover - needs a Docker engine
    try:
        from testcontainers.core.container import DockerContainer
        from testcontainers.kafka import KafkaContainer
    except ImportError:
        raise StackError(
            "FLAMEPIPE_STACK=testcontainers needs `pip install flamepipe[testcontainers]`"
        ) from None
    with (
        KafkaContainer("apache/kafka:4.1.1").with_kraft() as kafka,
        DockerContainer("zookeeper:3.9").with_exposed_ports(2181) as zk,
    ):
        zk_connect = f"{zk.get_container_host_ip()}:{zk.get_exposed_port(2181)}"
        yield Settings.load(
            bootstrap_servers=kafka.get_bootstrap_server(), zookeeper_connect=zk_connect
        )
