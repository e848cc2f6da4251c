"""`PipelineRun.start`'s steps in their order, with fakes for Spark, Kafka and the
services: what fails a step (too few task slots, a user function that cannot be shipped)
fails before any service starts; the stages start before the services are waited for,
the driver's own threads after. The real thing: integration_tests/test_continuous.py and
the cluster tier."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from framework.config import Settings
from framework.demos.wordcount import word_pairs
from framework.errors import ConfigError, PipelineError
from framework.runners.spark import runner as module


class _Services:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.view = None

    def launch(self) -> None:
        self.events.append("services launched")

    def wait_ready(self) -> None:
        self.events.append("services ready")


@pytest.fixture
def events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []

    def step(name: str, result: Any = None) -> Any:
        def record(*_a: Any, **_k: Any) -> Any:
            log.append(name)
            return result

        return record

    monkeypatch.setattr(module.PipelineRun, "_read_epoch", step("epoch"))
    monkeypatch.setattr(module, "check_parallelism", step("parallelism"))
    partitions = {"lines": 2}
    monkeypatch.setattr(
        module.PipelineRun,
        "_prepare_topics",
        lambda self, sources, stages: (
            log.append("topics") or {**partitions, **{s.topic: 2 for s in stages}}
        ),
    )
    monkeypatch.setattr(module, "check_slots", step("slots", result=False))
    monkeypatch.setattr(module, "read_lifts", step("lifts", result={}))
    monkeypatch.setattr(module, "ship", step("shipped", result=SimpleNamespace(roots=set())))
    monkeypatch.setattr(module, "embedded_services", lambda *_a: _Services(log))
    monkeypatch.setattr(module.PipelineRun, "_start_stage", step("stage started"))
    monkeypatch.setattr(module.PipelineRun, "_start_drivers", step("drivers"))
    return log


def _run(tmp_path: Path, **settings: Any) -> module.PipelineRun:
    spark: Any = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    graph = word_pairs("runner-steps", "lines", "pairs").graph()
    return module.PipelineRun(Settings(state_dir=tmp_path, **settings), graph, spark)


def test_steps_1_to_6_run_in_their_order(events: list[str], tmp_path: Path) -> None:
    _run(tmp_path).start()
    assert events == [
        "epoch",
        "parallelism",
        "topics",
        "slots",
        "lifts",
        "shipped",
        "services launched",
        "stage started",
        "stage started",
        "services ready",
        "drivers",
    ]


def test_step_2_too_few_task_slots_fail_before_shipping_or_any_service(
    events: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def too_few(*_a: Any, **_k: Any) -> bool:
        raise ConfigError("continuous stages need 4 task slots, Spark has 2: use local[4]")

    monkeypatch.setattr(module, "check_slots", too_few)
    with pytest.raises(ConfigError, match="need 4 task slots"):
        _run(tmp_path).start()
    assert events == ["epoch", "parallelism", "topics"]


def test_step_3_code_that_cannot_be_shipped_fails_before_any_service(
    events: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unpicklable(*_a: Any, **_k: Any) -> Any:
        raise PipelineError("map 'pair' cannot be pickled")

    monkeypatch.setattr(module, "ship", unpicklable)
    with pytest.raises(PipelineError, match="cannot be pickled"):
        _run(tmp_path).start()
    assert "services launched" not in events and "stage started" not in events


def test_step_1_a_non_kafka_endpoint_fails_first(events: list[str], tmp_path: Path) -> None:
    from framework.pipeline import Pipeline
    from framework.testing import ListSink, ListSource

    p = Pipeline("listed")
    p.source(ListSource([1])).sink(ListSink())
    spark: Any = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    run = module.PipelineRun(Settings(state_dir=tmp_path), p.graph(), spark)
    with pytest.raises(PipelineError, match="needs a KafkaSource"):
        run.start()
    assert events == []
