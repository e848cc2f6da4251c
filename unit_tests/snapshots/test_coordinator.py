"""`SnapshotCoordinator`, one round at a time: each step of the protocol with the min-time
view, the barriers' marks, the changelog copies, the registry and the replay offsets faked,
and units saved to a memory backend (the real rounds: integration_tests/test_snapshots.py)."""

from __future__ import annotations

from typing import Any

import pytest

from framework.core.grouping import Grouping
from framework.demos.wordcount import word_pairs
from framework.errors import SnapshotMissing
from framework.snapshots import coordinator as module
from framework.snapshots.backends.memory import MemoryBackend
from framework.snapshots.coordinator import SnapshotCoordinator
from framework.snapshots.snapshot_writer import SnapshotWriter
from framework.snapshots.units import decode_unit, unit_label
from framework.wire.znodes import SnapshotRecord

STATE = "wp.group.state"


class _View:
    def __init__(self) -> None:
        self.slot = 0

    def check(self) -> None:
        pass

    def min_time(self) -> int:
        return self.slot


class _Barriers:
    def __init__(self) -> None:
        self.slot = 0

    def accepted(self) -> int:
        return self.slot

    def close(self) -> None:
        pass


class _Copies:
    """Two grouping units; a transaction open for ``open_rounds`` rounds after a mark."""

    def __init__(self) -> None:
        self.open_rounds = 0
        self.old_cut: list[str] = []
        self.cuts: list[int | None] = []
        self.marks = 0

    def mark(self) -> dict[Any, int]:
        self.marks += 1
        return {(STATE, 0): 3, (STATE, 1): 4}

    def settled(self, _marks: Any) -> bool:
        self.open_rounds -= 1
        return self.open_rounds < 0

    def catch_up(self, cut: int | None = None) -> int:
        self.cuts.append(cut)
        return 7

    def inexact(self, _lag_ms: int) -> list[str]:
        return self.old_cut

    def cut_short(self) -> int:
        return 0

    def snapshot(self, _topic: str, partition: int, below: int) -> dict[str, Any]:
        return {**Grouping(1, 2).snapshot(), "buckets": [(f"k{partition}", [], [])]}

    def close(self) -> None:
        pass


class _Registry:
    def __init__(self) -> None:
        self.records: list[SnapshotRecord] = []

    def latest(self) -> SnapshotRecord | None:
        return self.records[-1] if self.records else None

    def commit(self, record: SnapshotRecord) -> None:
        self.records.append(record)

    def gc(self, keep: int) -> list[int]:
        dropped = [r.slot for r in self.records[:-keep]]
        self.records = self.records[-keep:]
        return dropped

    def slots(self) -> list[int]:
        return [r.slot for r in self.records]

    def close(self) -> None:
        pass


@pytest.fixture
def round_() -> Any:
    """A coordinator as `_open` leaves it, its collaborators faked."""
    backend = MemoryBackend()
    coordinator = SnapshotCoordinator(
        "k:9092", word_pairs("wp", "lines", "out").graph(), 0, backend, _Registry()
    )
    view, barriers, copies = _View(), _Barriers(), _Copies()
    coordinator._view = view  # type: ignore[assignment]
    coordinator._barriers = barriers  # type: ignore[assignment]
    coordinator._copies = copies  # type: ignore[assignment]
    coordinator._partitions = {STATE: 2, "lines": 2}
    coordinator._writer = SnapshotWriter(backend)
    yield coordinator, view, barriers, copies, backend
    coordinator._writer.close(5)


@pytest.fixture(autouse=True)
def _offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    def replay_offsets(_b: str, sources: dict[str, int], slot: int, *_: Any) -> Any:
        return {topic: {p: slot * 10 + p for p in range(n)} for topic, n in sources.items()}

    monkeypatch.setattr(module, "replay_offsets", replay_offsets)
    monkeypatch.setattr(module, "partition_count", lambda _b, _t: None)  # no lifts topic


def test_step_1_no_round_below_the_committed_slot_nor_past_the_barriers(round_: Any) -> None:
    coordinator, view, barriers, copies, _ = round_
    coordinator._round()  # min time 0: nothing after the (absent) committed slot
    view.slot, barriers.slot = 50, 0
    coordinator._round()  # the barriers accepted nothing yet
    assert coordinator.stats.waiting_barriers == 1
    assert copies.marks == 0 and coordinator.registry.records == []


def test_steps_2_to_5_a_round_saves_every_unit_and_commits_the_record(round_: Any) -> None:
    coordinator, view, barriers, copies, backend = round_
    view.slot, barriers.slot = 50, 40  # the barriers' accepted slot bounds the snapshot
    copies.open_rounds = 1
    coordinator._round()
    assert coordinator.stats.waiting_changelogs == 1, "step 2 waits for open transactions"
    assert coordinator.registry.records == []
    view.slot = 60  # min time moved on: the round keeps the slot it marked
    coordinator._round()

    (record,) = coordinator.registry.records
    assert record.slot == 40 and copies.cuts == [40] and copies.marks == 1
    assert record.units == {"group": ("group/0", "group/1")}
    assert record.offsets == {"lines": {0: 400, 1: 401}}, "step 3: the slot's offsets"
    saved = decode_unit(backend.get("group/1", 40), unit_label("wp", "group/1", 40), "t")
    assert [key for key, *_ in saved["buckets"]] == ["k1"]
    assert coordinator.stats.snapshots == 1 and coordinator.stats.units_saved == 2


def test_step_5_keeps_two_records_and_drops_older_units(round_: Any) -> None:
    coordinator, view, barriers, _copies, backend = round_
    for slot in (10, 20, 30):
        view.slot = barriers.slot = slot
        coordinator._round()
    assert coordinator.registry.slots() == [20, 30]
    assert coordinator.stats.collected == 1
    with pytest.raises(SnapshotMissing, match="at slot 10"):
        backend.get("group/0", 10)
    assert backend.get("group/0", 20)


def test_a_cut_older_than_the_compaction_lag_allows_retries_with_a_later_slot(
    round_: Any,
) -> None:
    coordinator, view, barriers, copies, _ = round_
    view.slot = barriers.slot = 30
    copies.old_cut = [f"{STATE}[0]"]
    coordinator._round()
    assert coordinator.stats.waiting_cuts == 1 and coordinator._target is None
    copies.old_cut = []
    view.slot = barriers.slot = 35
    coordinator._round()
    assert [r.slot for r in coordinator.registry.records] == [35]
