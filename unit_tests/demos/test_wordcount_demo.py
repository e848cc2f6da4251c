"""The demo's steps (`framework.demos.wordcount_demo.run_demo`) with fakes for Spark, the
producer, the reader and the oracle: the input is produced at its rate, the run is waited
for and stopped, and the verdict is exact only when the reader's items are the oracle's
and count every word of the input. The real stack: integration_tests/test_stack_cli.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from framework.config import Settings
from framework.demos import wordcount_demo as demo
from framework.errors import PipelineError


class _Run:
    def __init__(self) -> None:
        self.stopped = False
        self.checks = 0

    def check(self) -> None:
        self.checks += 1

    def released(self, until_ms: int) -> bool:
        return until_ms > 0

    def figures(self) -> str:
        return "figures"

    def stop(self) -> None:
        self.stopped = True


class _Runner:
    runs: list[_Run] = []

    def __init__(self, settings: Settings, spark: object) -> None:
        self.settings = settings

    def start(self, graph: Any) -> _Run:
        run = _Run()
        _Runner.runs.append(run)
        return run


class _Producer:
    lines: list[str] = []

    def produce(self, topic: str, value: bytes) -> None:
        _Producer.lines.append(value.decode())

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


class _Console:
    interactive = False

    def __init__(self, figures: Any) -> None:
        self.figures = figures

    def start(self) -> None:
        return None

    def stop(self) -> str:
        return "the last table"


def _pairs(lines: list[str]) -> Counter[str]:
    """One item per word occurrence, keyed as `pair_key` keys them: what an exact run
    releases (the line ids stand in for the pairs)."""
    out: Counter[str] = Counter()
    for line in lines:
        number, text = line.split(" ", 1)
        for word in text.split():
            out[json.dumps([word, [int(number)]])] += 1
    return out


class _Reader:
    drop = 0
    abandoned = False

    def __init__(self, settings: Settings, topic: str, delta_ms: int) -> None:
        self.topic = topic

    def start(self) -> None:
        return None

    def total(self) -> int:
        return sum(_pairs(_Producer.lines).values())

    def alive(self) -> bool:
        return True

    def finish(self) -> tuple[Counter[str], list[float]]:
        items = _pairs(_Producer.lines)
        for key in list(items)[: _Reader.drop]:
            del items[key]
        return items, [10.0, 20.0, 30.0]

    def abandon(self) -> None:
        _Reader.abandoned = True


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    _Runner.runs, _Producer.lines, _Reader.drop, _Reader.abandoned = [], [], 0, False
    monkeypatch.setattr(demo, "SparkRunner", _Runner)
    monkeypatch.setattr(demo, "new_producer", lambda *_a, **_k: _Producer())
    monkeypatch.setattr(demo, "_Reader", _Reader)
    monkeypatch.setattr(demo, "LiveConsole", _Console)
    monkeypatch.setattr(demo, "word_pairs_oracle", lambda *_a: _pairs(_Producer.lines))


def test_steps_1_to_4_an_exact_run_is_verified(fakes: None, tmp_path: Path) -> None:
    result = demo.run_demo(Settings(state_dir=tmp_path), lines=30, rate=100_000)
    assert len(_Producer.lines) == 30
    assert [line.split(" ", 1)[0] for line in _Producer.lines] == [str(i) for i in range(30)]
    [run] = _Runner.runs
    assert run.stopped
    assert result.exact
    assert sum(result.released.values()) == result.words
    summary = result.summary()
    assert "VERIFIED exactly once" in summary
    assert "p50 20 ms" in summary and "the last table" in summary


def test_step_4_a_missing_item_is_a_mismatch(fakes: None, tmp_path: Path) -> None:
    _Reader.drop = 1
    result = demo.run_demo(Settings(state_dir=tmp_path), lines=30, rate=100_000)
    assert not result.exact
    assert "MISMATCH against the input" in result.summary()


def test_a_failing_run_stops_the_pipeline_and_abandons_the_reader(
    fakes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_a: Any, **_k: Any) -> int:
        raise PipelineError("the stage failed")

    monkeypatch.setattr(demo, "_produce", fail)
    with pytest.raises(PipelineError, match="the stage failed"):
        demo.run_demo(Settings(state_dir=tmp_path), lines=30, rate=100_000)
    [run] = _Runner.runs
    assert run.stopped and _Reader.abandoned
