"""The testcontainers path builds its containers with the current testcontainers API.

No Docker engine runs here: the Docker client is replaced, so only the containers'
settings are built and checked, exactly as `FLAMEPIPE_STACK=testcontainers` would start them.
"""

from __future__ import annotations

from typing import Any

import pytest

from framework.local.provision import KAFKA_IMAGE, containers, free_port


class _NoDocker:
    def __init__(self, **_kw: Any) -> None:
        pass


def test_the_containers_are_kraft_kafka_with_transactions_and_zookeeper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("testcontainers.core.container.DockerClient", _NoDocker)
    kafka, zookeeper = containers()
    assert kafka.image.endswith(KAFKA_IMAGE)
    assert kafka.kraft_enabled
    assert kafka.env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert kafka.env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    kafka.configure()  # what start() runs first: KRaft settings, without a daemon
    assert kafka.env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "2181" in {str(port).split("/")[0] for port in zookeeper.ports}


def test_free_port_never_hands_out_a_port_twice() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
