"""`framework.kafka.admin`: no broker answering is an outage, asked again while it lasts."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from framework.errors import ConfigError, KafkaClientError, KafkaUnreachable
from framework.kafka import admin


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_no_broker_answering_is_an_outage_with_the_fix_not_a_configuration_error() -> None:
    bootstrap = f"127.0.0.1:{_free_port()}"
    with pytest.raises(KafkaUnreachable, match=r"cannot reach Kafka at .*bootstrap_servers") as e:
        admin.check_reachable(bootstrap)
    assert isinstance(e.value, KafkaClientError) and not isinstance(e.value, ConfigError)


def test_a_question_waits_for_a_broker_that_comes_back() -> None:
    """A broker restarting refuses connections for seconds; what a task asks meanwhile is
    asked again until it answers, not failed at the first refusal."""
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def come_back() -> None:
        time.sleep(0.5)
        server.bind(("127.0.0.1", port))
        server.listen()

    admin._reached.add(bootstrap)  # reached before: the broker restarts
    threading.Thread(target=come_back, daemon=True).start()
    asked: list[float] = []

    def ask() -> str:
        asked.append(time.monotonic())
        admin.check_reachable(bootstrap)  # what making a new admin client does first
        return "answered"

    try:
        assert admin._ask(bootstrap, "describe a topic", ask) == "answered"
    finally:
        server.close()
    assert len(asked) > 1  # refused first, asked again


def test_an_address_never_reached_fails_at_once() -> None:
    """A typo in the bootstrap is one line within seconds, not a wait for the deadline."""
    bootstrap = f"127.0.0.1:{_free_port()}"
    asked: list[float] = []

    def ask() -> str:
        asked.append(time.monotonic())
        admin.check_reachable(bootstrap)
        return "answered"

    with pytest.raises(KafkaUnreachable):
        admin._ask(bootstrap, "describe a topic", ask)
    assert len(asked) == 1
