"""docker/stack_entry.py: the test stack image reads the official images' environment."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _entry() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stack_entry", ROOT / "docker" / "stack_entry.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kafka_variables_become_the_properties_the_apache_image_makes() -> None:
    props = _entry().kafka_properties(
        {
            "KAFKA_NODE_ID": "1",
            "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_HEAP_OPTS": "-Xmx1g",  # a JVM option, not a property
            "PATH": "/usr/bin",
        }
    )
    assert props == {
        "node.id": "1",
        "log.dirs": "/var/lib/kafka/data",
        "offsets.topic.replication.factor": "1",
    }


def test_the_compose_files_kafka_settings_are_complete_properties() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    props = _entry().kafka_properties(compose["services"]["kafka"]["environment"])
    for key in ("process.roles", "controller.quorum.voters", "listeners", "log.dirs"):
        assert key in props, key
    assert props["advertised.listeners"].startswith("HOST://127.0.0.1:9092")
