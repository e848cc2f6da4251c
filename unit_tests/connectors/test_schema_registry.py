"""The Schema Registry serdes without a registry: binding, pickling, framing checks and
errors (the registry itself: integration_tests/test_schema_registry.py)."""

from __future__ import annotations

import pickle
import socket

import pytest

from connectors import ConfluentAvro, ConfluentJson, KafkaSink, KafkaSource
from framework.errors import ConfigError, DecodeError, PipelineError, RegistryError


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_sources_and_sinks_bind_the_topic_subjects() -> None:
    url = "http://127.0.0.1:8081"
    source = KafkaSource("bids", value=ConfluentAvro(url), key=ConfluentAvro(url))
    sink = KafkaSink("out", value=ConfluentJson(url, {"type": "object"}), key=str,
                     key_serde=ConfluentAvro(url, "string"))  # fmt: skip
    named = KafkaSource("bids", value=ConfluentAvro(url, subject="bid-events"))
    assert source.value._subject() == "bids-value"  # type: ignore[attr-defined]
    assert source.key._subject() == "bids-key"  # type: ignore[union-attr]
    assert sink.value._subject() == "out-value"  # type: ignore[attr-defined]
    assert sink.key_serde._subject() == "out-key"  # type: ignore[union-attr]
    assert named.value._subject() == "bid-events"  # type: ignore[attr-defined]


def test_an_unbound_serde_says_how_to_bind_it() -> None:
    with pytest.raises(PipelineError, match="give it to a KafkaSource or KafkaSink"):
        ConfluentAvro("http://127.0.0.1:8081", "long").dumps(1)


def test_pickling_leaves_clients_and_serializers_behind() -> None:
    serde = KafkaSource("t", value=ConfluentAvro("http://127.0.0.1:8081")).value
    serde._cache()["serializer"] = object()  # type: ignore[attr-defined]
    copy = pickle.loads(pickle.dumps(serde))
    assert "_local" not in copy.__dict__ and copy._subject() == "t-value"


def test_bytes_not_in_the_wire_format_are_refused_without_asking_the_registry() -> None:
    serde = KafkaSource("t", value=ConfluentAvro(_closed_url())).value
    for data in (b"", b"\x00\x00", b'{"a": 1}', b"\x01\x00\x00\x00\x01\x02"):
        with pytest.raises(DecodeError, match="not the Schema Registry wire format"):
            serde.loads(data)


def test_an_unreachable_registry_fails_the_task_instead_of_dead_lettering() -> None:
    settings = {"max.retries": 0}
    serde = KafkaSource("t", value=ConfluentAvro(_closed_url(), registry=settings)).value
    with pytest.raises(RegistryError, match="unreachable"):
        serde.loads(b"\x00\x00\x00\x00\x01\x02")


def test_an_unreachable_registry_is_a_config_error_with_the_fix() -> None:
    source = KafkaSource("t", value=ConfluentAvro(_closed_url(), registry={"max.retries": 0}))
    with pytest.raises(ConfigError, match="start the registry or fix the URL"):
        source.prepare("127.0.0.1:1")


def test_misuse_is_refused_at_construction() -> None:
    with pytest.raises(PipelineError, match="http"):
        ConfluentAvro("127.0.0.1:8081")
    with pytest.raises(PipelineError, match="url="):
        ConfluentAvro("http://a:1", registry={"url": "http://b:2"})
    with pytest.raises(PipelineError, match="key_serde needs a key function"):
        KafkaSink("out", key_serde=ConfluentAvro("http://a:1", "string"))


def test_registry_settings_stay_out_of_reprs() -> None:
    serde = ConfluentAvro("http://a:1", registry={"basic.auth.user.info": "me:s3cret"})
    assert "s3cret" not in repr(serde) and "s3cret" not in repr(KafkaSource("t", value=serde))


def test_the_docstring_examples_run() -> None:
    import doctest

    import connectors.schema_registry

    failed, tried = doctest.testmod(connectors.schema_registry)
    assert tried >= 5 and failed == 0


class _ConflictError(Exception):
    http_status_code = 409


def test_a_registration_race_lost_once_is_asked_again_and_a_real_conflict_still_fails() -> None:
    sink = KafkaSink("out", value=ConfluentAvro("http://127.0.0.1:8081", "long"))
    calls: list[int] = []

    def racing(obj: object, _ctx: object) -> bytes:  # the winner registered in between
        calls.append(1)
        if len(calls) == 1:
            raise _ConflictError("artifact version already exists")
        return b"\x00\x00\x00\x00\x01" + bytes([obj])  # type: ignore[list-item]

    sink.value._cache()["serializer"] = racing  # type: ignore[attr-defined]
    assert sink.value.dumps(3) == b"\x00\x00\x00\x00\x01\x03" and len(calls) == 2

    def refusing(_obj: object, _ctx: object) -> bytes:
        raise _ConflictError("incompatible")

    sink.value._cache()["serializer"] = refusing  # type: ignore[attr-defined]
    with pytest.raises(RegistryError, match="incompatible"):
        sink.value.dumps(3)
