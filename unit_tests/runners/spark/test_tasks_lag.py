"""A source record that arrives after its partition was heartbeated past it moves up to
the heartbeat (a lift, committed with the batch) instead of failing the run; replays apply
the committed lifts; a fused query's map side, which commits no lift, fails before
anything commits."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from framework.errors import ProtocolViolation
from framework.runners.spark.tasks import check_lag, lift_late
from framework.wire.lifts import Lift
from framework.wire.records import InRecord


def _ctx(floors: dict[int, int], lifts: tuple[Lift, ...] = ()) -> Any:
    graph = SimpleNamespace(delta_ms=10)
    return SimpleNamespace(
        floors=tuple(floors.items()),
        front_lag_ms=250,
        spec=SimpleNamespace(graph=graph),
        lifts=lifts,
    )


def _records(*stamps: int, first: int = 0) -> list[InRecord]:
    return [InRecord("lines", 0, first + i, s, None, b"x") for i, s in enumerate(stamps)]


def test_records_at_or_above_the_floor_keep_their_slots() -> None:
    assert lift_late(_ctx({0: 100}), 0, _records(1_000, 1_005, 2_000)) == ({}, None)
    assert lift_late(_ctx({}), 0, _records(5)) == ({}, None)  # nothing heartbeated yet
    assert lift_late(_ctx({1: 10**9}), 0, _records(5)) == ({}, None)  # another partition


def test_late_records_move_up_to_the_floor_as_one_lift() -> None:
    """Offsets 0 and 2 arrived late (slots 100 and 99 < 101); offset 1 (slot 102) lies
    inside the lift's range and keeps its own, higher slot, as a replay computes it."""
    slots, lift = lift_late(_ctx({0: 101}), 0, _records(1_000, 1_020, 999, 1_050))
    assert lift == Lift("lines", 0, 0, 2, 101)
    assert slots == {0: 101, 2: 101}
    # A replay of the same offsets, the lift committed, no floor: the same slots.
    again, new = lift_late(_ctx({}, (lift,)), 0, _records(1_000, 1_020, 999, 1_050))
    assert (again, new) == (slots, None)


def test_a_replay_with_a_floor_needs_no_new_lift_for_lifted_records() -> None:
    lift = Lift("lines", 0, 10, 11, 101)
    slots, new = lift_late(_ctx({0: 101}, (lift,)), 0, _records(1_000, 1_001, first=10))
    assert slots == {10: 101, 11: 101} and new is None


def test_a_fused_map_side_fails_before_anything_commits() -> None:
    assert check_lag(_ctx({0: 100}), 0, _records(1_000)) == {}
    with pytest.raises(ProtocolViolation, match="FLAMEPIPE_FRONT_LAG_MS") as caught:
        check_lag(_ctx({0: 101}), 0, _records(1_020, 1_009))
    text = str(caught.value)
    assert "lines[0]@1" in text and "Nothing of this batch" in text and "fuse_stages" in text
