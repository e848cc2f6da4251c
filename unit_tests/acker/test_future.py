"""The acker refuses a heartbeat far ahead of the broker's clock: min time never jumps."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

from framework.acker.service import AckerService
from framework.core.messages import Ack, AckerInput, Heartbeat, NodeTime

NOW_MS = 1_700_000_000_000


class _Stamped:
    def __init__(self, kind: int, stamp: int) -> None:
        self.stamp = (kind, stamp)

    def timestamp(self) -> tuple[int, int]:
        return self.stamp


def _acker() -> AckerService:
    return AckerService("127.0.0.1:1", "app", {"s": []}, [7], 1, delta_ms=10, max_future_ms=5_000)


def _batch(slot: int) -> list[AckerInput]:
    return [Ack("s", slot + 10**6, 3), Heartbeat(7, slot), NodeTime(1, 1)]


def test_a_heartbeat_within_the_bound_passes() -> None:
    acker = _acker()
    msg = _Stamped(TIMESTAMP_LOG_APPEND_TIME, NOW_MS)
    for ahead_ms in (-60_000, 0, 5_000):
        slot = (NOW_MS + ahead_ms) // 10
        assert not acker._from_the_future(msg, _batch(slot), "acks[0]@1")  # type: ignore[arg-type]
    assert acker.refused_future == 0


def test_a_forged_heartbeat_116_days_ahead_is_refused_and_counted() -> None:
    acker = _acker()
    msg = _Stamped(TIMESTAMP_LOG_APPEND_TIME, NOW_MS)
    far = (NOW_MS + 10**10) // 10  # the forged record of the report: ~116 days ahead
    assert acker._from_the_future(msg, _batch(far), "acks[0]@1")  # type: ignore[arg-type]
    just_past = (NOW_MS + 5_010) // 10
    assert acker._from_the_future(msg, _batch(just_past), "acks[0]@2")  # type: ignore[arg-type]
    assert acker.refused_future == 2


def test_an_ack_ahead_alone_is_no_reason_to_refuse() -> None:
    """Aggregate holds lie at window ends, ahead of now; they only hold min time back."""
    acker = _acker()
    msg = _Stamped(TIMESTAMP_LOG_APPEND_TIME, NOW_MS)
    batch: list[AckerInput] = [Ack("s", (NOW_MS + 3_600_000) // 10, 5), NodeTime(1, 1)]
    assert not acker._from_the_future(msg, batch, "acks[0]@1")  # type: ignore[arg-type]


def test_without_a_timestamp_nothing_is_refused() -> None:
    acker = _acker()
    msg = _Stamped(TIMESTAMP_NOT_AVAILABLE, -1)
    assert not acker._from_the_future(msg, _batch(10**12), "acks[0]@1")  # type: ignore[arg-type]


def test_a_copy_of_an_applied_batch_is_refused_not_applied_twice() -> None:
    from framework.core.acker.sharded import AckerShard

    acker = _acker()
    shard = AckerShard(0, 1, {"s": []}, [7])
    shard.receive(1, Ack("s", 5, 3))
    shard.receive(1, NodeTime(1, 1))
    assert acker._replayed_batch(shard, NodeTime(1, 1), "acks[0]@9")
    assert not acker._replayed_batch(shard, NodeTime(1, 2), "acks[0]@10")
    assert acker.refused_replays == 1
