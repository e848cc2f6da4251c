"""Which Kafka errors pass by themselves, and retrying a call while they do.

A topic created a moment ago has no leader yet, a consumer group used for the first time
has no coordinator loaded yet: such errors pass within seconds, so every adapter asks again
instead of failing the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import KafkaClientError
from framework.retries import Retry

T = TypeVar("T")

TRANSIENT = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # A client's metadata right after a broker restart: known again within seconds.
        KafkaError._UNKNOWN_PARTITION,
        # A request made with the leader epoch of the metadata from before a broker
        # restart (the crash harness saw the acker's offsets lookup die of it): the next
        # metadata refresh carries the new epoch.
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)
"""Error codes that pass by themselves, beyond those librdkafka marks retriable."""


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a Kafka error worth asking again for."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    error = exc.args[0]
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in TRANSIENT)


def retry(
    what: str, call: Callable[[], T], timeout_s: float = DEFAULT_TIMEOUT_S, pause_s: float = 0.05
) -> T:
    """``call()``, asked again while its Kafka error is transient (at most ``timeout_s``).

    Any other Kafka error, or a transient one past the deadline, becomes a
    `KafkaClientError` saying ``what`` failed.
    """
    policy = Retry(is_transient, within_s=timeout_s, first_s=pause_s)
    try:
        return policy.call(call)
    except KafkaException as exc:
        raise KafkaClientError(f"{what}: {exc}") from exc
