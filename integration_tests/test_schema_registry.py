"""Schema Registry serdes on Spark against a real registry (Apicurio Registry's Confluent
API, started here): Avro with schema evolution, JSON Schema, Protobuf, keys, dead letters
of bad records, and fail-fast checks before a pipeline starts.

Records in are written and records out are read by confluent-kafka's own serializers, as a
producer or consumer outside flamepipe would; the output is read with read_committed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connectors import ConfluentAvro, ConfluentJson, ConfluentProtobuf, KafkaSink, KafkaSource
from framework import Pipeline
from framework.config import Settings
from framework.errors import ConfigError
from framework.kafka.admin import ensure_topics, input_topic_spec
from framework.kafka.clients import read_to_end
from framework.local.apicurio import SchemaRegistry
from framework.local.provision import free_port
from framework.operations.replay import resolve_start, start_replay
from framework.runners.spark.runner import SparkRunner
from framework.wire.dead_letters import read_dead_letter
from framework.wire.topics import Topics
from integration_tests.harness.bids_pb2 import Bid
from integration_tests.harness.runs import running

BID_V1 = {
    "type": "record",
    "name": "Bid",
    "fields": [{"name": "auction", "type": "long"}, {"name": "price", "type": "long"}],
}
# v2 adds a field with a default: BACKWARD compatible, so the registry takes it.
BID_V2 = {
    "type": "record",
    "name": "Bid",
    "fields": [
        {"name": "auction", "type": "long"},
        {"name": "price", "type": "long"},
        {"name": "currency", "type": "string", "default": "EUR"},
    ],
}
PRICED = {
    "type": "object",
    "properties": {
        "auction": {"type": "integer"},
        "cents": {"type": "integer"},
        "currency": {"type": "string"},
    },
    "required": ["auction", "cents", "currency"],
}
KEY = "string"  # an Avro schema: a bare string


@pytest.fixture(scope="module")
def registry(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = SchemaRegistry(tmp_path_factory.mktemp("registry"), stack.cache_dir, free_port())
    try:
        yield server.up(timeout_s=120)
    finally:
        server.down()


def _app(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def _priced(pair: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    _bidder, bid = pair
    return {"auction": bid["auction"], "cents": bid["price"] * 100, "currency": bid["currency"]}


def _bidder(row: dict[str, Any]) -> str:
    return f"a{row['auction']}"


def test_avro_in_json_schema_out_with_evolution_keys_and_dead_letters(
    stack: Settings, spark: Any, registry: str
) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("sr")
    source, sink = f"{app}-bids", f"{app}-priced"
    ensure_topics(bootstrap, [input_topic_spec(source, 2)])
    client = SchemaRegistryClient({"url": registry})
    value_ctx = SerializationContext(source, MessageField.VALUE)
    key_ctx = SerializationContext(source, MessageField.KEY)
    v1, v2 = AvroSerializer(client, json.dumps(BID_V1)), AvroSerializer(client, json.dumps(BID_V2))
    keys = AvroSerializer(client, json.dumps(KEY))
    producer = Producer({"bootstrap.servers": bootstrap})
    expected = []
    for i in range(60):
        bid = {"auction": i % 7, "price": 10 + i}
        if i < 30:  # written by an older producer: no currency, read as the default
            value = v1(bid, value_ctx)
            expected.append({**bid, "currency": "EUR"})
        else:
            value = v2({**bid, "currency": "USD"}, value_ctx)
            expected.append({**bid, "currency": "USD"})
        producer.produce(source, value=value, key=keys(f"b{i}", key_ctx), partition=i % 2)
    # Two bad records: not the wire format, and a schema id the registry never gave.
    producer.produce(source, value=b"plain text", key=keys("bad", key_ctx), partition=0)
    unknown = b"\x00" + (987_654).to_bytes(4, "big") + b"\x02\x04"
    producer.produce(source, value=unknown, key=keys("bad", key_ctx), partition=1)
    producer.flush(30)

    pipeline = Pipeline(app)
    bids = KafkaSource(
        source,
        value=ConfluentAvro(registry, reader_schema=BID_V2),
        key=ConfluentAvro(registry),
        partitions=2,
    )
    out = KafkaSink(
        sink,
        value=ConfluentJson(registry, PRICED),
        key=_bidder,
        key_serde=ConfluentAvro(registry, KEY),
    )
    pipeline.source(bids).map(_priced).sink(out)
    with running(settings, spark, pipeline) as run:
        run.wait_released(time.time_ns() // 1_000_000, timeout_s=180)
        records = read_to_end(bootstrap, sink)
        dead = read_to_end(bootstrap, Topics(app).dlq)
        dead_count = run.stats[f"source-{source}"].dead_letters

    out_ctx = SerializationContext(sink, MessageField.VALUE)
    out_key_ctx = SerializationContext(sink, MessageField.KEY)
    values = JSONDeserializer(None, schema_registry_client=client)
    key_reader = AvroDeserializer(client)
    got = sorted(
        ((key_reader(m.key(), out_key_ctx), values(m.value(), out_ctx)) for m in records),
        key=json.dumps,
    )
    want = sorted(
        (
            (f"a{b['auction']}", {"auction": b["auction"], "cents": b["price"] * 100,
                                  "currency": b["currency"]})
            for b in expected
        ),
        key=json.dumps,
    )  # fmt: skip
    assert got == want and len(records) == 60
    reasons = sorted(read_dead_letter(m).reason for m in dead)
    assert dead_count == 2 and len(reasons) == 2
    assert "not the Schema Registry wire format" in reasons[0]
    assert "unknown schema id 987654" in reasons[1]
    # The sink registered its schemas under the topic's subjects.
    assert {f"{sink}-value", f"{sink}-key"} <= set(client.get_subjects())
    _replay_adds_nothing(settings, spark, pipeline, sink, records)


def _replay_adds_nothing(
    settings: Settings, spark: Any, pipeline: Pipeline, sink: str, records: list[Any]
) -> None:
    """A replay from the start in a new epoch encodes the same bytes (the same schema
    ids), so the barrier releases nothing new."""
    bootstrap = settings.kafka_bootstrap
    raw = Counter((m.key(), m.value()) for m in records)
    start_replay(settings, pipeline.graph(), resolve_start(bootstrap, pipeline.graph()))
    with running(settings, spark, pipeline) as run:
        assert run.epoch == 1
        run.wait_released(time.time_ns() // 1_000_000, timeout_s=180)
        assert run.barriers()[0].stats.records_in > 0, "the replay re-read the input"
    assert Counter((m.key(), m.value()) for m in read_to_end(bootstrap, sink)) == raw


def _raise_price(bid: Any) -> Any:
    return Bid(auction=bid.auction, bidder=bid.bidder, price=bid.price * 2)


def test_protobuf_in_and_out(stack: Settings, spark: Any, registry: str) -> None:
    settings = stack.with_(parallelism=1)
    bootstrap = settings.kafka_bootstrap
    app = _app("srp")
    source, sink = f"{app}-bids", f"{app}-doubled"
    ensure_topics(bootstrap, [input_topic_spec(source, 1)])
    client = SchemaRegistryClient({"url": registry})
    conf = {"use.deprecated.format": False}
    write = ProtobufSerializer(Bid, client, conf)
    ctx = SerializationContext(source, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(25):
        producer.produce(source, value=write(Bid(auction=i, bidder=f"p{i % 3}", price=i), ctx))
    producer.flush(30)

    pipeline = Pipeline(app)
    pipeline.source(KafkaSource(source, value=ConfluentProtobuf(registry, Bid))).map(
        _raise_price
    ).sink(KafkaSink(sink, value=ConfluentProtobuf(registry, Bid)))
    with running(settings, spark, pipeline) as run:
        run.wait_released(time.time_ns() // 1_000_000, timeout_s=180)
        records = read_to_end(bootstrap, sink)
    read = ProtobufDeserializer(Bid, conf)
    out_ctx = SerializationContext(sink, MessageField.VALUE)
    got = sorted(
        (b.auction, b.bidder, b.price) for b in (read(m.value(), out_ctx) for m in records)
    )
    assert got == [(i, f"p{i % 3}", 2 * i) for i in range(25)]


def test_an_incompatible_schema_or_a_missing_registry_fails_before_the_pipeline_starts(
    stack: Settings, spark: Any, registry: str
) -> None:
    bootstrap = stack.kafka_bootstrap
    app = _app("srf")
    source, sink = f"{app}-in", f"{app}-out"
    ensure_topics(bootstrap, [input_topic_spec(source, 1)])
    client = SchemaRegistryClient({"url": registry})
    AvroSerializer(client, json.dumps(BID_V1))(
        {"auction": 1, "price": 2}, SerializationContext(sink, MessageField.VALUE)
    )
    retyped = {
        "type": "record",
        "name": "Bid",
        "fields": [{"name": "auction", "type": "string"}, {"name": "price", "type": "long"}],
    }
    bad = Pipeline(app)
    bad.source(KafkaSource(source)).sink(KafkaSink(sink, value=ConfluentAvro(registry, retyped)))
    with pytest.raises(ConfigError, match=r"Incompatible.*make the schema compatible"):
        SparkRunner(stack, spark).start(bad.graph())
    nowhere = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    missing = Pipeline(_app("srm"))
    missing.source(KafkaSource(source, value=ConfluentAvro(nowhere))).sink(KafkaSink(sink))
    with pytest.raises(ConfigError, match="start the registry or fix the URL"):
        SparkRunner(stack, spark).start(missing.graph())
    # Neither started anything: the sink's subject still has its one version.
    assert client.get_versions(f"{sink}-value") == [1]
