"""The acker service's own steps with its Kafka clients faked: a checkpoint only once the
reports it covers are delivered (`_checkpoint`, steps 1-2), and where a restarted acker's
replay gates open (its last published reports, read back from the mintime topic's end)."""

from __future__ import annotations

from typing import Any

import pytest

from framework.acker import service as module
from framework.acker.service import AckerService
from framework.core.messages import MinTimeNotification, NodeTime
from framework.errors import KafkaClientError
from framework.wire.auth import MAC_HEADER, current
from framework.wire.avro import encode_min_time
from framework.wire.checkpoints import decode_checkpoint


class _Producer:
    def __init__(self, undelivered: int = 0) -> None:
        self.undelivered = undelivered
        self.produced: list[tuple[str, dict[str, Any]]] = []

    def flush(self, _timeout: float) -> int:
        return self.undelivered

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.produced.append((topic, kwargs))


def _acker(producer: _Producer) -> AckerService:
    acker = AckerService("127.0.0.1:1", "app", {"s": []}, [7], 2)
    acker._producer = producer  # type: ignore[assignment]
    acker._replaying = set()
    acker._next = {0: 11, 1: 22}
    return acker


def test_step_1_no_checkpoint_while_reports_are_undelivered() -> None:
    producer = _Producer(undelivered=3)
    acker = _acker(producer)
    acker._unsaved = {0, 1}
    acker._checkpoint()
    assert producer.produced == [] and acker.checkpoints == 0
    assert acker._unsaved == {0, 1}, "tried again at the next interval"


def test_step_1_a_failed_report_fails_the_acker_before_any_checkpoint() -> None:
    acker = _acker(_Producer())
    acker._unsaved = {0}
    acker._failures = ["broker down"]
    with pytest.raises(KafkaClientError, match="cannot publish min times: broker down"):
        acker._checkpoint()


def test_step_2_each_moved_shard_saves_its_state_with_the_offset_after_its_last_batch() -> None:
    producer = _Producer()
    acker = _acker(producer)
    acker._unsaved = {0, 1}
    acker._replaying = {1}  # still replaying: its state is behind what was published
    acker._checkpoint()
    ((topic, record),) = producer.produced
    assert topic == acker.topics.acker and record["key"] == b"0"
    assert decode_checkpoint(record["value"])[0] == 11
    assert acker._unsaved == {1} and acker.checkpoints == 1


class _Report:
    def __init__(self, key: bytes, note: MinTimeNotification, signed: bool = True) -> None:
        self._key, self._value = key, encode_min_time(note)
        mac = current().sign("app.mintime", key, self._value)
        self._headers = [(MAC_HEADER, mac)] if signed else []

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def topic(self) -> str:
        return "app.mintime"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 0


def _note(shard: int, time: int) -> MinTimeNotification:
    return MinTimeNotification(None, 5, (NodeTime(1, time),), shard=shard)


def test_the_last_published_reports_are_read_back_until_every_shard_has_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shard 0's last global report is the newest one; shard 1's lies further back; a
    segment report and an unsigned (forged) global one do not count."""
    log = [
        _Report(b"1:*", _note(1, 4)),
        _Report(b"0:*", _note(0, 6)),
        _Report(b"0:s", _note(0, 99)),
        _Report(b"0:*", _note(0, 7)),
        _Report(b"1:*", _note(1, 50), signed=False),
    ]
    windows: list[int] = []

    def read_back(_consumer: Any, _topic: str, _partition: int, enough: Any) -> list[Any]:
        for size in (2, 4, len(log)):  # windows growing back from the end
            windows.append(size)
            if enough(log[-size:]) or size == len(log):
                return log[-size:]
        raise AssertionError("unreachable")

    monkeypatch.setattr(module, "new_consumer", lambda *_a, **_k: None)
    monkeypatch.setattr(module, "close_quietly", lambda _c: None)
    monkeypatch.setattr(module, "read_back", read_back)
    acker = AckerService("127.0.0.1:1", "app", {"s": []}, [7], 2)
    assert acker._last_published() == {0: {1: 7}, 1: {1: 4}}
    assert windows == [2, 4, 5], "read back until shard 1's authentic report was found"
