"""Kafka source and sink descriptors: validation, payload decoding and encoding."""

from __future__ import annotations

import pytest

import connectors
from connectors import AvroSerde, Bytes, Json, KafkaSink, KafkaSource, Utf8
from framework.core.context import LOG_APPEND_TIME, Message
from framework.core.graph import Kind, Sink, Source
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import DecodeError, EncodeError, PipelineError, UserFunctionError
from framework.pipeline import Pipeline
from framework.wire.records import InRecord


def test_exports() -> None:
    assert set(connectors.__all__) >= {"KafkaSource", "KafkaSink", "Utf8", "Json", "Bytes"}
    assert {"AvroSerde", "Serde"} <= set(connectors.__all__)


def test_descriptors_build_a_pipeline() -> None:
    source, sink = KafkaSource("words"), KafkaSink("counts")
    graph = Pipeline("wc").source(source).map(str.upper).sink(sink).graph()
    assert isinstance(source, Source)
    assert isinstance(sink, Sink)
    assert [n.endpoint for n in graph.nodes if n.kind in (Kind.SOURCE, Kind.SINK)] == [
        source,
        sink,
    ]
    assert (source.name, sink.name) == ("words", "counts")


def test_defaults() -> None:
    source, sink = KafkaSource("in"), KafkaSink("out")
    assert (source.value, source.key, source.partitions, source.create) == (
        Utf8(),
        None,
        None,
        True,
    )
    assert (sink.value, sink.key, sink.partitions) == (Json(), None, 1)


@pytest.mark.parametrize("topic", ["", ".", "..", "a b", "a/b", "x" * 250, "é"])
def test_bad_topic_names(topic: str) -> None:
    with pytest.raises(PipelineError, match="not a Kafka topic name"):
        KafkaSource(topic)
    with pytest.raises(PipelineError, match="not a Kafka topic name"):
        KafkaSink(topic)


def test_bad_settings() -> None:
    with pytest.raises(PipelineError, match="value must be a serde"):
        KafkaSource("t", value="utf8")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="key must be a serde"):
        KafkaSource("t", key=str)  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="partitions must be >= 1"):
        KafkaSource("t", partitions=0)
    with pytest.raises(PipelineError, match="partitions must be >= 1"):
        KafkaSink("t", partitions=0)
    with pytest.raises(PipelineError, match="key must be a function"):
        KafkaSink("t", key=b"k")  # type: ignore[arg-type]


def test_source_topic_spec_asks_for_log_append_time() -> None:
    spec = KafkaSource("in", partitions=3).topic_spec()
    assert (spec.name, spec.partitions) == ("in", 3)
    assert spec.config["message.timestamp.type"] == "LogAppendTime"
    assert KafkaSource("in").topic_spec().partitions == 1


def test_source_decodes_value_or_key_and_value() -> None:
    assert KafkaSource("t").decode(b"k", "héllo".encode()) == "héllo"
    keyed = KafkaSource("t", value=Json(), key=Utf8())
    assert keyed.decode(b"user", b'{"n":1}') == ("user", {"n": 1})


def test_source_decode_errors_are_decode_errors() -> None:
    with pytest.raises(DecodeError, match="no value"):
        KafkaSource("t").decode(None, None)
    with pytest.raises(DecodeError, match="not UTF-8"):
        KafkaSource("t").decode(None, b"\xff")
    with pytest.raises(DecodeError, match="no key"):
        KafkaSource("t", key=Bytes()).decode(None, b"v")


def test_sink_encodes_key_and_value() -> None:
    assert KafkaSink("t").encode({"b": 1, "a": 2}) == (None, b'{"a":2,"b":1}')
    by_user = KafkaSink("t", key=lambda p: p["user"])
    assert by_user.encode({"user": "ü"}) == ("ü".encode(), b'{"user":"\\u00fc"}')
    raw = KafkaSink("t", value=Bytes(), key=lambda p: p[:1])
    assert raw.encode(b"xyz") == (b"x", b"xyz")


def test_a_sinks_items_encoded_in_bulk_are_its_items_encoded_one_by_one() -> None:
    metas = [Meta(GlobalTime(3, 1, 0)), Meta(GlobalTime(3, 1, 0), (1,), 9, True)]
    payloads = [{"user": "a"}, {"user": "b"}]
    for sink in (KafkaSink("t"), KafkaSink("t", key=lambda p: p["user"])):
        one_by_one = [sink.encode_item(m, p) for m, p in zip(metas, payloads, strict=True)]
        assert sink.encode_items(metas, payloads) == one_by_one
    with pytest.raises(UserFunctionError, match="key function failed"):
        KafkaSink("t", key=lambda p: p["missing"]).encode_items(metas, [{}, {}])


class _Plain(Sink):
    @property
    def name(self) -> str:
        return "plain"

    def encode(self, payload: object) -> object:
        return ("plain", payload)


def test_any_sinks_items_encoded_in_bulk_are_its_encode_item() -> None:
    metas = [Meta(GlobalTime(1, 1, 1)), Meta(GlobalTime(2, 1, 1))]
    assert _Plain().encode_items(metas, [1, 2]) == [("plain", 1), ("plain", 2)]


def test_sink_encode_errors_name_user_function_and_encoding() -> None:
    with pytest.raises(UserFunctionError, match="returned int"):
        KafkaSink("t", key=lambda p: 1).encode("v")  # type: ignore[arg-type,return-value]
    with pytest.raises(UserFunctionError, match="key function failed"):
        KafkaSink("t", key=lambda p: p["missing"]).encode({})
    with pytest.raises(EncodeError, match="Json cannot encode"):
        KafkaSink("t").encode(float("nan"))

    class Text:  # a serde of the user's that breaks the protocol
        def dumps(self, obj: object) -> str:
            return str(obj)

        def loads(self, data: bytes) -> object:
            return data.decode()

    with pytest.raises(EncodeError, match="returned str, not bytes"):
        KafkaSink("t", value=Text()).encode("v")  # type: ignore[arg-type]


def test_avro_source() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    serde = AvroSerde(schema)
    assert KafkaSource("t", value=serde).decode(None, serde.dumps({"n": 5})) == {"n": 5}


def test_a_source_with_context_gives_messages_with_the_records_coordinates() -> None:
    record = InRecord("t", 1, 42, 1_700, b"user", b'{"n":1}', (("trace", b"x"),))
    message = KafkaSource("t", value=Json(), context=True).payload(record)
    assert message == Message(
        {"n": 1}, b"user", (("trace", b"x"),), 1_700, LOG_APPEND_TIME, "t", 1, 42
    )
    keyed = KafkaSource("t", value=Json(), key=Utf8(), context=True).payload(record)
    assert (keyed.key, keyed.value, keyed.offset) == ("user", {"n": 1}, 42)
    assert KafkaSource("t", value=Json()).payload(record) == {"n": 1}  # no context: the value
    with pytest.raises(DecodeError, match="no value"):
        KafkaSource("t", context=True).payload(record._replace(value=None))
    with pytest.raises(DecodeError, match="no key"):
        KafkaSource("t", key=Utf8(), context=True).payload(record._replace(key=None))


def test_the_source_docstring_example_runs() -> None:
    import doctest

    import framework.kafka.endpoints

    failed, tried = doctest.testmod(framework.kafka.endpoints)
    assert tried >= 3 and failed == 0


def test_a_source_reading_tombstones_gives_none_for_a_record_without_value() -> None:
    assert KafkaSource("t", tombstones=True).decode(b"k", None) is None
    assert KafkaSource("t", key=Utf8(), tombstones=True).decode(b"k", None) == ("k", None)
    record = InRecord("t", 0, 1, 5, b"k", None)
    message = KafkaSource("t", key=Utf8(), tombstones=True, context=True).payload(record)
    assert (message.key, message.value) == ("k", None)
