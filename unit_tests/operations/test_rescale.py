"""Rescaling: the refusals of step 1 and the epoch steps 2-4 start, with the broker's topic
counts, the epoch and the replay faked (the real state move: integration_tests/test_rescale.py)."""

from __future__ import annotations

from typing import Any

import pytest

import framework.coordination.epochs
import framework.runners.snapshots
from framework import Pipeline
from framework.config import Settings
from framework.core.graph import Graph
from framework.errors import ConfigError
from framework.operations import rescale
from framework.testing import ListSink, ListSource
from framework.wire.topics import Topics
from framework.wire.znodes import EpochRecord


def _keyed() -> Graph:
    p = Pipeline("wp")
    p.source(ListSource([])).key_by(str).group(window=2, name="pairs").sink(ListSink())
    return p.graph()


class _Cluster:
    """Topic partition counts and the epoch, as the broker and ZooKeeper would answer;
    the replays asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, epoch: int = 0) -> None:
        self.partitions: dict[str, int] = {}
        self.replays: list[dict[str, Any]] = []
        self.epoch = epoch
        monkeypatch.setattr(rescale, "partitions_if_exists", lambda _b, t: self.partitions.get(t))
        monkeypatch.setattr(framework.coordination.epochs, "read_epoch", self._read_epoch)
        monkeypatch.setattr(rescale, "resolve_start", lambda _b, _g, at_ms=None: {"at": at_ms})
        monkeypatch.setattr(rescale, "start_replay", self._start_replay)
        monkeypatch.setattr(
            framework.runners.snapshots, "restorer", lambda _s, _g, units=None: ("restore", units)
        )

    def _read_epoch(self, _zk: str, _app: str) -> EpochRecord | None:
        return None if self.epoch == 0 else EpochRecord(self.epoch, "replay", None, None, 0)

    def _start_replay(
        self, _settings: Settings, _graph: Graph, offsets: Any, *, reason: str, restore: Any = None
    ) -> EpochRecord:
        self.replays.append({"offsets": offsets, "reason": reason, "restore": restore})
        return EpochRecord(self.epoch + 1, reason, None, None, 0)

    def ran_with(self, graph: Graph, parallelism: int) -> None:
        topics = Topics(graph.name, self.epoch)
        for node in rescale.keyed_nodes(graph):
            self.partitions[topics.shuffle(node)] = parallelism
            self.partitions[topics.state(node)] = parallelism


def _settings(parallelism: int) -> Settings:
    return Settings.load(env={}, parallelism=parallelism)


def test_step_one_refuses_what_needs_no_rescale(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster(monkeypatch)
    unkeyed = Pipeline("plain")
    unkeyed.source(ListSource([])).map(str).sink(ListSink())
    with pytest.raises(ConfigError, match="no grouping, aggregate or converge"):
        rescale.start_rescale(_settings(4), unkeyed.graph())
    graph = _keyed()
    with pytest.raises(ConfigError, match="has not run in epoch 0"):
        rescale.start_rescale(_settings(4), graph)
    cluster.ran_with(graph, 4)
    with pytest.raises(ConfigError, match="already runs with parallelism 4"):
        rescale.start_rescale(_settings(4), graph)
    assert cluster.replays == []


def test_from_the_start_the_next_epoch_reads_everything_again_with_empty_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(monkeypatch, epoch=3)
    graph = _keyed()
    cluster.ran_with(graph, 2)
    record = rescale.start_rescale(_settings(4), graph, from_start=True)
    assert record.epoch == 4 and record.reason == "rescale 2 to 4"
    assert cluster.replays == [
        {"offsets": {"at": None}, "reason": "rescale 2 to 4", "restore": None}
    ]


def test_otherwise_the_snapshot_is_restored_into_the_new_units(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(monkeypatch)
    graph = _keyed()
    cluster.ran_with(graph, 4)
    rescale.start_rescale(_settings(2), graph)
    (replay,) = cluster.replays
    assert replay["restore"] == ("restore", 2)
    assert replay["offsets"]["at"] is not None  # the sources' ends: the snapshot decides


def test_keyed_topics_that_disagree_or_another_parallelism_are_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(monkeypatch)
    graph = _keyed()
    cluster.ran_with(graph, 4)
    rescale.check_parallelism("b", graph, 0, 4)  # the same: nothing to say
    with pytest.raises(ConfigError, match=r"set FLAMEPIPE_PARALLELISM=4, .* --parallelism 2"):
        rescale.check_parallelism("b", graph, 0, 2)
    cluster.partitions[Topics(graph.name, 0).state("pairs")] = 3
    with pytest.raises(ConfigError, match="disagree on the parallelism"):
        rescale.running_parallelism("b", graph, 0)
