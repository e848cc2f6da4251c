"""Errors a person can act on: a broker that dies during start-up is reported with the tail
of its log; an address nobody serves is one line within seconds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.config import Settings
from framework.errors import StackError
from framework.local.process import port_free
from framework.local.provision import free_port
from framework.local.stack import LocalStack


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


def _flamepipe(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, float]:
    """Run the CLI as a user would; returns its exit status, stderr and seconds taken."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "framework.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FLAMEPIPE_STATE_DIR": str(tmp_path / "state"), **(env or {})},
        check=False,
    )
    return proc.returncode, proc.stderr + proc.stdout, time.monotonic() - started


def test_an_unreachable_broker_is_one_line_within_seconds(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    code, output, seconds = _flamepipe(tmp_path, "consume", "pairs", "--bootstrap", address)
    assert code == 2
    assert seconds < 10  # the client alone retried for 30 s and logged 1 168 lines
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert address in lines[0] and "Connection refused" in lines[0]
    assert "bootstrap_servers" in lines[0]
    # librdkafka's own lines went to the log file, not the console.
    assert "%3|" not in output and "FAIL" not in output


def test_an_unreachable_zookeeper_is_one_line_within_seconds(tmp_path: Path) -> None:
    (tmp_path / "jobs.py").write_text(
        "from connectors import KafkaSink, KafkaSource\n"
        "from framework import Pipeline\n"
        "p = Pipeline('nozk')\n"
        "p.source(KafkaSource('in')).sink(KafkaSink('out'))\n"
    )
    zk = f"127.0.0.1:{free_port()}"
    code, output, seconds = _flamepipe(
        tmp_path,
        "barrier",
        "jobs:p",
        env={
            "PYTHONPATH": str(tmp_path),
            "FLAMEPIPE_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
            "FLAMEPIPE_ZOOKEEPER_CONNECT": zk,
        },
    )
    assert code == 2, output
    assert seconds < 15
    # The barrier process's page is announced first; then one error line, nothing else.
    lines = [line for line in output.strip().splitlines() if "pipeline page" not in line]
    assert len(lines) == 1, output
    assert zk in lines[0] and "zookeeper_connect" in lines[0]
