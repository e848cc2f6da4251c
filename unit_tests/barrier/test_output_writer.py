"""How the barrier makes its output and its positions visible together: the steps of each
writer against fake producers (the real transactions: integration_tests/test_services.py)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from framework.barrier.output_writer import PlainWriter, TransactionalWriter
from framework.errors import KafkaClientError, PipelineError
from framework.wire.records import OutRecord


class _Txn:
    """A `TransactionalProducer` that records what it is asked to do."""

    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[Any] = []
        self.fail_on = fail_on
        self.producer: object | None = None

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if name == self.fail_on:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def start(self) -> None:
        self.producer = object()
        self._call("start")

    def begin(self) -> None:
        self._call("begin")

    def produce(self, record: OutRecord) -> None:
        self._call("produce", record.value)

    def send_offsets(self, positions: list[TopicPartition], _meta: object) -> None:
        self._call("send_offsets", [(p.topic, p.partition, p.offset) for p in positions])

    def flush(self) -> None:
        self._call("flush")

    def commit(self) -> None:
        self._call("commit")

    def abort(self) -> None:
        self.calls.append(("abort",))

    def close(self) -> None:
        self.calls.append(("close",))


class _Consumer:
    def consumer_group_metadata(self) -> object:
        return "group-metadata"


class _Producer:
    """An idempotent producer whose deliveries fail with ``error`` (None: they succeed)."""

    def __init__(self, error: KafkaError | None = None) -> None:
        self.error = error
        self.sent: list[bytes | None] = []
        self.pending: list[Any] = []

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.sent.append(kwargs["value"])
        self.pending.append(kwargs.get("on_delivery"))

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        for callback in self.pending:
            if callback is not None:
                callback(self.error, None)
        self.pending.clear()
        return 0

    def close(self) -> None:
        pass


RECORDS = [OutRecord("out", 0, None, b"a"), OutRecord("out", 0, None, b"b")]
POSITIONS = [TopicPartition("pre", 0, 7)]


def _writer(txn: _Txn) -> TransactionalWriter:
    writer = TransactionalWriter("kafka:9092", _Consumer(), "app.barrier")  # type: ignore[arg-type]
    writer.txn = txn  # type: ignore[assignment]
    return writer


def test_records_and_positions_go_in_one_transaction_in_the_steps_order() -> None:
    txn = _Txn()
    writer = _writer(txn)
    writer.open()
    writer.write(RECORDS, POSITIONS)
    assert txn.calls == [
        ("start",),
        ("begin",),
        ("produce", b"a"),
        ("produce", b"b"),
        ("send_offsets", [("pre", 0, 7)]),
        ("commit",),
    ]
    txn.calls.clear()
    writer.write(RECORDS[:1], [])  # no positions: none sent
    assert txn.calls == [("begin",), ("produce", b"a"), ("commit",)]


@pytest.mark.parametrize("step", ["begin", "produce", "send_offsets", "commit"])
def test_a_failed_step_aborts_and_raises_a_kafka_client_error(step: str) -> None:
    txn = _Txn(fail_on=step)
    writer = _writer(txn)
    writer.open()
    with pytest.raises(KafkaClientError, match=r"'app.barrier' failed \(2 records\)"):
        writer.write(RECORDS, POSITIONS)
    assert txn.calls[-1] == ("abort",)
    assert ("commit",) not in txn.calls[:-1] or step == "commit"


def test_a_writer_not_opened_refuses_to_write() -> None:
    with pytest.raises(PipelineError, match="not open"):
        _writer(_Txn()).write(RECORDS, POSITIONS)


def _plain(producer: _Producer, txn: _Txn) -> PlainWriter:
    writer = PlainWriter("kafka:9092", _Consumer(), "app.barrier")  # type: ignore[arg-type]
    writer._positions = _writer(txn)
    writer._positions.open()
    writer._producer = producer  # type: ignore[assignment]
    return writer


def test_at_least_once_writes_the_output_then_the_positions_alone() -> None:
    producer, txn = _Producer(), _Txn()
    _plain(producer, txn).write(RECORDS, POSITIONS)
    assert producer.sent == [b"a", b"b"]
    assert txn.calls[1:] == [("begin",), ("send_offsets", [("pre", 0, 7)]), ("commit",)]


def test_at_least_once_commits_no_position_past_an_output_that_failed() -> None:
    producer, txn = _Producer(KafkaError(KafkaError._MSG_TIMED_OUT)), _Txn()
    with pytest.raises(KafkaClientError, match="at-least-once write failed"):
        _plain(producer, txn).write(RECORDS, POSITIONS)
    assert txn.calls == [("start",)]  # no transaction: the positions stay where they were
