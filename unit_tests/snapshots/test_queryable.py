"""`StateReader.get`: each step of a grouping's query and a rolling aggregate's, with the
changelog copies and the min-time view faked (the real read: integration_tests/
test_queryable_state.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from framework import Pipeline
from framework.core.graph import Graph
from framework.core.ops import key_hash
from framework.errors import ConfigError, DeadlineExceeded
from framework.snapshots import queryable
from framework.snapshots.queryable import StateReader
from framework.testing import ListSink, ListSource
from framework.wire.topics import Topics

PARTITIONS = 2


def _graph() -> Graph:
    p = Pipeline("qs", delta_ms=10)
    one, two = p.source(ListSource([])).broadcast(2)
    one.key_by(str).group(window=3, name="pairs").sink(ListSink("pairs-out"))
    two.key_by(str).reduce(lambda a, b: a + b, name="total").sink(ListSink("total-out"))
    return p.graph()


class _View:
    """The min-time view: its min time, and whether it reaches a floor in time."""

    def __init__(self, slot: int, reaches: bool = True) -> None:
        self.slot, self.reaches = slot, reaches
        self.waited_for: list[int] = []

    def wait_for(self, _segment: None, floor: int, _timeout_s: float) -> bool:
        self.waited_for.append(floor)
        return self.reaches

    def min_time(self) -> int:
        return self.slot


class _Copies:
    """`ChangelogCopies`: a mark, settled after ``open_polls`` polls, catch-ups counted."""

    def __init__(self, grouping: dict[str, Any], rolling: dict[str, Any]) -> None:
        self.open_polls = 0
        self.events: list[str] = []
        self.closed = False
        self.copies: dict[tuple[str, int], Any] = {}
        for topic, (partitions, _op, _window) in grouping.items():
            for part in range(partitions):
                kept = SimpleNamespace(kept_below=self._kept)
                self.copies[(topic, part)] = SimpleNamespace(grouping=kept)
        for topic, (partitions, fresh) in rolling.items():
            for part in range(partitions):
                self.copies[(topic, part)] = SimpleNamespace(state=fresh())

    def _kept(self, key: object, slot: int) -> list[str]:
        self.events.append(f"kept_below {key} {slot}")
        return [f"{key}@{slot}"]

    def mark(self) -> dict[Any, int]:
        self.events.append("mark")
        return {part: 1 for part in self.copies}

    def settled(self, _marks: Any) -> bool:
        self.events.append("settled?")
        self.open_polls -= 1
        return self.open_polls < 0

    def catch_up(self) -> int:
        self.events.append("catch_up")
        return 0

    def close(self) -> None:
        self.closed = True


class _Fakes:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, exists: bool = True) -> None:
        self.made: list[_Copies] = []
        monkeypatch.setattr(queryable, "_POLL_S", 0.001)
        monkeypatch.setattr(
            queryable, "partitions_if_exists", lambda _b, _t: PARTITIONS if exists else None
        )
        monkeypatch.setattr(queryable, "ChangelogCopies", self._copies)

    def _copies(self, _bootstrap: str, grouping: Any, rolling: Any = None) -> _Copies:
        made = _Copies(grouping, rolling or {})
        self.made.append(made)
        return made


def _reader(view: _View, committed: int = 0, timeout_s: float = 1.0) -> StateReader:
    return StateReader(
        "kafka:9092",
        _graph(),
        0,
        view,  # type: ignore[arg-type]
        committed=lambda: committed,
        timeout_s=timeout_s,
    )


def test_an_operator_without_queryable_state_is_refused_naming_those_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _Fakes(monkeypatch)
    with pytest.raises(ConfigError, match=r"pairs \(grouping\), total \(rolling\)"):
        _reader(_View(5)).get("no-such-op", "w")


def test_a_grouping_answers_below_min_time_once_the_floor_and_the_commits_are_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fakes = _Fakes(monkeypatch)
    view = _View(slot=42)
    reader = _reader(view, committed=40)
    first = reader.get("pairs", "w")
    fakes.made[0].open_polls = 2  # step 2: a transaction is still open for two polls
    second = reader.get("pairs", "w")

    assert view.waited_for == [40, 40], "step 1 waits for the committed snapshot's slot"
    assert (first.found, first.value, first.as_of_slot, first.as_of_ms) == (True, ["w@42"], 42, 420)
    assert first.partition == key_hash("w") % PARTITIONS
    assert len(fakes.made) == 1, "one copy of the changelog per operator"
    events = fakes.made[0].events
    once = ["mark", "settled?", "catch_up", "kept_below w 42"]
    polled = ["mark", "settled?", "settled?", "settled?", "catch_up", "kept_below w 42"]
    assert events == [*once, *polled]
    assert second == first


def test_a_grouping_whose_min_time_stays_below_the_snapshot_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _Fakes(monkeypatch)
    with pytest.raises(DeadlineExceeded, match="did not reach slot 40"):
        _reader(_View(30, reaches=False), committed=40).get("pairs", "w")


def test_a_transaction_open_past_the_deadline_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = _Fakes(monkeypatch)
    reader = _reader(_View(42), timeout_s=0.05)
    reader.get("pairs", "w")
    fakes.made[0].open_polls = 10**9
    with pytest.raises(DeadlineExceeded, match="a transaction stays open past the read"):
        reader.get("pairs", "w")


def test_a_rolling_aggregate_answers_its_value_as_of_its_partitions_min_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fakes = _Fakes(monkeypatch)
    answer = _reader(_View(42)).get("total", "w")
    assert (answer.found, answer.value, answer.as_of_slot) == (False, None, 0)
    assert fakes.made[0].events == ["catch_up"], "no min-time wait: the value carries its own"


def test_an_epoch_that_never_ran_is_refused_and_close_closes_the_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _Fakes(monkeypatch, exists=False)
    with pytest.raises(ConfigError, match=r"qs.*has not run in epoch 0"):
        _reader(_View(42)).get("pairs", "w")
    fakes = _Fakes(monkeypatch)
    reader = _reader(_View(42))
    reader.get("pairs", "w")
    reader.close()
    assert fakes.made[0].closed
    assert Topics("qs", 0).state("pairs") in {t for t, _ in fakes.made[0].copies}
