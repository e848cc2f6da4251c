"""Kafka client properties: merged under flamepipe's own, translated for Spark, redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.config import Settings
from framework.config.kafka_properties import kafka_properties
from framework.errors import ConfigError
from framework.kafka import security
from framework.kafka.acls import acl_commands, pipeline_acls


def test_installed_properties_sit_under_flamepipes_own() -> None:
    security.install({"security.protocol": "SSL", "isolation.level": "read_uncommitted"})
    try:
        merged = security.secured({"bootstrap.servers": "b:1", "isolation.level": "read_committed"})
        assert merged.pop("logger").name == "flamepipe.kafka-client"
        assert merged == {
            "security.protocol": "SSL",
            "bootstrap.servers": "b:1",
            "isolation.level": "read_committed",
        }
    finally:
        security.install({})


def test_spark_gets_java_names_and_a_jaas_line() -> None:
    options = security.spark_options(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": 'p"w\\d',
            "ssl.ca.location": "/etc/ca.pem",
            "ssl.key.location": "/etc/key.pem",  # librdkafka only: not passed to Java
        }
    )
    assert options == {
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="alice" password="p\\"w\\\\d";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
        "kafka.security.protocol": "SASL_SSL",
    }
    plain = security.spark_options({"sasl.mechanisms": "PLAIN", "sasl.username": "u",
                                    "sasl.password": "p"})  # fmt: skip
    assert "PlainLoginModule" in plain["kafka.sasl.jaas.config"]


def test_redaction_hides_every_secret_looking_value() -> None:
    shown = security.redacted(
        {"sasl.password": "x", "ssl.key.password": "y", "sasl.username": "alice"}
    )
    assert shown == {"sasl.password": "***", "ssl.key.password": "***", "sasl.username": "alice"}


def test_a_properties_file_with_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("KAFKA_USER", "alice")
    path = tmp_path / "client.properties"
    path.write_text(
        "# comment\n! also a comment\nsecurity.protocol = SASL_SSL\n"
        "sasl.username=${env:KAFKA_USER}\n"
        f"sasl.password=${{file:{secret}}}\n"
    )
    assert kafka_properties(Settings(kafka_config_file=path)) == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "alice",
        "sasl.password": "from-a-file",
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("bootstrap.servers=x:1\n", "use bootstrap_servers"),
        ("transactional.id=t\n", "set by flamepipe"),
        ("just words\n", "write name=value"),
        ("sasl.password=${env:FLAMEPIPE_TEST_UNSET_VARIABLE}\n", "is not set"),
        ("sasl.password=${file:/nonexistent/pw}\n", "cannot read"),
    ],
)
def test_bad_properties_fail_fast_naming_the_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# first\n" + text)
    with pytest.raises(ConfigError, match=says) as caught:
        kafka_properties(Settings(kafka_config_file=path))
    assert "line 2" in str(caught.value)


def test_the_acls_of_a_pipeline_and_their_commands() -> None:
    bindings = pipeline_acls("wc", "User:alice", ["lines"], ["counts"])
    commands = acl_commands(bindings, "k:9092")
    assert len(commands) == len(bindings) == 1 + 3 + 5 + 5 + 3 + 2 + 1
    assert any("--operation Write --topic 'counts.bundles'" in c for c in commands)
    assert (
        "kafka-acls.sh --bootstrap-server k:9092 --add --allow-principal 'User:alice' "
        "--operation All --topic 'wc.' --resource-pattern-type prefixed"
    ) in commands
    assert any("--operation IdempotentWrite --cluster" in c for c in commands)
    assert any("--operation Write --transactional-id 'wc.'" in c for c in commands)
    assert not any("Write --topic 'lines'" in c for c in commands)  # input is read only
