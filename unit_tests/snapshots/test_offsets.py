"""Where sources replay from after a snapshot: each step of `replay_offsets` against a log
kept in memory (a fake consumer answering as the broker would)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition

from framework.snapshots import offsets
from framework.wire.lifts import Lift

DELTA_MS = 10


class _Log:
    """A consumer over ``stamps``: topic -> partition -> LogAppendTime of each offset."""

    def __init__(self, stamps: dict[str, list[list[int]]]) -> None:
        self.stamps = stamps
        self.appended: list[tuple[str, int, int]] = []  # appended after the end was read

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float, cached: bool = False
    ) -> tuple[int, int]:
        assert not cached  # step 1 asks the broker, not the client's cache
        end = len(self.stamps[tp.topic][tp.partition])
        for topic, partition, stamp in self.appended:  # a record lands after step 1
            self.stamps[topic][partition].append(stamp)
        self.appended.clear()
        return 0, end

    def offsets_for_times(
        self, asked: list[TopicPartition], timeout: float
    ) -> list[TopicPartition]:
        found = []
        for tp in asked:
            log = self.stamps[tp.topic][tp.partition]
            first = next((i for i, stamp in enumerate(log) if stamp >= tp.offset), -1)
            found.append(TopicPartition(tp.topic, tp.partition, first))
        return found


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Log]:
    fake = _Log({"in": [[5, 12, 19, 20, 35], [1, 2]]})
    monkeypatch.setattr(offsets._consumers, "get", lambda _key, _make: fake)
    yield fake


def test_each_partition_starts_at_its_first_record_of_the_slot_or_later(log: _Log) -> None:
    # Slot 2 starts at 20 ms: partition 0's offset 3; partition 1 has no record that late.
    assert offsets.replay_offsets("b", {"in": 2}, 2, DELTA_MS) == {"in": {0: 3, 1: 2}}
    assert offsets.replay_offsets("b", {"in": 2}, 1, DELTA_MS) == {"in": {0: 1, 1: 2}}
    assert offsets.replay_offsets("b", {"in": 2}, 0, DELTA_MS) == {"in": {0: 0, 1: 0}}


def test_with_no_record_that_late_the_end_read_first_is_the_start(log: _Log) -> None:
    # Step 3: a record appended after the end was read is in the slot or later, so the
    # start is that end (2), not the record's offset and not past it.
    log.appended.append(("in", 1, 90))
    assert offsets.replay_offsets("b", {"in": 2}, 9, DELTA_MS)["in"][1] == 2


def test_a_lift_at_or_after_the_slot_starts_its_partition_no_later_than_its_first_offset(
    log: _Log,
) -> None:
    lifted = (
        Lift("in", 0, 1, 2, 3),  # records 1-2 (12, 19 ms) lifted to slot 3: replayed
        Lift("in", 1, 0, 0, 1),  # below the snapshot's slot: in the snapshot
    )
    starts = offsets.replay_offsets("b", {"in": 2}, 3, DELTA_MS, {"in": lifted})
    assert starts == {"in": {0: 1, 1: 2}}


def test_a_bad_slot_or_interval_is_refused(log: _Log) -> None:
    with pytest.raises(ValueError, match="slot=-1"):
        offsets.replay_offsets("b", {"in": 2}, -1, DELTA_MS)
    with pytest.raises(ValueError, match="delta_ms=0"):
        offsets.replay_offsets("b", {"in": 2}, 1, 0)
