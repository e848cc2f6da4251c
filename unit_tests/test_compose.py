"""docker-compose.yml cannot run here; this keeps it consistent with the code instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from framework.cli import _COMMANDS, _parser
from framework.cli.spec import load_pipeline
from framework.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_has_every_service() -> None:
    services = set(_compose()["services"])
    expected = {
        "zookeeper",
        "kafka",
        "spark-master",
        "spark-worker",
        "pipeline",
        "acker",
        "barrier",
    }
    assert expected <= services


def test_host_ports_match_the_embedded_defaults() -> None:
    services = _compose()["services"]
    defaults = Settings.load(env={})
    kafka, zk = defaults.kafka_port, defaults.zookeeper_port
    assert f"127.0.0.1:{kafka}:{kafka}" in services["kafka"]["ports"]
    assert f"127.0.0.1:{zk}:{zk}" in services["zookeeper"]["ports"]
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"HOST://127.0.0.1:{defaults.kafka_port}" in advertised


def test_flamepipe_services_point_at_the_compose_servers() -> None:
    services = _compose()["services"]
    kafka_env = services["kafka"]["environment"]
    for name in ("pipeline", "acker", "barrier", "spark-master", "spark-worker"):
        service = services[name]
        assert service["build"] == "."
        assert service["image"] == "flamepipe:0.1.0"
        env = service["environment"]
        settings = Settings.load(env={k: str(v) for k, v in env.items()})
        host, port = settings.kafka_bootstrap.split(":")
        assert host == "kafka"
        assert f"INTERNAL://kafka:{port}" in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
        assert settings.zookeeper == "zookeeper:2181"
        assert settings.spark_master == "spark://spark-master:7077"
    assert "127.0.0.1:7077:7077" in services["spark-master"]["ports"]
    assert services["spark-worker"]["command"][0] == "spark://spark-master:7077"
    pipeline = Settings.load(
        env={k: str(v) for k, v in services["pipeline"]["environment"].items()}
    )
    assert (pipeline.spark_driver_host, pipeline.spark_driver_bind_address) == (
        "pipeline",
        "0.0.0.0",
    )


def test_every_published_port_is_on_the_loopback_only() -> None:
    for name, service in _compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_flamepipe_commands_parse_and_name_a_real_pipeline() -> None:
    services = _compose()["services"]
    parser = _parser()
    graphs = set()
    for name in ("pipeline", "acker", "barrier"):
        command = services[name]["command"]
        assert command[0] in _COMMANDS, (name, command)
        args = parser.parse_args(command)
        graphs.add(load_pipeline(args.pipeline).graph().name)
    assert len(graphs) == 1  # all three serve the same pipeline
    assert services["pipeline"]["command"][-2:] == ["--services", "external"]


def test_image_is_built_from_the_project() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "openjdk-17" in dockerfile
    assert 'ENTRYPOINT ["flamepipe"]' in dockerfile
    for part in ("framework", "connectors", "schemas", "pyproject.toml"):
        assert f"COPY {part}" in dockerfile or part in dockerfile
