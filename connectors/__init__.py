"""User-facing connectors: Kafka sources and sinks, the serdes their payloads use (Schema
Registry formats included), and readers of the exactly-once output (verified bundles, a
database table, bucketed files)."""

from __future__ import annotations

from connectors.bundles import BundleConsumer
from connectors.database import DatabaseSink, Table, sqlite
from connectors.file_sink import FileSink
from connectors.schema_registry import ConfluentAvro, ConfluentJson, ConfluentProtobuf
from framework.kafka.endpoints import KafkaSink, KafkaSource
from framework.wire.serde import AvroSerde, Bytes, Json, Serde, Utf8

__all__ = [
    "AvroSerde",
    "BundleConsumer",
    "Bytes",
    "ConfluentAvro",
    "ConfluentJson",
    "ConfluentProtobuf",
    "DatabaseSink",
    "FileSink",
    "Json",
    "KafkaSink",
    "KafkaSource",
    "Serde",
    "Table",
    "Utf8",
    "sqlite",
]
