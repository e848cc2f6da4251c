"""A broker that dies during start-up is reported with the tail of its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.config import Settings
from framework.errors import StackError
from framework.local import LocalStack
from framework.local.process import port_free
from framework.local.provision import free_port


def test_broker_dying_on_start_shows_its_log(tmp_path: Path) -> None:
    ports = [free_port(), free_port(), free_port()]
    settings = Settings.load(
        env={},
        state_dir=tmp_path / "state",
        kafka_port=ports[0],
        controller_port=ports[1],
        zookeeper_port=ports[2],
    )
    formatted = LocalStack(settings, quiet=True)  # format the storage once, as a user would
    formatted.up()
    formatted.down()
    # "Invalid maximum heap size": the broker's JVM exits at once.
    stack = LocalStack(settings.with_(java_heap_mb=2**50), quiet=True)
    try:
        with pytest.raises(StackError) as failure:
            stack.up(timeout_s=60)
    finally:
        stack.down()
    message = str(failure.value)
    assert "kafka exited during start-up" in message
    assert "last lines of" in message and "kafka.log" in message
    assert "heap" in message.lower()
    assert all(port_free(p) for p in ports)
