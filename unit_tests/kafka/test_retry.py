"""Which Kafka errors `framework.kafka.retry` asks again for."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from framework.errors import KafkaClientError
from framework.kafka.retry import is_transient, retry


def _error(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def test_errors_of_a_restarting_broker_pass() -> None:
    for code in (
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
    ):
        assert is_transient(_error(code))
    assert not is_transient(_error(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not is_transient(ValueError("not kafka"))


def test_retry_asks_again_until_the_error_passes() -> None:
    outcomes = [_error(KafkaError._UNKNOWN_PARTITION)] * 3

    def call() -> str:
        if outcomes:
            raise outcomes.pop()
        return "offsets"

    assert retry("read offsets", call, timeout_s=5, pause_s=0) == "offsets"


def test_a_lasting_error_says_what_failed() -> None:
    def call() -> str:
        raise _error(KafkaError.TOPIC_AUTHORIZATION_FAILED)

    with pytest.raises(KafkaClientError, match="read offsets"):
        retry("read offsets", call, timeout_s=5, pause_s=0)
