"""Barrier acceptance of a snapshot at slot M, read from committed barrier marks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from connectors import KafkaSink
from framework.barrier.service import BarrierService
from framework.core.barrier import Barrier
from framework.core.time import GlobalTime
from framework.snapshots.acceptance import accepted_slot, accepts, barrier_group
from framework.wire.positions import BarrierMark


def mark(gt_last: GlobalTime | None) -> BarrierMark:
    return BarrierMark(gt_last)


def test_the_barrier_after_min_time_m_accepts_m() -> None:
    barrier = Barrier()
    barrier.on_min_time(12)
    assert barrier.gt_last == GlobalTime.slot_end(11)
    assert accepts([mark(barrier.gt_last)], 12)
    assert accepts([mark(barrier.gt_last)], 11)
    assert not accepts([mark(barrier.gt_last)], 13)


def test_acceptance_rule() -> None:
    m = 12
    assert accepts([mark(GlobalTime.slot_end(m - 1))], m)
    assert accepts([mark(GlobalTime.slot_start(m + 5))], m)
    # Nothing released yet, or not far enough.
    assert not accepts([mark(None)], m)
    assert not accepts([mark(GlobalTime.slot_end(m - 2))], m)
    # Inside slot M - 1: part of it may still be unreleased.
    assert not accepts([mark(GlobalTime(m - 1, 0, 5))], m)
    # Every partition must accept; a partition without a committed mark has not.
    assert not accepts([mark(GlobalTime.slot_end(m)), None], m)
    assert not accepts([mark(GlobalTime.slot_end(m)), mark(GlobalTime.slot_end(m - 2))], m)
    assert accepts([mark(GlobalTime.slot_end(m)), mark(GlobalTime.slot_end(m - 1))], m)
    # No partitions listed (no pre-barrier topic yet), or no slot to snapshot.
    assert not accepts([], m)
    assert not accepts([mark(GlobalTime.slot_end(5))], 0)


def test_marks_survive_their_encoding() -> None:
    encoded = mark(GlobalTime.slot_end(11)).encode()
    assert accepts([BarrierMark.decode(encoded, "t")], 12)


def test_barrier_group_is_the_barrier_service_group() -> None:
    service = BarrierService(
        "localhost:1", "app", "sink_4", "s", KafkaSink("out"), shards=1, view=None, segments=("s",)
    )
    assert barrier_group("app", "sink_4") == service.group == "app.sink_4.barrier"


_gts = st.one_of(
    st.none(),
    st.builds(GlobalTime.slot_end, st.integers(0, 20)),
    st.builds(GlobalTime.slot_start, st.integers(0, 20)),
    st.builds(GlobalTime, st.integers(0, 20), st.integers(0, 3), st.integers(-1, 3)),
)


@given(st.lists(st.one_of(st.none(), st.builds(mark, _gts)), max_size=3), st.integers(0, 25))
def test_accepted_slot_is_the_largest_accepted(marks: list[BarrierMark | None], slot: int) -> None:
    bound = accepted_slot(marks)
    assert accepts(marks, slot) == (1 <= slot <= bound)
