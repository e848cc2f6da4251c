"""The barrier service's release protocol (`BarrierService._fenced`, steps 1-3): a min time
is applied only once the pre-barrier partition is read up to its end as asked for after
that min time was seen. The partition's end and the position read are faked (the
service against a broker: integration_tests/test_services.py)."""

from __future__ import annotations

from framework.barrier.service import BarrierService
from framework.kafka.endpoints import KafkaSink


class _Partition:
    """The pre-barrier partition as the barrier sees it: its end, and how far it read."""

    def __init__(self) -> None:
        self.end = 0
        self.read = 0
        self.asked = 0


def _barrier(partition: _Partition) -> BarrierService:
    barrier = BarrierService(
        "127.0.0.1:1", "app", "sink-out", "seg", KafkaSink("out"), shards=1, segments=("seg",)
    )

    def log_end() -> int:
        partition.asked += 1
        return partition.end

    barrier._log_end = log_end  # type: ignore[method-assign]
    barrier._read_to = lambda: partition.read  # type: ignore[method-assign]
    return barrier


def test_a_min_time_whose_frames_were_read_already_is_applied_at_once() -> None:
    partition = _Partition()
    barrier = _barrier(partition)
    partition.end = partition.read = 40
    assert barrier._fenced(7) == 7
    assert partition.asked == 1 and barrier.stats.fence_waits == 0


def test_a_min_time_waits_until_the_partition_is_read_to_the_end_asked_after_it() -> None:
    partition = _Partition()
    barrier = _barrier(partition)
    partition.end, partition.read = 40, 30  # frames of slots below 7 may be in 30..39
    assert barrier._fenced(7) == 0, "step 2: not yet"
    assert barrier.stats.fence_waits == 1
    partition.end = 45  # later appends do not move the fence of min time 7
    assert barrier._fenced(9) == 0, "a newer min time waits for the fence in progress"
    assert partition.asked == 1
    partition.read = 40
    assert barrier._fenced(9) == 7, "step 3: the fenced min time, not the newer one"
    partition.read = 45
    assert barrier._fenced(9) == 9, "the newer one gets its own fence, read already"
    assert partition.asked == 2


def test_no_fence_for_a_min_time_already_releasable() -> None:
    partition = _Partition()
    barrier = _barrier(partition)
    partition.end = partition.read = 10
    assert barrier._fenced(5) == 5
    assert barrier._fenced(5) == 5 and barrier._fenced(3) == 5
    assert partition.asked == 1
