"""A driver started while the cluster is down waits for it, bounded, with progress lines."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from framework.config import Settings
from framework.deadline import Deadline
from framework.errors import ConfigError, Fenced, KafkaClientError
from framework.local.provision import free_port
from framework.runners import startup


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "_PROBE_S", 0.05)
    monkeypatch.setattr(startup, "PROGRESS_S", 0.1)
    monkeypatch.setattr(startup, "START_PAUSE_S", 0.05)


def _settings(kafka: int, zookeeper: int, wait_ms: int) -> Settings:
    return Settings(
        bootstrap_servers=f"127.0.0.1:{kafka}",
        zookeeper_connect=f"127.0.0.1:{zookeeper}/flamepipe",
        startup_wait_ms=wait_ms,
    )


class _Listener:
    """A TCP port that starts accepting after ``delay_s`` (a server coming back)."""

    def __init__(self, port: int, delay_s: float) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.timer = threading.Timer(delay_s, self._open)
        self.timer.start()

    def _open(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(8)
        self.sock = sock

    def close(self) -> None:
        self.timer.cancel()
        if self.sock is not None:
            self.sock.close()


@pytest.fixture
def servers() -> Iterator[list[_Listener]]:
    opened: list[_Listener] = []
    yield opened
    for listener in opened:
        listener.close()


def test_nothing_there_fails_after_the_wait_naming_both(fast: None) -> None:
    settings = _settings(free_port(), free_port(), wait_ms=300)
    began = time.monotonic()
    with pytest.raises(ConfigError) as raised:
        startup.await_cluster(settings)
    assert 0.3 <= time.monotonic() - began < 10
    text = str(raised.value)
    assert "cannot reach Kafka at 127.0.0.1:" in text and "cannot reach ZooKeeper" in text
    assert "startup_wait_ms=300" in text and "FLAMEPIPE_BOOTSTRAP_SERVERS" in text


def test_a_cluster_that_comes_back_is_waited_for_with_progress_lines(
    fast: None, servers: list[_Listener], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="framework.runners.startup")
    kafka, zookeeper = free_port(), free_port()
    servers += [_Listener(kafka, 0.4), _Listener(zookeeper, 0.1)]
    startup.await_cluster(_settings(kafka, zookeeper, wait_ms=20_000))
    assert "waiting for the cluster" in caplog.text and "cannot reach Kafka" in caplog.text
    assert "the cluster answers after" in caplog.text


def test_a_start_the_cluster_fails_is_tried_again_within_the_wait(
    fast: None, servers: list[_Listener]
) -> None:
    kafka, zookeeper = free_port(), free_port()
    servers += [_Listener(kafka, 0.0), _Listener(zookeeper, 0.0)]
    time.sleep(0.2)
    calls: list[int] = []

    def start() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaClientError("no leader for the partition yet")
        return "running"

    assert startup.start_retrying(_settings(kafka, zookeeper, 20_000), start) == "running"
    assert len(calls) == 3


def test_a_fencing_or_a_spent_wait_is_raised_at_once(fast: None, servers: list[_Listener]) -> None:
    kafka, zookeeper = free_port(), free_port()
    servers += [_Listener(kafka, 0.0), _Listener(zookeeper, 0.0)]
    time.sleep(0.2)

    def fenced() -> None:
        raise Fenced("a successor leads")

    with pytest.raises(Fenced):
        startup.start_retrying(_settings(kafka, zookeeper, 20_000), fenced)

    def failing() -> None:
        raise KafkaClientError("still starting")

    with pytest.raises(KafkaClientError):
        startup.start_retrying(_settings(kafka, zookeeper, 0), failing)
    assert Deadline(0).expired
