"""User-facing connectors: Kafka sources and sinks, and the serdes their payloads use
(Schema Registry formats included)."""

from __future__ import annotations

from connectors.bundles import BundleConsumer
from connectors.registry import ConfluentAvro, ConfluentJson, ConfluentProtobuf
from framework.kafka.endpoints import KafkaSink, KafkaSource
from framework.wire.serde import AvroSerde, Bytes, Json, Serde, Utf8

__all__ = [
    "AvroSerde",
    "BundleConsumer",
    "Bytes",
    "ConfluentAvro",
    "ConfluentJson",
    "ConfluentProtobuf",
    "Json",
    "KafkaSink",
    "KafkaSource",
    "Serde",
    "Utf8",
]
