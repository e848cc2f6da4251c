"""A keyed task's cached state (`tasks.partition_state`): kept between batches, dropped
when a catch-up fails half way or the reader may have missed compacted deletions. The
reader is a stand-in here (its reads against Kafka: integration_tests/test_kafka_adapter.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from framework.core.grouping import Grouping
from framework.demos.wordcount import word_pairs
from framework.errors import DecodeError
from framework.kafka.topics import CHANGELOG_DELETE_RETENTION_MS
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import plan_stages
from framework.plan.task import StageProgram
from framework.runners.spark import tasks
from framework.wire import auth
from framework.wire.changelog import bucket_record, item_record


class _Reader:
    """Hands out the records queued for it, as `ChangelogReader.catch_up` would."""

    made: list[_Reader] = []
    queued: list[list[tuple[bytes, bytes | None]]] = []

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        self.position: int | None = None
        self.read_at: float | None = None
        _Reader.made.append(self)

    @property
    def outlived_deletions(self) -> bool:
        return self.read_at is not None and (
            time.monotonic() - self.read_at > CHANGELOG_DELETE_RETENTION_MS / 2000
        )

    def catch_up(self) -> list[tuple[bytes, bytes | None]]:
        self.read_at, self.position = time.monotonic(), 1
        return _Reader.queued.pop(0) if _Reader.queued else []


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, StageProgram]:
    monkeypatch.setattr(tasks, "ChangelogReader", _Reader)
    _Reader.made, _Reader.queued = [], []
    graph = word_pairs("wp", "lines", "out").graph()
    stage = plan_stages(graph, {graph.nodes[0].id: "lines"})[1]
    partitions = {"lines": 2, stage.topic: 2, **{e.topic: 1 for e in stage.exits.values()}}
    spec = StageSpec(graph, stage, partitions, 2)
    keyring = auth.Keyring((b"a-test-pipeline-key-0123456789abcdef",))
    ctx = tasks.TaskContext(spec, "kafka:9092", "r" * 32, 3, 0, keyring)
    yield ctx, StageProgram(spec)
    tasks._states.clear()


def _item(key: str, slot: int) -> tuple[bytes, bytes | None]:
    return item_record(key, ((slot, 1, 0), (), 0), [[key, str(slot)]], [])


def test_a_failed_catch_up_drops_the_half_applied_state(keyed: tuple[Any, StageProgram]) -> None:
    ctx, program = keyed
    key = ("wp", "s", 0, "run")
    _Reader.queued = [[_item("a", 1), bucket_record("old", ([], [], [])), _item("b", 2)]]
    with pytest.raises(DecodeError, match="older flamepipe"):
        tasks.partition_state(ctx, program, key, 0)
    # The retry reads everything again into a new state (the reader had moved past it).
    _Reader.queued = [[_item("a", 1), _item("b", 2)]]
    state, _, catchup = tasks.partition_state(ctx, program, key, 0)
    assert isinstance(state, Grouping) and state.size() == 2
    assert len(_Reader.made) == 2 and catchup["catchup_records"] == 2
    # Kept for the next batch, which reads only what is new.
    again, _, _ = tasks.partition_state(ctx, program, key, 0)
    assert again is state and len(_Reader.made) == 2


def test_a_reader_that_outlived_deletions_starts_over(
    keyed: tuple[Any, StageProgram], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, program = keyed
    key = ("wp", "s", 1, "run")
    _Reader.queued = [[_item("a", 1)]]
    state, _, _ = tasks.partition_state(ctx, program, key, 1)
    assert state is not None and state.size() == 1
    later = time.monotonic() + CHANGELOG_DELETE_RETENTION_MS / 1000
    monkeypatch.setattr(time, "monotonic", lambda: later)
    fresh, _, _ = tasks.partition_state(ctx, program, key, 1)
    assert fresh is not state and len(_Reader.made) == 2
