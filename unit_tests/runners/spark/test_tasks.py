"""`run_partition`, steps 2-5 for one partition of a source stage, with the task's
transactional committer faked (the real transactions: integration_tests/test_spark_pipeline.py and
the crash harness)."""

from __future__ import annotations

from typing import Any

import pytest

from framework.demos.wordcount import word_pairs
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import plan_stages
from framework.runners.spark import tasks
from framework.wire import auth
from framework.wire.lifts import Lift
from framework.wire.records import InRecord, OutRecord

TOPIC = "lines"


class _Committer:
    """The partition's `TaskCommitter`: what is committed, and whether it fails."""

    def __init__(self, committed_to: int = -1, fail: bool = False) -> None:
        self.committed_to, self.fail = committed_to, fail
        self.events: list[str] = []
        self.commits: list[tuple[list[OutRecord], str, dict[Any, int]]] = []

    def is_committed(self, group: str, topic: str, partition: int, end: int) -> bool:
        self.events.append("is_committed")
        return self.committed_to >= end

    def start(self) -> None:
        self.events.append("start")

    def commit(self, out: list[OutRecord], group: str, positions: dict[Any, int]) -> list[int]:
        self.events.append("commit")
        if self.fail:
            raise RuntimeError("the broker went away")
        self.commits.append((out, group, positions))
        return list(range(len(out)))


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> tuple[tasks.TaskContext, _Committer]:
    graph = word_pairs("wp", TOPIC, "out").graph()
    stage = plan_stages(graph, {graph.nodes[0].id: TOPIC})[0]
    partitions = {TOPIC: 2, **{e.topic: 2 for e in stage.exits.values()}}
    spec = StageSpec(graph, stage, partitions, 2, graph.node(stage.entry).endpoint)
    keyring = auth.Keyring((b"a-test-pipeline-key-0123456789abcdef",))
    ctx = tasks.TaskContext(spec, "kafka:9092", "r" * 32, 3, 0, keyring, floors=((0, 101),))
    committer = _Committer()
    monkeypatch.setattr(tasks.TaskCommitter, "cached", lambda _b, _id: committer)
    return ctx, committer


def _lines(*stamps: int) -> list[InRecord]:
    # word_pairs' lines: "<line number> <words>"
    return [InRecord(TOPIC, 0, 40 + i, s, None, b"7 a b c") for i, s in enumerate(stamps)]


def test_step_2_a_batch_committed_by_an_earlier_attempt_is_skipped(
    source: tuple[tasks.TaskContext, _Committer],
) -> None:
    ctx, committer = source
    committer.committed_to = 42  # the range ends at 42: offsets 40 and 41
    row = tasks.run_partition(ctx, _lines(1_010, 1_020))
    assert row["skipped"] and row["records_in"] == 2
    assert committer.events == ["is_committed"], "nothing fenced, nothing committed"


def test_steps_4_and_5_outputs_acks_and_the_position_commit_together(
    source: tuple[tasks.TaskContext, _Committer],
) -> None:
    ctx, committer = source
    row = tasks.run_partition(ctx, _lines(1_010, 1_020))
    assert committer.events == ["is_committed", "start", "commit"], "fenced before it runs"
    (out, group, positions) = committer.commits[0]
    assert group == ctx.group and positions == {(TOPIC, 0): 42}
    spec = ctx.spec
    topics = {record.topic for record in out}
    assert spec.topics.acks in topics, "the acks ride in the batch's transaction"
    assert any(t != spec.topics.acks for t in topics), "and so do the outputs"
    assert not row["skipped"] and row["items_in"] == 2 and row["items_out"] > 0
    assert (row["least_slot"], row["lifted"]) == (101, 0)


def test_step_5_a_late_record_lift_commits_with_the_outputs_it_moved(
    source: tuple[tasks.TaskContext, _Committer],
) -> None:
    ctx, committer = source
    row = tasks.run_partition(ctx, _lines(1_000, 1_020))  # slot 100 < the floor 101
    (out, _, _) = committer.commits[0]
    (lift_record,) = [r for r in out if r.topic == ctx.spec.topics.lifts]
    assert lift_record.key == Lift(TOPIC, 0, 40, 40, 101).key()
    assert (row["least_slot"], row["lifted"]) == (101, 1)


def test_a_failed_commit_drops_the_cached_state(
    source: tuple[tasks.TaskContext, _Committer], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, committer = source
    committer.fail = True
    dropped: list[Any] = []
    monkeypatch.setattr(tasks, "drop_state", dropped.append)
    with pytest.raises(RuntimeError, match="went away"):
        tasks.run_partition(ctx, _lines(1_010))
    assert dropped == [("wp", ctx.spec.stage.id, 0, ctx.run_id)]
