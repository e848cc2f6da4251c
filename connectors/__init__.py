"""User-facing connectors: Kafka sources and sinks, and the serdes their payloads use."""

from __future__ import annotations

from connectors.bundles import BundleConsumer
from framework.kafka.endpoints import KafkaSink, KafkaSource
from framework.wire.serde import AvroSerde, Bytes, Json, Serde, Utf8

__all__ = [
    "AvroSerde",
    "BundleConsumer",
    "Bytes",
    "Json",
    "KafkaSink",
    "KafkaSource",
    "Serde",
    "Utf8",
]
