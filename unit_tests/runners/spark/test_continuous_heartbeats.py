"""A continuous source task's heartbeats ahead of its commits (`_Loop.step`, step 3d)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

from framework.runners.spark.continuous_tasks import _Loop


class _Message:
    def __init__(self, offset: int, stamp: int) -> None:
        self._offset, self._stamp = offset, stamp

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return 1, self._stamp

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"line"

    def headers(self) -> None:
        return None


class _Consumer:
    def __init__(self, batches: list[list[_Message]]) -> None:
        self.batches = batches

    def consume(self, most: int, _timeout: float) -> list[_Message]:
        batch = self.batches[0] if self.batches else []
        taken, rest = batch[:most], batch[most:]
        if self.batches:
            self.batches[0] = rest
            if not rest:
                self.batches.pop(0)
        return taken


class _Fronts:
    def __init__(self) -> None:
        self.ahead_of: list[int] = []

    def ahead(self, _topic: str, _partition: int, stamp: int) -> None:
        self.ahead_of.append(stamp)

    def beat(self) -> list[Any]:
        return []


def _loop(consumer: _Consumer, fronts: _Fronts) -> _Loop:
    """A source loop whose commit interval never passes: records stay pending."""
    loop = object.__new__(_Loop)
    loop.ctx = SimpleNamespace(commit_ms=3_600_000, max_records=100, heartbeat_ms=3_600_000)  # type: ignore[assignment]
    loop.topic, loop.partition, loop.stage = "lines", 0, "source"
    loop.consumer = consumer  # type: ignore[assignment]
    loop.fronts = fronts  # type: ignore[assignment]
    loop.pending = []
    loop.committed_at = loop.beaten = time.monotonic()
    loop.parent = os.getppid()
    loop.min_time = lambda: 0
    loop.next_due = -1
    loop.state = None  # type: ignore[assignment]
    loop.idle_s = 0.0
    return loop


def test_records_taken_with_nothing_pending_heartbeat_their_first_slot_at_once() -> None:
    """The other partitions' records wait for this front: it rises when the records are
    read, not when they are committed (~20 ms later)."""
    fronts = _Fronts()
    loop = _loop(
        _Consumer([[_Message(0, 1_005), _Message(1, 1_009)], [_Message(2, 1_031)]]), fronts
    )
    assert loop.step(0.0)
    assert fronts.ahead_of == [1_005]
    assert loop.step(0.0)  # taken while the first are still pending: not ahead of them
    assert fronts.ahead_of == [1_005] and len(loop.pending) == 3
