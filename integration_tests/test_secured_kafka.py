"""A pipeline on a secured broker: SASL (SCRAM-SHA-512) and SSL, end to end, exactly once.

A broker of its own gets two more listeners: SASL_PLAINTEXT with SCRAM-SHA-512 (a user
made through the admin API) and SSL with a certificate the test signs with a CA of its own
(openssl, SAN 127.0.0.1). The pipeline is given only ``bootstrap_servers`` (the secured
listener) and ``kafka_config_file`` (a client.properties whose password is read from a
file of its own): every client it makes (driver, stage tasks, acker, barrier, Spark's
Kafka source) must get them, or it cannot reach the broker at all. The output read with
read_committed must equal the oracle; a client without credentials, with a wrong
password, or without the CA is refused.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from framework.config import Settings
from framework.demos.text import generate_lines
from framework.demos.wordcount import wordcount
from framework.kafka import security
from framework.kafka.acls import grant, pipeline_acls
from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec
from framework.kafka.cache import ProcessCache
from framework.local.provision import free_port
from framework.local.stack import LocalStack
from framework.runners.keys import install_keys
from integration_tests.harness.runs import (
    assert_running_counts,
    produce_lines,
    read_output,
    running,
)

PASSWORD = 'alice-"secret"-1'  # quotes: the JAAS line for Spark's client must escape them


@dataclass(frozen=True)
class Secured:
    settings: Settings  # the stack's plain settings (PLAINTEXT listener: the admin's)
    sasl_port: int
    ssl_port: int
    ca: Path
    sasl_properties: Path
    ssl_properties: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificates(home: Path) -> tuple[Path, Path]:
    """A CA, and the broker's key and certificate (SAN IP 127.0.0.1) in one PEM file."""
    ca_key, ca = home / "ca.key", home / "ca.pem"
    key, csr, cert = home / "broker.key", home / "broker.csr", home / "broker.crt"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
             "-out", str(ca), "-days", "2", "-subj", "/CN=flamepipe-test-ca")  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", "/CN=127.0.0.1")  # fmt: skip
    ext = home / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    pkcs8 = home / "broker.pk8"
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", str(key), "-out", str(pkcs8))
    keystore = home / "broker-keystore.pem"
    keystore.write_text(pkcs8.read_text() + cert.read_text())
    return ca, keystore


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("secured")
    ca, keystore = _certificates(home)
    settings = Settings(
        kafka_port=free_port(),
        controller_port=free_port(),
        zookeeper_port=free_port(),
        state_dir=home / "stack",
    )
    sasl_port, ssl_port = free_port(), free_port()
    stack = LocalStack(
        settings,
        quiet=True,
        kafka_listeners=(("SASL_PLAINTEXT", "SASL_PLAINTEXT", sasl_port), ("SSL", "SSL", ssl_port)),
        kafka_properties=(
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.ssl.ssl.keystore.type=PEM",
            f"listener.name.ssl.ssl.keystore.location={keystore}",
            # The authorizer on: a SASL user may do only what ACLs allow. The PLAINTEXT
            # and controller listeners (and SSL without client certificates) are
            # ANONYMOUS, the admin here.
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
        ),
    )
    try:
        stack.up()
        admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upserts = [
            UserScramCredentialUpsertion("alice", info, PASSWORD.encode()),
            UserScramCredentialUpsertion("bob", info, b"bob-secret"),  # no ACLs at all
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(30)
        password = home / "kafka-password"
        password.write_text(PASSWORD + "\n")
        sasl_properties = home / "sasl.properties"
        sasl_properties.write_text(
            "# a pipeline's client.properties\n"
            "security.protocol=SASL_PLAINTEXT\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.username=alice\n"
            f"sasl.password=${{file:{password}}}\n"
        )
        ssl_properties = home / "ssl.properties"
        ssl_properties.write_text(f"security.protocol=SSL\nssl.ca.location={ca}\n")
        yield Secured(settings, sasl_port, ssl_port, ca, sasl_properties, ssl_properties)
    finally:
        security.install({})  # later tests of this process talk to plain brokers
        ProcessCache.clear_all()
        stack.down()


def _pipeline_settings(secured: Secured, port: int, properties: Path, state: Path) -> Settings:
    return Settings(
        bootstrap_servers=f"127.0.0.1:{port}",
        zookeeper_connect=secured.settings.zookeeper,
        kafka_config_file=properties,
        state_dir=state,
        parallelism=2,
    )


@pytest.mark.parametrize("listener", ["sasl", "ssl"])
def test_a_pipeline_runs_exactly_once_through_a_secured_listener(
    secured: Secured, spark: Any, tmp_path: Path, listener: str
) -> None:
    port, properties = (
        (secured.sasl_port, secured.sasl_properties)
        if listener == "sasl"
        else (secured.ssl_port, secured.ssl_properties)
    )
    settings = _pipeline_settings(secured, port, properties, tmp_path)
    app = f"sec-{listener}"
    source, sink = f"{app}-lines", f"{app}-counts"
    lines = generate_lines(300, words_per_line=5, vocabulary=40, seed=21)
    plain = secured.settings.kafka_bootstrap  # the admin's (super user) listener
    # Someone else owns the input: the topic exists and is written by the admin.
    ensure_topics(plain, [input_topic_spec(source, 2)])
    if listener == "sasl":
        # alice may do what the pipeline needs (`flamepipe acls`), nothing more.
        grant(plain, pipeline_acls(app, "User:alice", [source], [sink]))
    try:
        with running(settings, spark, wordcount(app, source, sink)) as run:
            produce_lines(plain, source, lines, partitions=2)
            run.wait_released(time.time_ns() // 1_000_000, timeout_s=180)
            items = read_output(settings.kafka_bootstrap, sink)
    finally:
        security.install({})
        ProcessCache.clear_all()
    assert_running_counts(items, lines)


def _refused(config: dict[str, Any]) -> bool:
    consumer = Consumer({**config, "group.id": "intruder", "socket.timeout.ms": 3000})
    try:
        consumer.list_topics(timeout=5)
        return False
    except KafkaException:
        return True
    finally:
        consumer.close()


def test_clients_without_credentials_are_refused(secured: Secured) -> None:
    sasl = f"127.0.0.1:{secured.sasl_port}"
    ssl = f"127.0.0.1:{secured.ssl_port}"
    assert _refused({"bootstrap.servers": sasl})  # no SASL at all
    wrong = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"}
    assert _refused({"bootstrap.servers": sasl, **wrong, "sasl.username": "alice",
                     "sasl.password": "guess"})  # fmt: skip
    assert _refused({"bootstrap.servers": ssl})  # plaintext to the SSL port
    assert _refused({"bootstrap.servers": ssl, "security.protocol": "SSL"})  # no CA
    right = {"sasl.username": "alice", "sasl.password": PASSWORD}
    assert not _refused({"bootstrap.servers": sasl, **wrong, **right})
    assert not _refused(
        {"bootstrap.servers": ssl, "security.protocol": "SSL", "ssl.ca.location": str(secured.ca)}
    )


def test_a_user_without_acls_can_neither_write_nor_read_a_pipelines_topics(
    secured: Secured,
) -> None:
    sasl = {
        "bootstrap.servers": f"127.0.0.1:{secured.sasl_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": "bob-secret",
    }
    ensure_topics(secured.settings.kafka_bootstrap, [TopicSpec("sec-sasl.acks", 2)])
    errors: list[Any] = []
    producer = Producer({**sasl, "message.timeout.ms": 10_000})
    producer.produce("sec-sasl.acks", b"forged", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors[0]
    consumer = Consumer({**sasl, "group.id": "sec-sasl.spy"})
    try:
        topics = consumer.list_topics(timeout=10).topics
        assert not [t for t in topics if t.startswith("sec-sasl")]  # not even their names
    finally:
        consumer.close()


def test_secrets_never_reach_the_logs(
    secured: Secured, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _pipeline_settings(secured, secured.sasl_port, secured.sasl_properties, tmp_path)
    caplog.set_level("DEBUG")
    try:
        install_keys(settings)
        assert security.installed()["sasl.password"] == PASSWORD
        options = security.spark_options()
        assert 'password="alice-\\"secret\\"-1";' in options["kafka.sasl.jaas.config"]
    finally:
        security.install({})
    assert "sasl.password" in caplog.text  # the properties were logged, redacted
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(settings)
