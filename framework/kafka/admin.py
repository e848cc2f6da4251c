"""Topics: create them idempotently, check their configuration, read their end offsets.

Every function takes the bootstrap servers and shares one admin client per bootstrap in
the process. Failures raise `ConfigError` naming the topic and what to do; no
``confluent_kafka`` exception escapes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)

# Public names that confluent_kafka.admin re-exports without declaring them in __all__.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from framework.errors import ConfigError

__all__ = [
    "LOG_APPEND_TIME",
    "TopicSpec",
    "compacted_spec",
    "end_offsets",
    "ensure_topics",
    "input_topic_spec",
    "partition_count",
    "require_log_append_time",
    "timestamp_type",
]

LOG_APPEND_TIME = "LogAppendTime"
_TIMESTAMP_TYPE = "message.timestamp.type"
_TIMEOUT_S = 30.0

_clients: dict[str, AdminClient] = {}
_clients_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic to create: its name, partition count and topic configs.

    ``replication`` -1 takes the broker's ``default.replication.factor``.
    """

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    replication: int = -1


def input_topic_spec(name: str, partitions: int) -> TopicSpec:
    """A user input topic: broker-assigned timestamps, which never go back in a partition."""
    return TopicSpec(name, partitions, {_TIMESTAMP_TYPE: LOG_APPEND_TIME})


def compacted_spec(
    name: str, partitions: int, config: Mapping[str, str] | None = None
) -> TopicSpec:
    """A compacted topic (changelogs, min times): the latest value per key is kept."""
    return TopicSpec(name, partitions, {**(config or {}), "cleanup.policy": "compact"})


def _admin(bootstrap: str) -> AdminClient:
    with _clients_lock:
        client = _clients.get(bootstrap)
        if client is None:
            client = _clients[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
        return client


def _code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        code: int = exc.args[0].code()
        return code
    return None


def _failed(bootstrap: str, what: str, exc: BaseException) -> ConfigError:
    return ConfigError(f"Kafka at {bootstrap}: cannot {what}: {exc}")


def _result(bootstrap: str, what: str, future: Any) -> Any:
    """A future's result; Kafka errors become `ConfigError` naming ``what`` was asked."""
    try:
        return future.result(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        if _code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise ConfigError(f"Kafka at {bootstrap}: cannot {what}: no such topic") from exc
        raise _failed(bootstrap, what, exc) from exc
    except Exception as exc:  # timeouts and client errors of the future
        raise _failed(bootstrap, what, exc) from exc


def partition_count(bootstrap: str, topic: str) -> int:
    """The number of partitions of ``topic``; `ConfigError` if it does not exist."""
    counts = _partition_counts(bootstrap, [topic])
    if topic not in counts:
        raise ConfigError(f"Kafka at {bootstrap}: topic {topic!r} does not exist")
    return counts[topic]


def _partition_counts(bootstrap: str, topics: Iterable[str]) -> dict[str, int]:
    """Partition counts of those ``topics`` that exist (describing never creates one)."""
    names = list(topics)
    if not names:
        return {}
    try:
        futures = _admin(bootstrap).describe_topics(TopicCollection(names))
    except KafkaException as exc:
        raise _failed(bootstrap, f"describe topics {names}", exc) from exc
    counts: dict[str, int] = {}
    for name, future in futures.items():
        try:
            counts[name] = len(future.result(timeout=_TIMEOUT_S).partitions)
        except KafkaException as exc:
            if _code(exc) != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise _failed(bootstrap, f"describe topic {name!r}", exc) from exc
    return counts


def _check_partitions(spec: TopicSpec, actual: int) -> None:
    if actual < spec.partitions:
        raise ConfigError(
            f"topic {spec.name!r} has {actual} partition(s), flamepipe needs "
            f"{spec.partitions}: add partitions (kafka-topics.sh --alter --topic {spec.name} "
            f"--partitions {spec.partitions}) or use a new topic"
        )


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec]) -> None:
    """Create the missing topics of ``specs``; existing ones need enough partitions.

    Idempotent and safe against concurrent creators. An existing topic keeps its
    configuration (check what matters, e.g. `require_log_append_time`).
    """
    wanted = {spec.name: spec for spec in specs}
    existing = _partition_counts(bootstrap, wanted)
    for name, actual in existing.items():
        _check_partitions(wanted[name], actual)
    missing = [spec for name, spec in wanted.items() if name not in existing]
    if missing:
        _create(bootstrap, missing)
        _await_visible(bootstrap, missing)


def _create(bootstrap: str, specs: list[TopicSpec]) -> None:
    new = [NewTopic(s.name, s.partitions, s.replication, config=dict(s.config)) for s in specs]
    try:
        futures = _admin(bootstrap).create_topics(new, request_timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise _failed(bootstrap, f"create topics {[s.name for s in specs]}", exc) from exc
    by_name = {spec.name: spec for spec in specs}
    for name, future in futures.items():
        try:
            future.result(timeout=_TIMEOUT_S)
        except KafkaException as exc:
            if _code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent creator won
                raise _failed(bootstrap, f"create topic {name!r}", exc) from exc
            _check_partitions(by_name[name], partition_count(bootstrap, name))


def _await_visible(bootstrap: str, specs: list[TopicSpec]) -> None:
    """Wait until the metadata shows every new topic (creation returns before it may)."""
    deadline = time.monotonic() + _TIMEOUT_S
    names = [spec.name for spec in specs]
    while True:
        counts = _partition_counts(bootstrap, names)
        if all(counts.get(spec.name, 0) >= spec.partitions for spec in specs):
            return
        if time.monotonic() > deadline:
            raise ConfigError(f"Kafka at {bootstrap}: topics {names} did not appear in time")
        time.sleep(0.05)


def timestamp_type(bootstrap: str, topic: str) -> str:
    """The ``message.timestamp.type`` of ``topic``: ``CreateTime`` or ``LogAppendTime``."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    what = f"describe the configuration of topic {topic!r}"
    try:
        futures = _admin(bootstrap).describe_configs([resource], request_timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise _failed(bootstrap, what, exc) from exc
    entries = _result(bootstrap, what, next(iter(futures.values())))
    value: str = entries[_TIMESTAMP_TYPE].value
    return value


def require_log_append_time(bootstrap: str, topic: str) -> None:
    """`ConfigError` with the fix unless ``topic`` stamps records with LogAppendTime."""
    kind = timestamp_type(bootstrap, topic)
    if kind != LOG_APPEND_TIME:
        raise ConfigError(
            f"input topic {topic!r} uses {_TIMESTAMP_TYPE}={kind}; flamepipe needs "
            f"{LOG_APPEND_TIME}, because producer timestamps can go back and break the "
            f"heartbeats of global time. Fix: kafka-configs.sh --bootstrap-server {bootstrap} "
            f"--alter --entity-type topics --entity-name {topic} "
            f"--add-config {_TIMESTAMP_TYPE}={LOG_APPEND_TIME} "
            "(or delete it and let flamepipe create it)"
        )


def end_offsets(bootstrap: str, topic: str, *, committed: bool = False) -> dict[int, int]:
    """The end offset of every partition of ``topic``: its high watermark.

    With ``committed``, the last stable offset instead: the end a read_committed reader
    sees. It may trail a just-committed transaction by a few milliseconds: the commit
    returns before the broker has written the markers.
    """
    partitions = partition_count(bootstrap, topic)
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {TopicPartition(topic, p): latest for p in range(partitions)}
    what = f"list the end offsets of topic {topic!r}"
    try:
        futures = _admin(bootstrap).list_offsets(
            request, isolation_level=isolation, request_timeout=_TIMEOUT_S
        )
    except KafkaException as exc:
        raise _failed(bootstrap, what, exc) from exc
    return {tp.partition: _result(bootstrap, what, f).offset for tp, f in futures.items()}
