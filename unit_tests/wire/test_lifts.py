"""The lift record: its bytes, its refusals, and the slots it gives."""

from __future__ import annotations

import pytest

from framework.errors import DecodeError
from framework.wire.lifts import Lift, LiftIndex


def test_a_lift_round_trips_and_keys_its_range() -> None:
    lift = Lift("lines", 1, 40, 42, 179575793384)
    assert Lift.decode(lift.encode(), "here") == lift
    assert lift.key() != Lift("lines", 1, 43, 44, 179575793384).key()


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b'{"topic": "t"}', b'{"topic":"t","partition":0,"first":5,"last":4,"slot":1}'],
)
def test_a_malformed_lift_is_refused_naming_where(data: bytes) -> None:
    with pytest.raises(DecodeError, match=r"lines\.lifts@7: not a lift"):
        Lift.decode(data, "lines.lifts@7")


def test_the_index_moves_only_records_in_a_range_and_never_down() -> None:
    index = LiftIndex([Lift("lines", 0, 10, 12, 500), Lift("lines", 1, 0, 0, 900)])
    assert bool(index) and not LiftIndex()
    stamps = {9: 4_000, 10: 4_000, 11: 6_000, 12: 4_990, 13: 4_000}
    assert index.slots(0, stamps, 10) == {10: 500, 12: 500}
    assert index.of(1) == (Lift("lines", 1, 0, 0, 900),)
