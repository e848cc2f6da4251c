"""Recovery from lost acks: the steps of `StallWatch` on a clock and a min time set by
hand (the real epoch change: integration_tests/test_recovery.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from framework import Pipeline
from framework.config import Settings
from framework.runners import recovery
from framework.runners.recovery import StallWatch
from framework.testing import ListSink, ListSource
from framework.wire.znodes import EpochRecord


class _View:
    def __init__(self) -> None:
        self.value = 0

    def min_time(self) -> int:
        return self.value


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> tuple[StallWatch, _View, list[float]]:
    now = [100.0]
    monkeypatch.setattr(recovery, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=id))
    p = Pipeline("p")
    p.source(ListSource([], topic="in")).sink(ListSink("out"))
    view = _View()
    settings = Settings.load(env={}, stall_timeout_ms=1000)
    stall = StallWatch(settings, p.graph(), 3, view)  # type: ignore[arg-type]

    def recover() -> EpochRecord:
        return EpochRecord(4, f"recovery: stalled at {stall._seen}", None, None, 0)

    monkeypatch.setattr(stall, "_recover", recover)
    stall._open()
    return stall, view, now


def _after(stall: StallWatch, now: list[float], seconds: float) -> None:
    now[0] += seconds
    stall._step()


def test_a_cold_start_is_no_stall_however_long_it_takes(
    watch: tuple[StallWatch, _View, list[float]],
) -> None:
    stall, _, now = watch
    for _ in range(5):
        _after(stall, now, 10)
    assert stall.recovered is None


def test_a_min_time_that_grew_and_then_stopped_starts_a_new_epoch_once(
    watch: tuple[StallWatch, _View, list[float]],
) -> None:
    stall, view, now = watch
    for value in (5, 6, 7):  # growing, each step within the timeout
        view.value = value
        _after(stall, now, 0.9)
    _after(stall, now, 0.9)  # 0.9 s without growth: not yet
    assert stall.recovered is None
    _after(stall, now, 0.2)  # 1.1 s: recovered from where it stalled
    assert stall.recovered is not None
    assert (stall.recovered.epoch, stall.recovered.reason) == (4, "recovery: stalled at 7")
    _after(stall, now, 10)  # this epoch is over: no second recovery
    assert stall.recovered.epoch == 4


def test_growth_resets_the_clock(watch: tuple[StallWatch, _View, list[float]]) -> None:
    stall, view, now = watch
    for value in range(1, 20):
        view.value = value
        _after(stall, now, 0.9)
    assert stall.recovered is None
