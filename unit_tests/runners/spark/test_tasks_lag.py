"""A source record below what the driver heartbeated fails its task before anything commits."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from framework.errors import ProtocolViolation
from framework.runners.spark.tasks import check_lag
from framework.wire.records import InRecord


def _ctx(floors: dict[int, int]) -> Any:
    graph = SimpleNamespace(delta_ms=10)
    return SimpleNamespace(
        floors=tuple(floors.items()), front_lag_ms=250, spec=SimpleNamespace(graph=graph)
    )


def _records(*stamps: int) -> list[InRecord]:
    return [InRecord("lines", 0, i, stamp, None, b"x") for i, stamp in enumerate(stamps)]


def test_records_at_or_above_the_floor_pass() -> None:
    check_lag(_ctx({0: 100}), 0, _records(1_000, 1_005, 2_000))
    check_lag(_ctx({}), 0, _records(5))  # nothing heartbeated yet
    check_lag(_ctx({1: 10**9}), 0, _records(5))  # another partition's floor


def test_a_record_below_the_floor_fails_naming_the_setting() -> None:
    with pytest.raises(ProtocolViolation, match="FLAMEPIPE_FRONT_LAG_MS") as caught:
        check_lag(_ctx({0: 101}), 0, _records(1_020, 1_009))
    assert "lines[0]" in str(caught.value) and "Nothing of this batch" in str(caught.value)
