"""Kafka topics as pipeline sources and sinks: what to read or write, and with which serde.

Descriptors only: the runner reads and writes. A source topic must stamp its records with
LogAppendTime (global time is computed from those timestamps); `KafkaSource.prepare`
creates a missing topic that way, or rejects an existing ``CreateTime`` topic with the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from framework.core.context import LOG_APPEND_TIME, Message
from framework.core.graph import Graph, Kind, Sink, Source
from framework.core.meta import Meta
from framework.errors import ConfigError, DecodeError, EncodeError, PipelineError, UserFunctionError
from framework.kafka.admin import (
    TopicSpec,
    ensure_topics,
    input_topic_spec,
    partition_count,
    require_log_append_time,
)
from framework.wire.bundles import bundles_topic, signed_item, signed_items
from framework.wire.records import InRecord
from framework.wire.serde import Json, Serde, TopicSerde, Utf8, bind_serde

# Serdes are immutable, so one default instance can serve every descriptor.
_UTF8 = Utf8()
_JSON = Json()
# Kafka's own rule for topic names.
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _check_topic(kind: str, topic: str) -> None:
    if not isinstance(topic, str) or not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise PipelineError(
            f"{kind}: {topic!r} is not a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)"
        )


def _check_serde(kind: str, role: str, serde: object) -> None:
    if not isinstance(serde, Serde):
        raise PipelineError(f"{kind}: {role} must be a serde with dumps/loads, got {serde!r}")


def _check_registries(*serdes: Serde | None, writes: bool) -> None:
    for serde in serdes:
        if isinstance(serde, TopicSerde):
            serde.check(writes=writes)


MAX_BARRIERS = 64
"""The most barrier instances one sink may have (each holds a transactional producer)."""


def _check_partitions(kind: str, partitions: int | None) -> None:
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise PipelineError(f"{kind}: partitions must be >= 1, got {partitions!r}")


@dataclass(frozen=True, eq=False)
class KafkaSource(Source):
    """Records of ``topic``; each payload is ``value.loads(record value)``.

    With a ``key`` serde the payload is ``(key.loads(record key), value)`` instead.
    ``partitions``: the partition count to create the topic with if it is missing (1 if
    None), and the least an existing topic must have. ``create=False`` never creates it.
    ``context=True``: the payload is a `framework.core.context.Message` instead, the value
    with the record's key (decoded by ``key`` if set), headers, timestamp, topic,
    partition and offset (reading headers costs the Spark source ~8x its JVM CPU per
    record, so it is opt-in). ``tombstones=True``: a record without a value (a compacted
    topic's delete) is the payload None (``(key, None)`` with a key serde), which a
    table join takes as deleting the key, instead of a dead letter.

    >>> from framework import Message
    >>> def where(message: Message) -> str:
    ...     return f"{message.value} at {message.topic}[{message.partition}]@{message.offset}"
    >>> source = KafkaSource("lines", context=True)  # then .map(where)
    """

    topic: str
    value: Serde = _UTF8
    key: Serde | None = None
    partitions: int | None = None
    create: bool = True
    context: bool = False
    tombstones: bool = False

    def __post_init__(self) -> None:
        _check_topic("KafkaSource", self.topic)
        _check_serde("KafkaSource", "value", self.value)
        object.__setattr__(self, "value", bind_serde(self.value, self.topic, key=False))
        if self.key is not None:
            _check_serde("KafkaSource", "key", self.key)
            object.__setattr__(self, "key", bind_serde(self.key, self.topic, key=True))
        _check_partitions("KafkaSource", self.partitions)

    @property
    def name(self) -> str:
        """The topic name."""
        return self.topic

    def topic_spec(self) -> TopicSpec:
        """How flamepipe creates this topic if it is missing: LogAppendTime timestamps."""
        return input_topic_spec(self.topic, self.partitions or 1)

    def prepare(self, bootstrap: str) -> int:
        """Create the topic if missing and allowed, check LogAppendTime; its partitions.

        Raises `ConfigError` with the fix for a missing topic (``create=False``), too few
        partitions, ``CreateTime`` timestamps, or a schema registry that does not answer.
        """
        _check_registries(self.value, self.key, writes=False)
        if self.create:
            ensure_topics(bootstrap, [self.topic_spec()])
        try:
            count = partition_count(bootstrap, self.topic)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc}; create it with message.timestamp.type=LogAppendTime, or let "
                "flamepipe create it (KafkaSource(create=True))"
            ) from exc
        if self.partitions is not None and count < self.partitions:
            raise ConfigError(
                f"source topic {self.topic!r} has {count} partition(s), fewer than "
                f"partitions={self.partitions}: add partitions or lower the setting"
            )
        require_log_append_time(bootstrap, self.topic)
        return count

    def decode(self, key: bytes | None, value: bytes | None) -> Any:
        """The payload of a record; `DecodeError` if it has no value (unless
        ``tombstones``) or bad bytes."""
        if value is None and not self.tombstones:
            raise DecodeError(
                f"record of {self.topic} has no value (a Kafka tombstone; "
                "KafkaSource(tombstones=True) reads it as None)"
            )
        payload = None if value is None else self.value.loads(value)
        if self.key is None:
            return payload
        if key is None:
            raise DecodeError(f"record of {self.topic} has no key, but a key serde is set")
        return (self.key.loads(key), payload)

    def payload(self, record: InRecord) -> Any:
        """The payload of an input record: `decode`, or a `Message` with ``context``."""
        if not self.context:
            return self.decode(record.key, record.value)
        decoded = self.decode(record.key, record.value)
        key, value = decoded if self.key is not None else (record.key, decoded)
        return Message(
            value,
            key,
            record.headers,
            record.timestamp_ms,
            LOG_APPEND_TIME,
            record.topic,
            record.partition,
            record.offset,
        )

    def __repr__(self) -> str:
        context = ", context=True" if self.context else ""
        return f"KafkaSource({self.topic!r}, value={self.value!r}{context})"


@dataclass(frozen=True, eq=False)
class KafkaSink(Sink):
    """Bundles written to ``topic``: each payload as ``value.dumps(payload)``.

    ``key`` maps a payload to its record key (bytes, or str as UTF-8); without it records
    have no key. With a ``key_serde`` the key is ``key_serde.dumps(key(payload))`` instead
    (a Schema Registry key, say). ``partitions`` is the count flamepipe creates the topic
    with if missing.

    ``barriers`` splits the topic's partitions over that many barrier instances (output
    partition ``p`` to instance ``p % barriers``), each with its own transactions,
    ``GT_last`` and bundle sequence per output partition, so consumers verify bundles
    exactly as with one. One barrier releases 40-50k items per CPU-second
    (docs/scaling.md); a sink that must take more runs one process per instance:
    ``flamepipe barrier jobs:p --sink <topic> --instance k``. The count is part of the
    pipeline's state: change it only in a new epoch (``flamepipe replay``).

    >>> from connectors import ConfluentAvro
    >>> schema = {"type": "record", "name": "Count",
    ...           "fields": [{"name": "word", "type": "string"}, {"name": "n", "type": "long"}]}
    >>> sink = KafkaSink("counts", value=ConfluentAvro("http://127.0.0.1:8081", schema),
    ...                  key=lambda row: row["word"])
    """

    topic: str
    value: Serde = _JSON
    key: Callable[[Any], Any] | None = None
    partitions: int = 1
    key_serde: Serde | None = None
    barriers: int = 1

    def __post_init__(self) -> None:
        _check_topic("KafkaSink", self.topic)
        if not isinstance(self.barriers, int) or not 1 <= self.barriers <= MAX_BARRIERS:
            raise PipelineError(
                f"KafkaSink {self.topic}: barriers must be 1..{MAX_BARRIERS}, got {self.barriers!r}"
            )
        _check_serde("KafkaSink", "value", self.value)
        object.__setattr__(self, "value", bind_serde(self.value, self.topic, key=False))
        if self.key is not None and not callable(self.key):
            raise PipelineError(
                f"KafkaSink: key must be a function of the payload, got {self.key!r}"
            )
        if self.key_serde is not None:
            if self.key is None:
                raise PipelineError("KafkaSink: a key_serde needs a key function to serialize")
            _check_serde("KafkaSink", "key_serde", self.key_serde)
            key_serde = bind_serde(self.key_serde, self.topic, key=True)
            object.__setattr__(self, "key_serde", key_serde)
        _check_partitions("KafkaSink", self.partitions)

    @property
    def name(self) -> str:
        """The topic name."""
        return self.topic

    def topic_spec(self) -> TopicSpec:
        """How flamepipe creates this topic if it is missing."""
        return TopicSpec(self.topic, self.partitions)

    def prepare(self, bootstrap: str) -> int:
        """Create the topic and its bundle topic (`framework.wire.bundles`) if missing; the
        partition count (`ConfigError` if the two differ, the topic has fewer partitions
        than barriers, or a schema registry does not answer or refuses the sink's
        schema)."""
        _check_registries(self.value, self.key_serde, writes=True)
        ensure_topics(bootstrap, [self.topic_spec()])
        partitions = partition_count(bootstrap, self.topic)
        if partitions < self.barriers:
            raise ConfigError(
                f"KafkaSink {self.topic}: barriers={self.barriers} needs as many partitions, "
                f"the topic has {partitions}: add partitions or lower barriers"
            )
        control = bundles_topic(self.topic)
        ensure_topics(bootstrap, [TopicSpec(control, partitions)])
        if (found := partition_count(bootstrap, control)) != partitions:
            raise ConfigError(
                f"KafkaSink {self.topic}: its bundle topic {control} has {found} partitions, "
                f"the topic {partitions}: give {control} {partitions} partitions"
            )
        return partitions

    def encode(self, payload: object) -> tuple[bytes | None, bytes]:
        """``(key, value)`` bytes of a payload; `UserFunctionError` or `EncodeError` if either
        cannot be made."""
        value = self.value.dumps(payload)
        if type(value) is not bytes:  # a serde of the user's: the barrier writes bytes only
            if not isinstance(value, bytes | bytearray | memoryview):
                raise EncodeError(
                    f"KafkaSink {self.topic}: its value serde returned "
                    f"{type(value).__name__}, not bytes"
                )
            value = bytes(value)
        if self.key is None:
            return None, value
        try:
            key = self.key(payload)
        except Exception as exc:  # a user function: any failure is the pipeline's
            raise UserFunctionError(f"KafkaSink {self.topic}: key function failed: {exc}") from exc
        if self.key_serde is not None:
            return self.key_serde.dumps(key), value
        if isinstance(key, str):
            return key.encode(), value
        if isinstance(key, bytes | bytearray | memoryview):
            return bytes(key), value
        raise UserFunctionError(
            f"KafkaSink {self.topic}: key function returned {type(key).__name__}, not bytes or str"
        )

    def encode_item(self, meta: Meta, payload: object) -> tuple[bytes | None, bytes, bytes, bytes]:
        """The output record of the item ``meta``, signed (`framework.wire.bundles.signed_item`):
        the barrier writes it as it is."""
        key, value = self.encode(payload)
        return signed_item(meta, key, value, self.topic)

    def encode_items(
        self, metas: Sequence[Meta], payloads: Sequence[Any]
    ) -> list[tuple[bytes | None, bytes, bytes, bytes]]:
        """`encode_item` of each item, signed in bulk (`framework.wire.bundles.signed_items`)."""
        encoded = [self.encode(payload) for payload in payloads]
        keys = [key for key, _ in encoded]
        values = [value for _, value in encoded]
        return signed_items(metas, keys, values, self.topic)

    def __repr__(self) -> str:
        shown = f", barriers={self.barriers}" if self.barriers > 1 else ""
        return f"KafkaSink({self.topic!r}, value={self.value!r}{shown})"


def kafka_sources(graph: Graph) -> dict[str, KafkaSource]:
    """Source node id -> its `KafkaSource`; `PipelineError` for any other source."""
    sources: dict[str, KafkaSource] = {}
    for node in graph.by_kind(Kind.SOURCE):
        if not isinstance(node.endpoint, KafkaSource):
            raise PipelineError(f"{node.describe()}: this runner needs a KafkaSource")
        sources[node.id] = node.endpoint
    topics = [s.topic for s in sources.values()]
    if len(set(topics)) != len(topics):
        raise PipelineError("two sources read the same topic: read it once and broadcast")
    return sources


def sink_nodes(graph: Graph) -> list[str]:
    """Ids of the sink nodes, each a `KafkaSink` (`PipelineError` otherwise)."""
    nodes = []
    for node in graph.by_kind(Kind.SINK):
        if not isinstance(node.endpoint, KafkaSink):
            raise PipelineError(f"{node.describe()}: this runner needs a KafkaSink")
        nodes.append(node.id)
    return nodes
