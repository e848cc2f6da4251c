"""The stack's start-up errors are one clear line saying what to do."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from framework.cli import main
from framework.local.provision import free_port


def _args(tmp_path: Path, kafka: int) -> list[str]:
    # Distinct ports: two free_port calls may name the same free port (seen in CI: "ports
    # must differ" instead of the error under test).
    ports = [kafka]
    while len(ports) < 3:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return [
        "up",
        "--state-dir", str(tmp_path / "state"),
        "--kafka-port", str(kafka),
        "--controller-port", str(ports[1]),
        "--zookeeper-port", str(ports[2]),
    ]  # fmt: skip


def test_taken_port_prints_one_line_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        code = main(_args(tmp_path, port))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1
    assert f"port {port} on 127.0.0.1 is taken" in err[0]
    assert "--kafka-port" in err[0]


def test_missing_java_prints_one_line_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    code = main(_args(tmp_path, free_port()))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        "flamepipe: error: Java not found: install a JDK 17+ "
        "(e.g. `apt-get install openjdk-17-jdk-headless`) or set JAVA_HOME"
    ]


def test_missing_maven_is_reported_before_any_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from framework.errors import StackError
    from framework.local.jars import jar_bundle

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StackError, match="Maven not found"):
        jar_bundle("kafka-broker", tmp_path / "empty-cache")


def test_failed_jar_download_shows_maven_output_and_what_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from framework.errors import StackError
    from framework.local.jars import jar_bundle

    fake = tmp_path / "bin"
    fake.mkdir()
    script = "#!/bin/sh\necho '[ERROR] Could not resolve org.apache.kafka'\nexit 1\n"
    (fake / "mvn").write_text(script)
    (fake / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    with pytest.raises(StackError) as failure:
        jar_bundle("kafka-broker", tmp_path / "cache", quiet=True)
    message = str(failure.value)
    assert "downloading the kafka-broker jars failed (mvn exit 1)" in message
    assert "check access to Maven Central" in message
    assert "Could not resolve org.apache.kafka" in message
    assert not list((tmp_path / "cache").glob("jars/*/.complete"))
