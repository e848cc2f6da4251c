"""`LocalStack.up`'s steps with fake processes: what runs is reused, a taken port fails
before anything starts, ZooKeeper starts and answers before Kafka, and a server that
exits during start-up fails with its log's tail. The real servers:
integration_tests/test_stack_cli.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from framework.config import Settings
from framework.errors import StackError
from framework.local import stack as module

EVENTS: list[str] = []


class _Daemon:
    """A server process that starts at once and lives (``exits``: dies at once)."""

    running: set[str] = set()
    exits: set[str] = set()

    def __init__(self, name: str, state_dir: Path, marker: str) -> None:
        self.name, self.marker = name, marker
        self.log_file = state_dir / f"{name}.log"
        self._alive = name in _Daemon.running

    def start(self, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
        EVENTS.append(f"start {self.name}")
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.write_text(f"{self.name} says: bye\n")
        self._alive = self.name not in _Daemon.exits
        return 4242

    def alive(self) -> bool:
        return self._alive

    def pid(self) -> int | None:
        return 4242 if self._alive else None

    def stop(self, timeout_s: float = 30.0) -> bool:
        EVENTS.append(f"stop {self.name}")
        self._alive = False
        return True


class _Spec:
    """A server's command line, without the files a real spec writes (Kafka's storage
    format runs a JVM of its own)."""

    def __init__(self, *args: object) -> None:
        self.args = args

    def argv(self, *args: object) -> list[str]:
        return ["java", *map(str, args)]


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> module.LocalStack:
    EVENTS.clear()
    _Daemon.running, _Daemon.exits = set(), set()
    monkeypatch.setattr(module, "Daemon", _Daemon)
    monkeypatch.setattr(module, "ZooKeeperSpec", _Spec)
    monkeypatch.setattr(module, "KafkaSpec", _Spec)
    monkeypatch.setattr(module, "java_executable", lambda: "/usr/bin/java")
    monkeypatch.setattr(module, "jar_bundle", lambda *_a: [tmp_path / "kafka.jar"])
    monkeypatch.setattr(module, "pyspark_jars_dir", lambda: tmp_path / "jars")
    monkeypatch.setattr(module, "zookeeper_classpath", lambda _jars: "zk.jar")
    monkeypatch.setattr(module, "port_free", lambda port: True)

    def ready(name: str) -> bool:
        EVENTS.append(f"ready {name}")
        return True

    monkeypatch.setattr(module, "zookeeper_ready", lambda _port: ready("zookeeper"))
    monkeypatch.setattr(module, "kafka_ready", lambda _bootstrap: ready("kafka"))
    settings = Settings(state_dir=tmp_path / "stack", cache_dir=tmp_path / "cache")
    return module.LocalStack(settings, quiet=True)


def test_step_4_zookeeper_starts_and_answers_before_kafka(stack: module.LocalStack) -> None:
    endpoints = stack.up(timeout_s=5)
    assert EVENTS == ["start zookeeper", "ready zookeeper", "start kafka", "ready kafka"]
    assert stack.started == ["zookeeper", "kafka"]
    assert endpoints.bootstrap_servers == stack.settings.kafka_bootstrap


def test_step_2_a_running_server_is_reused(stack: module.LocalStack) -> None:
    stack.kafka._alive = True  # type: ignore[attr-defined]
    stack.up(timeout_s=5)
    assert stack.started == ["zookeeper"]
    assert "start kafka" not in EVENTS and "ready kafka" in EVENTS


def test_step_2_a_taken_port_fails_before_anything_starts(
    stack: module.LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = stack.settings.controller_port
    monkeypatch.setattr(module, "port_free", lambda port: port != taken)
    with pytest.raises(StackError, match=rf"port {taken} on 127.0.0.1 is taken .*kafka_port"):
        stack.up(timeout_s=5)
    assert EVENTS == []


def test_step_4_a_server_that_exits_during_start_up_fails_with_its_log(
    stack: module.LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    _Daemon.exits = {"kafka"}
    monkeypatch.setattr(module, "kafka_ready", lambda _bootstrap: False)
    exited = r"(?s)kafka exited during start-up; last lines of .*kafka says: bye"
    with pytest.raises(StackError, match=exited):
        stack.up(timeout_s=5)
    assert EVENTS[-1] == "stop kafka"
