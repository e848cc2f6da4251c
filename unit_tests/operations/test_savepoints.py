"""Savepoints: `take_savepoint`'s waits and copy retries, and `start_from_savepoint`'s
steps, with ZooKeeper, the state backend and the replay faked (the real round trip:
integration_tests/test_savepoints.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from framework import Pipeline
from framework.config import Settings
from framework.core.graph import Graph
from framework.errors import ConfigError, SnapshotMissing
from framework.operations import savepoints
from framework.testing import ListSink, ListSource
from framework.wire.znodes import EpochRecord, SnapshotRecord


def _graph() -> Graph:
    p = Pipeline("sp")
    p.source(ListSource([])).key_by(str).group(window=2, name="pairs").sink(ListSink())
    return p.graph()


def _record(slot: int) -> SnapshotRecord:
    return SnapshotRecord(slot, {"lines": {0: slot}}, {}, 0, 0)


class _Registry:
    """`SnapshotRegistry.latest` answering from a script: one record per call, the last
    one again once the script is used up."""

    def __init__(self, answers: list[SnapshotRecord | None]) -> None:
        self.answers = answers
        self.closed = False

    def latest(self) -> SnapshotRecord | None:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self) -> None:
        self.closed = True


class _Fakes:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> None:
        self.registry = _Registry(answers)
        self.copies: list[int] = []
        self.missing: set[int] = set()  # snapshots collected before their copy ends
        self.backend = SimpleNamespace(closed=False)
        self.backend.close = lambda: setattr(self.backend, "closed", True)
        monkeypatch.setattr(savepoints, "install_keys", lambda _s: None)
        monkeypatch.setattr(savepoints, "SnapshotRegistry", lambda _zk, _app: self.registry)
        monkeypatch.setattr(savepoints, "open_backend", lambda _s, _app: self.backend)
        monkeypatch.setattr(savepoints, "save_savepoint", self._save)
        monkeypatch.setattr(savepoints, "_POLL_S", 0.01)

    def _save(self, _root: Path, name: str, _g: Graph, record: SnapshotRecord, _b: Any) -> Any:
        self.copies.append(record.slot)
        if record.slot in self.missing:
            raise SnapshotMissing(f"snapshot {record.slot} collected")
        return SimpleNamespace(name=name, slot=record.slot)


def _settings(tmp_path: Path) -> Settings:
    return Settings.load(env={}, snapshot_dir=str(tmp_path))


def test_it_waits_for_the_next_snapshot_the_running_pipeline_commits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fakes = _Fakes(monkeypatch, [_record(5), _record(5), _record(5), _record(9)])
    saved = savepoints.take_savepoint(_settings(tmp_path), _graph(), "v1", wait_s=5)
    assert (saved.name, saved.slot) == ("v1", 9)
    assert fakes.copies == [9]
    assert fakes.registry.closed and fakes.backend.closed


def test_latest_saves_the_committed_one_and_nothing_to_save_says_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fakes = _Fakes(monkeypatch, [_record(5)])
    assert savepoints.take_savepoint(_settings(tmp_path), _graph(), "v1", latest=True).slot == 5
    _Fakes(monkeypatch, [None])
    with pytest.raises(ConfigError, match="has no committed snapshot: run it"):
        savepoints.take_savepoint(_settings(tmp_path), _graph(), "v1", latest=True)
    _Fakes(monkeypatch, [_record(5)])
    with pytest.raises(ConfigError, match=r"committed no snapshot in 0\.05 s"):
        savepoints.take_savepoint(_settings(tmp_path), _graph(), "v1", wait_s=0.05)
    assert fakes.copies == [5]


def test_a_snapshot_collected_during_the_copy_is_replaced_by_the_newer_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fakes = _Fakes(monkeypatch, [_record(5), _record(7)])
    fakes.missing = {5}
    saved = savepoints.take_savepoint(_settings(tmp_path), _graph(), "v1", latest=True)
    assert saved.slot == 7 and fakes.copies == [5, 7]


def test_a_copy_that_keeps_missing_its_snapshot_gives_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fakes = _Fakes(monkeypatch, [_record(5)])  # no newer snapshot: nothing else to copy
    fakes.missing = {5}
    with pytest.raises(SnapshotMissing):
        savepoints.take_savepoint(_settings(tmp_path), _graph(), "v1", latest=True)
    assert fakes.copies == [5] and fakes.backend.closed and fakes.registry.closed


def test_start_from_a_savepoint_runs_its_three_steps_in_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, Any]] = []
    savepoint = SimpleNamespace(
        slot=42, offsets={"lines": {0: 10, 1: 11}, "gone": {0: 3}}, name="v1"
    )
    upgrade = SimpleNamespace(removed_sources=("gone",), new=("pairs",))
    monkeypatch.setattr(savepoints, "install_keys", lambda _s: calls.append(("keys", None)))
    monkeypatch.setattr(
        savepoints,
        "load_savepoint",
        lambda root, name: calls.append(("load", name)) or savepoint,
    )
    monkeypatch.setattr(
        savepoints,
        "plan_upgrade",
        lambda sp, _g, renames: calls.append(("plan", renames)) or upgrade,
    )

    def resolve(_b: str, _g: Graph, offsets: Any) -> Any:
        calls.append(("offsets", offsets))
        return {"resolved": offsets}

    monkeypatch.setattr(savepoints, "resolve_start", resolve)
    monkeypatch.setattr(
        savepoints,
        "SavepointBackend",
        lambda sp, up: SimpleNamespace(record=lambda epoch: ("record", epoch)),
    )

    def restore_epoch(*args: Any, **kwargs: Any) -> None:
        calls.append(("restore", (args[2], args[4], kwargs["units"], kwargs["empty"])))

    monkeypatch.setattr(savepoints, "restore_epoch", restore_epoch)

    def start_replay(_s: Settings, _g: Graph, offsets: Any, *, reason: str, restore: Any) -> Any:
        calls.append(("replay", reason))
        start = restore(offsets, 3)
        calls.append(("start", (start.offsets, start.snapshot)))
        return EpochRecord(3, reason, None, None, 0)

    monkeypatch.setattr(savepoints, "start_replay", start_replay)
    settings = Settings.load(env={}, parallelism=4)

    epoch, got = savepoints.start_from_savepoint(
        settings, _graph(), "v1", directory=tmp_path, renames={"old": "pairs"}
    )

    assert (epoch.epoch, got) == (3, upgrade)
    kept = {"lines": {0: 10, 1: 11}}  # the removed source's offsets are not asked for
    assert calls == [
        ("keys", None),
        ("load", "v1"),
        ("plan", {"old": "pairs"}),
        ("offsets", kept),
        ("replay", "savepoint v1"),
        ("restore", (("record", 2), 3, 4, frozenset({"pairs"}))),
        ("start", ({"resolved": kept}, 42)),
    ]
