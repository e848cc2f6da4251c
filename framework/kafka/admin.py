"""Topics: create them idempotently, check their configuration, read their end offsets.

Every function takes the bootstrap servers and shares one admin client per bootstrap in
the process. Failures raise `ConfigError` naming the topic and what to do, an outage
(no broker answering, or an error that stays transient for the whole deadline)
`KafkaClientError`, which a running pipeline outlives by restarting; no
``confluent_kafka`` exception escapes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

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

from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import ConfigError, FlamepipeError, KafkaClientError, KafkaUnreachable
from framework.kafka.cache import ProcessCache
from framework.kafka.retry import is_transient
from framework.kafka.security import secured
from framework.net import unreachable

LOG_APPEND_TIME = "LogAppendTime"
_TIMESTAMP_TYPE = "message.timestamp.type"
T = TypeVar("T")

# An admin client has no close: dropping the last reference releases it.
_clients: ProcessCache[str, AdminClient] = ProcessCache(lambda client: None)

# Bootstraps this process has reached: refusing connections after that is an outage,
# asked through; before it, the address may be wrong, and one line says so at once.
_reached: set[str] = set()


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


def admin_client(bootstrap: str) -> AdminClient:
    """This process's admin client of ``bootstrap`` (with the installed client properties)."""
    return _admin(bootstrap)


def _admin(bootstrap: str) -> AdminClient:
    return _clients.get(bootstrap, lambda: _new_admin(bootstrap))


def _new_admin(bootstrap: str) -> AdminClient:
    check_reachable(bootstrap)
    _reached.add(bootstrap)
    return AdminClient(secured({"bootstrap.servers": bootstrap}))


def check_reachable(bootstrap: str) -> None:
    """`KafkaUnreachable` in one line if no address of ``bootstrap`` accepts a TCP
    connection within a few seconds (`framework.net`): a Kafka client would otherwise retry
    for its whole timeout and log every reconnect.

    Not a `ConfigError`: a running pipeline meets it when its broker restarts (a task
    started meanwhile makes its first admin client), and a configuration error is final,
    so the driver stopped for good (measured: once in a broker restart of the crash
    harness). A wrong address at start-up is reported by the start's own wait for the
    cluster (`framework.runners.startup`) as a `ConfigError`."""
    reasons = unreachable(bootstrap)
    if reasons is not None:
        raise KafkaUnreachable(
            f"cannot reach Kafka at {bootstrap} ({'; '.join(reasons)}): start it "
            "(`flamepipe up`) or point bootstrap_servers (FLAMEPIPE_BOOTSTRAP_SERVERS, "
            "--bootstrap) at a running broker"
        )


def close_cached() -> None:
    """Release this process's admin clients (tests, shutdown)."""
    _clients.clear()


# Errors a just-created topic answers with until its partition leaders are ready.
def _error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _code(exc: BaseException) -> int | None:
    error = _error(exc)
    return None if error is None else int(error.code())


def _failed(bootstrap: str, what: str, exc: BaseException) -> FlamepipeError:
    if _code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return ConfigError(f"Kafka at {bootstrap}: cannot {what}: no such topic")
    if isinstance(exc, KafkaException) and is_transient(exc):
        # Still passing when the deadline ran out: an outage, which a restart outlives.
        return KafkaClientError(
            f"Kafka at {bootstrap}: cannot {what} for {DEFAULT_TIMEOUT_S:.0f} s: {exc}"
        )
    return ConfigError(f"Kafka at {bootstrap}: cannot {what}: {exc}")


def _stale_epoch(exc: KafkaException) -> bool:
    error = _error(exc)
    return error is not None and error.code() in (
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
    )


def _ask(bootstrap: str, what: str, ask: Callable[[], T]) -> T:
    """``ask()``, asked again while Kafka's error is transient; else a `ConfigError`."""
    deadline = Deadline(DEFAULT_TIMEOUT_S)
    while True:
        try:
            return ask()
        except KafkaException as exc:
            if not is_transient(exc) or deadline.expired:
                raise _failed(bootstrap, what, exc) from exc
            if _stale_epoch(exc):
                # The client asks with the leader epochs of its metadata from before a
                # broker restart and is refused for as long as it keeps it (an acker's
                # admin client failed so for 30 s): a new client fetches fresh metadata.
                # The old one is not closed here: another thread may be using it.
                _clients.discard(bootstrap)
        except KafkaUnreachable:
            # A broker restarting refuses connections for seconds: asked again like a
            # transient error, by a new client once it answers. An address this process
            # never reached fails at once (`flamepipe consume --bootstrap` with a typo:
            # one line within seconds, not after the deadline).
            if bootstrap not in _reached or deadline.expired:
                raise
        except FlamepipeError:
            raise
        except Exception as exc:  # the futures' own timeouts and client errors
            raise _failed(bootstrap, what, exc) from exc
        finally:  # an admin client's log lines are served by its poll (see framework.logs)
            if (client := _clients.peek(bootstrap)) is not None:
                with contextlib.suppress(Exception):
                    client.poll(0)
        time.sleep(0.1)


def partitions_if_exists(bootstrap: str, topic: str) -> int:
    """The number of partitions of ``topic``, 0 if it does not exist (yet)."""
    return len(_describe(bootstrap, [topic]).get(topic, []))


def partition_count(bootstrap: str, topic: str) -> int:
    """The number of partitions of ``topic``; `ConfigError` if it does not exist."""
    described = _describe(bootstrap, [topic])
    if topic not in described:
        raise ConfigError(f"Kafka at {bootstrap}: topic {topic!r} does not exist")
    return len(described[topic])


def _describe(bootstrap: str, topics: Iterable[str]) -> dict[str, list[Any]]:
    """The partitions (with their leaders) of those ``topics`` that exist.

    Describing never creates a topic, unlike a metadata request on a broker that
    auto-creates topics.
    """
    names = list(topics)

    def ask() -> dict[str, list[Any]]:
        futures = _admin(bootstrap).describe_topics(TopicCollection(names))
        found: dict[str, list[Any]] = {}
        for name, future in futures.items():
            try:
                found[name] = list(future.result(timeout=DEFAULT_TIMEOUT_S).partitions)
            except KafkaException as exc:
                if _code(exc) != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
        return found

    return _ask(bootstrap, f"describe topics {names}", ask) if names else {}


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
    existing = _describe(bootstrap, wanted)
    for name, partitions in existing.items():
        _check_partitions(wanted[name], len(partitions))
    missing = [spec for name, spec in wanted.items() if name not in existing]
    if missing:
        _create(bootstrap, missing)
        _await_ready(bootstrap, missing)


def _create(bootstrap: str, specs: list[TopicSpec]) -> None:
    new = [NewTopic(s.name, s.partitions, s.replication, config=dict(s.config)) for s in specs]
    by_name = {spec.name: spec for spec in specs}

    def ask() -> None:
        futures = _admin(bootstrap).create_topics(new, request_timeout=DEFAULT_TIMEOUT_S)
        for future in futures.values():
            try:
                future.result(timeout=DEFAULT_TIMEOUT_S)
            except KafkaException as exc:
                # A concurrent creator won; its topic may not be visible here yet, so its
                # size is checked once it is (`_await_ready`).
                if _code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    _ask(bootstrap, f"create topics {list(by_name)}", ask)


def _await_ready(bootstrap: str, specs: list[TopicSpec]) -> None:
    """Wait until every new topic has all its partitions led: creation returns before."""
    deadline = Deadline(DEFAULT_TIMEOUT_S)
    names = [spec.name for spec in specs]
    while True:
        described = _describe(bootstrap, names)
        if all(_led(described.get(spec.name, [])) for spec in specs):
            for spec in specs:
                _check_partitions(spec, len(described[spec.name]))
            return
        if deadline.expired:
            raise ConfigError(f"Kafka at {bootstrap}: topics {names} did not become ready")
        time.sleep(0.05)


def _led(partitions: list[Any]) -> bool:
    return bool(partitions) and all(p.leader is not None for p in partitions)


def timestamp_type(bootstrap: str, topic: str) -> str:
    """The ``message.timestamp.type`` of ``topic``: ``CreateTime`` or ``LogAppendTime``."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    what = f"describe the configuration of topic {topic!r}"
    # A missing topic is unknown to describe_configs, which Kafka calls retriable: asking
    # it first spares a misspelled source its 30 s of retries before the error.
    if topic not in _describe(bootstrap, [topic]):
        raise ConfigError(f"Kafka at {bootstrap}: cannot {what}: no such topic")

    def ask() -> str:
        futures = _admin(bootstrap).describe_configs([resource], request_timeout=DEFAULT_TIMEOUT_S)
        entries = next(iter(futures.values())).result(timeout=DEFAULT_TIMEOUT_S)
        return str(entries[_TIMESTAMP_TYPE].value)

    return _ask(bootstrap, what, ask)


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


def end_offsets(
    bootstrap: str, topic: str, *, committed: bool = False, partitions: int | None = None
) -> dict[int, int]:
    """The end offset of every partition of ``topic``: its high watermark.

    With ``committed``, the last stable offset instead: the end a read_committed reader
    sees. It may trail a just-committed transaction by a few milliseconds: the commit
    returns before the broker has written the markers. ``partitions``: the topic's
    partition count if the caller knows it (describing the topic costs the broker more
    than listing the offsets).
    """
    if partitions is None:
        partitions = partition_count(bootstrap, topic)
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {TopicPartition(topic, p): latest for p in range(partitions)}
    what = f"list the end offsets of topic {topic!r}"

    def ask() -> dict[int, int]:
        futures = _admin(bootstrap).list_offsets(
            request, isolation_level=isolation, request_timeout=DEFAULT_TIMEOUT_S
        )
        return {
            tp.partition: f.result(timeout=DEFAULT_TIMEOUT_S).offset for tp, f in futures.items()
        }

    return _ask(bootstrap, what, ask)


def offsets_at(bootstrap: str, topic: str, at_ms: int | None) -> dict[int, int]:
    """Per partition, the first offset stamped at or after ``at_ms`` (None: the first offset).

    A partition with no record that late gets its end offset: a replay from there reads
    only what comes next. The end is read first: a record appended between the two
    questions is then after the end, never skipped.
    """
    ends = end_offsets(bootstrap, topic)
    partitions = len(ends)
    spec = (
        OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        if at_ms is None
        else OffsetSpec.for_timestamp(at_ms)
    )
    request = {TopicPartition(topic, p): spec for p in range(partitions)}
    what = f"list the offsets of topic {topic!r} at {at_ms}"

    def ask() -> dict[int, int]:
        futures = _admin(bootstrap).list_offsets(request, request_timeout=DEFAULT_TIMEOUT_S)
        return {
            tp.partition: f.result(timeout=DEFAULT_TIMEOUT_S).offset for tp, f in futures.items()
        }

    found = _ask(bootstrap, what, ask)
    return {p: offset if offset >= 0 else ends[p] for p, offset in found.items()}


def delete_records(
    bootstrap: str, below: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Delete the records of each ``(topic, partition)`` before its offset (the broker's
    DeleteRecords: the log start moves up, disk is freed at the next segment roll).

    Returns the new log start of each partition. Offsets <= 0 are skipped; an offset past
    the end is an error of the caller (`ConfigError`).
    """
    request = [TopicPartition(t, p, o) for (t, p), o in sorted(below.items()) if o > 0]
    if not request:
        return {}
    what = f"delete records of {sorted({t for t, _ in below})}"

    def ask() -> dict[tuple[str, int], int]:
        futures = _admin(bootstrap).delete_records(request, request_timeout=DEFAULT_TIMEOUT_S)
        out = {}
        for tp, future in futures.items():
            result = future.result(timeout=DEFAULT_TIMEOUT_S)
            out[(tp.topic, tp.partition)] = int(result.low_watermark)
        return out

    return _ask(bootstrap, what, ask)


def list_topics(bootstrap: str) -> list[str]:
    """The names of every topic on the cluster (internal ones of Kafka's own excluded)."""

    def ask() -> list[str]:
        meta = _admin(bootstrap).list_topics(timeout=DEFAULT_TIMEOUT_S)
        return sorted(name for name in meta.topics if not name.startswith("__"))

    return _ask(bootstrap, "list topics", ask)


def delete_topics(bootstrap: str, names: Iterable[str]) -> None:
    """Delete ``names`` (a missing one is not an error: it is gone already)."""
    wanted = sorted(set(names))
    if not wanted:
        return

    def ask() -> None:
        futures = _admin(bootstrap).delete_topics(wanted, operation_timeout=DEFAULT_TIMEOUT_S)
        for future in futures.values():
            try:
                future.result(timeout=DEFAULT_TIMEOUT_S)
            except KafkaException as exc:
                if _code(exc) != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise

    _ask(bootstrap, f"delete topics {wanted}", ask)
