"""The transactional layer without a broker: what it refuses before any Kafka call."""

from __future__ import annotations

import pytest

from framework.errors import KafkaClientError
from framework.kafka.transactions import TransactionalProducer
from framework.wire.records import OutRecord


def test_calls_before_start_name_the_transactional_id() -> None:
    txn = TransactionalProducer("127.0.0.1:1", "app.sink.barrier")
    with pytest.raises(KafkaClientError, match=r"'app.sink.barrier': the producer is not started"):
        txn.begin()
    with pytest.raises(KafkaClientError, match="not started"):
        txn.produce(OutRecord("t", 0, None, b"v"))
    with pytest.raises(KafkaClientError, match="not started"):
        txn.commit()


def test_abort_and_close_without_a_producer_are_harmless() -> None:
    txn = TransactionalProducer("127.0.0.1:1", "app.sink.barrier")
    assert txn.abort() is False
    txn.close()
    assert txn.producer is None
