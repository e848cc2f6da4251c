"""`framework.kafka.mintime.suffix_start`: where a view starts reading (a fake consumer)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from confluent_kafka import KafkaError

from framework.kafka import mintime
from framework.kafka.mintime import _MARGIN, _WINDOW, report_keys, suffix_start


class _Eof:
    def __init__(self, partition: int) -> None:
        self._partition = partition

    def error(self) -> Any:
        return _EofError()

    def partition(self) -> int:
        return self._partition

    def topic(self) -> str:
        return "app.mintime"


class _EofError:
    def code(self) -> int:
        return KafkaError._PARTITION_EOF

    def fatal(self) -> bool:
        return False

    def retriable(self) -> bool:
        return False


class _Record:
    def __init__(self, offset: int, key: bytes) -> None:
        self._offset, self._key = offset, key

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return 0

    def topic(self) -> str:
        return "app.mintime"

    def key(self) -> bytes:
        return self._key


class _Log:
    """A partition of keyed records from offset ``low``; counts the records read."""

    def __init__(self, keys: list[bytes], low: int = 0) -> None:
        self.keys, self.low, self.read = keys, low, 0
        self.at = low

    def get_watermark_offsets(self, _tp: Any, timeout: float) -> tuple[int, int]:
        return self.low, self.low + len(self.keys)

    def assign(self, tps: list[Any]) -> None:
        self.at = tps[0].offset

    def consume(self, most: int, _timeout: float) -> list[Any]:
        end = self.low + len(self.keys)
        if self.at >= end:
            self.at += 1
            return [_Eof(0)] if self.at == end + 1 else []
        out = [
            _Record(o, self.keys[o - self.low]) for o in range(self.at, min(end, self.at + most))
        ]
        self.at += len(out)
        self.read += len(out)
        return out

    def close(self) -> None:
        pass


def _start(log: _Log, keys: set[bytes], monkeypatch: pytest.MonkeyPatch) -> int | None:
    monkeypatch.setattr(mintime, "new_consumer", lambda *_a, **_k: log)
    return suffix_start("bootstrap", "app.mintime", 0, keys)


KEYS = {k for k, _ in report_keys(2, ["s1", "s2"])}


def test_a_short_log_is_read_from_its_first_record(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _Log(sorted(KEYS) * 100)
    assert _start(log, KEYS, monkeypatch) is None


def test_a_long_log_is_read_from_the_oldest_keys_last_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = sorted(KEYS)
    quiet, busy = keys[0], keys[1:]
    log = _Log([quiet] + [busy[i % len(busy)] for i in range(100_000)], low=500)
    start = _start(log, KEYS, monkeypatch)
    assert start is None  # the quiet key's only report is the first record: read it all
    log = _Log([busy[i % len(busy)] for i in range(50_000)] + [quiet] + busy * 10, low=7)
    start = _start(log, KEYS, monkeypatch)
    assert start == 7 + 50_000 - _MARGIN
    assert log.read < 20 * _WINDOW  # keys only, a few windows, not the whole log


def test_every_record_skipped_has_a_later_report_of_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a view skips is what compaction may remove: the view reads a log compaction
    could have left, from which the listener publishes no false min time."""
    rng = random.Random(3)
    keys = sorted(KEYS)
    for _ in range(20):
        weights = [rng.random() ** 4 for _ in keys]
        log = _Log(rng.choices(keys, weights, k=rng.randrange(1, 60_000)), low=rng.randrange(9))
        start = _start(log, KEYS, monkeypatch)
        first = log.low if start is None else start
        skipped = log.keys[: first - log.low]
        kept = set(log.keys[first - log.low :])
        assert all(key in kept for key in skipped)
