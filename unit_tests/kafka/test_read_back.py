"""`framework.kafka.clients.read_back`: the last records of a partition, looking further
back only when what was read is not enough."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from framework.kafka.clients import read_back


class _Eof:
    def code(self) -> int:
        return KafkaError._PARTITION_EOF


class _Message:
    def __init__(self, offset: int | None, topic: str = "t") -> None:
        self._offset, self._topic = offset, topic

    def error(self) -> _Eof | None:
        return _Eof() if self._offset is None else None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return -1 if self._offset is None else self._offset


class _Consumer:
    """Offsets ``low..end-1`` hold records but those in ``gaps`` (compacted away, markers)."""

    def __init__(self, low: int, end: int, gaps: frozenset[int] = frozenset()) -> None:
        self.low, self.end, self.gaps = low, end, gaps
        self.starts: list[int] = []
        self._queue: list[_Message] = []

    def get_watermark_offsets(self, _tp: TopicPartition, *_: Any, **__: Any) -> tuple[int, int]:
        return self.low, self.end

    def assign(self, tps: list[TopicPartition]) -> None:
        (tp,) = tps
        self.starts.append(tp.offset)
        kept = [o for o in range(tp.offset, self.end) if o not in self.gaps]
        self._queue = [_Message(o) for o in kept] + [_Message(None)]

    def consume(self, most: int, _timeout: float) -> list[_Message]:
        taken, self._queue = self._queue[:most], self._queue[most:]
        return taken


def _offsets(records: list[Any]) -> list[int]:
    return [r.offset() for r in records]


def test_the_last_window_is_enough_when_it_holds_what_is_looked_for() -> None:
    consumer = _Consumer(0, 10_000)
    seen: list[list[int]] = []

    def enough(records: list[Any]) -> bool:
        seen.append(_offsets(records))
        return True

    records = read_back(consumer, "t", 0, enough)  # type: ignore[arg-type]
    assert _offsets(records) == list(range(10_000 - 64, 10_000))
    assert consumer.starts == [10_000 - 64]
    assert seen == [_offsets(records)], "enough saw exactly the records returned"


def test_windows_grow_eightfold_until_enough_and_stop_at_the_first_offset() -> None:
    consumer = _Consumer(100, 1_000, gaps=frozenset({999}))  # the last: a marker
    wanted = 600  # not among the last 64 (936..998), among the last 512

    records = read_back(
        consumer,  # type: ignore[arg-type]
        "t",
        0,
        lambda got: any(r.offset() == wanted for r in got),
    )
    assert consumer.starts == [1_000 - 64, 1_000 - 512]
    assert _offsets(records) == list(range(488, 999))


def test_a_partition_that_never_has_enough_is_read_from_its_first_offset_once() -> None:
    consumer = _Consumer(100, 1_000)
    records = read_back(consumer, "t", 0, lambda _got: False)  # type: ignore[arg-type]
    assert consumer.starts == [936, 488, 100]
    assert _offsets(records) == list(range(100, 1_000))


def test_an_empty_partition_reads_nothing() -> None:
    consumer = _Consumer(5, 5)
    assert read_back(consumer, "t", 0, lambda _got: False) == []  # type: ignore[arg-type]
    assert consumer.starts == []
