"""The transactional layer without a broker: what it refuses before any Kafka call, and how
it gives up a producer whose call hangs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from framework.errors import KafkaClientError
from framework.kafka.transactions import TransactionalProducer, must_restart
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


class _HungProducer:
    """A producer whose send_offsets_to_transaction never returns (librdkafka's wait for
    a group coordinator it knew before a broker restart), until released; ``lost`` is the
    error its poll serves (a broker connection lost), if any."""

    def __init__(self, txn: TransactionalProducer, lost: KafkaError | None = None) -> None:
        self.txn, self.lost = txn, lost
        self.release = threading.Event()
        self.closed = False

    def send_offsets_to_transaction(self, *_: Any) -> None:
        self.release.wait(30)

    def poll(self, _timeout: float) -> int:
        if self.lost is not None:
            self.txn._on_error(self.lost)
        return 0

    def close(self) -> None:
        self.closed = True


def test_a_hung_send_offsets_after_a_lost_broker_gives_the_producer_up() -> None:
    txn = TransactionalProducer("127.0.0.1:1", "app.stage.p0")
    hung = _HungProducer(txn, KafkaError(KafkaError._ALL_BROKERS_DOWN))
    txn.producer = hung  # type: ignore[assignment]
    txn.send_offsets_bound_s = 0.2
    started = time.monotonic()
    try:
        with pytest.raises(KafkaException, match=r"hung for 0\.2 s") as raised:
            txn.send_offsets([], None)
        assert time.monotonic() - started < 5
        assert must_restart(raised.value)  # callers start a new producer
        assert txn.producer is None and txn.replaced == 1
        assert not hung.closed  # never closed under the thread that still waits in it
        txn.drop()  # a caller's clean-up touches nothing of it
        assert not hung.closed
    finally:
        hung.release.set()


def test_a_slow_answer_without_a_lost_broker_is_waited_for() -> None:
    """A busy broker's coordinator answering after the bound: the producer is kept."""
    txn = TransactionalProducer("127.0.0.1:1", "app.stage.p0")
    slow = _HungProducer(txn)
    txn.producer = slow  # type: ignore[assignment]
    txn.send_offsets_bound_s = 0.2
    threading.Timer(1.5, slow.release.set).start()
    txn.send_offsets([], None)
    assert txn.producer is slow and txn.replaced == 0


def test_no_answer_at_all_gives_the_producer_up_after_its_timeout() -> None:
    txn = TransactionalProducer("127.0.0.1:1", "app.stage.p0")
    hung = _HungProducer(txn)
    txn.producer = hung  # type: ignore[assignment]
    txn.send_offsets_bound_s, txn.timeout_s = 0.1, 0.5
    try:
        with pytest.raises(KafkaException, match=r"hung for 0\.5 s"):
            txn.send_offsets([], None)
        assert txn.producer is None and txn.replaced == 1
    finally:
        hung.release.set()


def test_a_failing_send_offsets_raises_its_own_error() -> None:
    class _Refusing(_HungProducer):
        def send_offsets_to_transaction(self, *_: Any) -> None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "gone"))

    txn = TransactionalProducer("127.0.0.1:1", "app.stage.p0")
    txn.producer = _Refusing(txn)  # type: ignore[assignment]
    with pytest.raises(KafkaException, match="gone"):
        txn.send_offsets([], None)
    assert txn.producer is not None and txn.replaced == 0


def test_a_lost_broker_connection_is_noted_from_the_error_callback() -> None:
    txn = TransactionalProducer("127.0.0.1:1", "app.stage.p0", restart_fenced=True)
    txn._on_error(KafkaError(KafkaError.REQUEST_TIMED_OUT))
    assert not txn.lost_broker
    txn._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert txn.lost_broker
