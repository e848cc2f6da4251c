"""Front heartbeats ride out a broker outage and give up only after ``outage_s``."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

from framework.core.messages import Heartbeat
from framework.core.time import front_id
from framework.errors import ProtocolViolation, ServiceFailed
from framework.runners.spark.fronts import FrontHeartbeats


def _fronts(outage_s: float, interval_ms: int = 5) -> FrontHeartbeats:
    # No broker behind this address: the producer connects lazily and is never used.
    fronts = FrontHeartbeats(
        "127.0.0.1:1",
        "app",
        acks_topic="app.acks",
        shards=1,
        sources={},
        delta_ms=10,
        interval_ms=interval_ms,
        outage_s=outage_s,
    )
    fronts.broker_offset_ms = 0  # no broker here to measure it: as if measured, no skew
    return fronts


def _wait(condition: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_failed_rounds_are_skipped_until_the_broker_is_back() -> None:
    fronts = _fronts(outage_s=60)
    rounds = []

    def beat() -> list[object]:
        rounds.append(time.monotonic())
        if len(rounds) <= 5:
            raise OSError("broker away")
        return []

    fronts.beat = beat  # type: ignore[method-assign]
    fronts.start()
    try:
        _wait(lambda: len(rounds) >= 10)
        assert len(rounds) >= 10, "the thread stopped heartbeating after the failures"
        assert fronts.failed_rounds == 5
        assert fronts.error is None
        assert fronts.running
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for


def test_an_outage_longer_than_outage_s_fails_the_run() -> None:
    fronts = _fronts(outage_s=0.1)

    def beat() -> list[object]:
        raise OSError("broker gone for good")

    fronts.beat = beat  # type: ignore[method-assign]
    started = time.monotonic()
    fronts.start()
    try:
        _wait(lambda: fronts.error is not None)
        assert isinstance(fronts.error, ServiceFailed)
        assert isinstance(fronts.error.__cause__, OSError)
        assert time.monotonic() - started >= 0.1
        _wait(lambda: not fronts.running)
        assert not fronts.running
    finally:
        with pytest.raises(ServiceFailed, match="front heartbeats failed"):
            fronts.stop(flush_s=0)  # no broker: nothing to wait for


class _Stage:
    def consumed(self) -> tuple[dict[int, int], dict[int, int]]:
        return {}, {0: 1_000}


def test_a_round_that_fails_midway_is_sent_again_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    fails = ["b"]

    def ends(_bootstrap: str, topic: str, partitions: int | None = None) -> dict[int, int]:
        assert partitions == 1
        if topic in fails:
            fails.remove(topic)
            raise OSError("broker away")
        return {0: 5}

    monkeypatch.setattr("framework.runners.spark.fronts.end_offsets", ends)
    monkeypatch.setattr("framework.runners.spark.fronts.partition_count", lambda _b, _t: 1)
    fronts = _fronts(outage_s=60)
    fronts.sources = {"a": _Stage(), "b": _Stage()}
    try:
        with pytest.raises(OSError):
            fronts.beat()  # topic a's heartbeat was computed, never sent
        beats = fronts.beat()
        assert {beat.front for beat in beats} == {front_id("a", 0), front_id("b", 0)}
        assert fronts.beat() == []  # nothing rose since
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for


def test_a_poke_beats_at_once_and_partition_counts_are_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    described: list[str] = []

    def count(_bootstrap: str, topic: str) -> int:
        described.append(topic)
        return 1

    monkeypatch.setattr("framework.runners.spark.fronts.partition_count", count)
    monkeypatch.setattr("framework.runners.spark.fronts.end_offsets", lambda *_a, **_k: {0: 5})
    fronts = _fronts(outage_s=60, interval_ms=60_000)  # no round comes by the clock
    fronts.sources = {"a": _Stage()}
    rounds: list[float] = []
    beat = fronts.beat

    def counted() -> list[object]:
        rounds.append(time.monotonic())
        return beat()  # type: ignore[return-value]

    fronts.beat = counted  # type: ignore[method-assign]
    fronts.start()
    try:
        for expected in (1, 2, 3):
            fronts.poke()
            _wait(lambda n=expected: len(rounds) >= n)  # type: ignore[misc]
            assert len(rounds) == expected
        assert described == ["a"]
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for


class _CaughtUp:
    """A source stage that consumed topic ``a`` to offset 5, stamps long ago."""

    def consumed(self) -> tuple[dict[int, int], dict[int, int]]:
        return {0: 5}, {0: 1_000}


def test_a_caught_up_partition_heartbeats_front_lag_ms_behind_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("framework.runners.spark.fronts.end_offsets", lambda *_a, **_k: {0: 5})
    monkeypatch.setattr("framework.runners.spark.fronts.partition_count", lambda _b, _t: 1)
    fronts = _fronts(outage_s=60)
    fronts.sources = {"a": _CaughtUp()}
    try:
        before = time.time_ns() // 1_000_000
        (beat,) = fronts.beat()
        after = time.time_ns() // 1_000_000
        # Not slot(t0 - delta): a record stamped 200 ms ago may still be on its way.
        assert (before - fronts.lag_ms) // 10 <= beat.slot <= (after - fronts.lag_ms) // 10
        assert fronts.lag_ms == 250
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for


def _row(
    stamp: int, skipped: bool = False, source_row: bool = True, least_slot: int = -1
) -> dict[str, object]:
    return {
        "partition": 0,
        "min_timestamp_ms": stamp,
        "least_slot": least_slot,
        "skipped": skipped,
        "source_row": source_row,
    }


def test_a_record_older_than_a_heartbeat_fails_the_run() -> None:
    fronts = _fronts(outage_s=60)
    fronts.sent[front_id("a", 0)] = 500  # promised: nothing below 5000 ms is left
    try:
        fronts.check_batch("a", [_row(5_000), _row(5_009)])  # in the promised slot or later
        fronts.check_batch("a", [_row(4_000, skipped=True)])  # read before the promise
        fronts.check_batch("b", [_row(0)])  # another topic's front was never promised
        fronts.check_batch("a", [_row(0, source_row=False)])  # a fused query's hash unit
        fronts.check_batch("a", [_row(4_000, least_slot=500)])  # late, lifted to the promise
        with pytest.raises(ProtocolViolation, match="FLAMEPIPE_FRONT_LAG_MS") as caught:
            fronts.check_batch("a", [_row(5_000), _row(4_999)])
        assert "a[0] stamped 4999" in str(caught.value)
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for


class _Report:
    def __init__(self, stamp: int) -> None:
        self.stamp = stamp

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_LOG_APPEND_TIME, self.stamp)


def test_broker_time_is_never_overestimated() -> None:
    fronts = _fronts(outage_s=60)
    now = [1_000_000]
    fronts.clock = lambda: now[0]
    try:
        fronts._delivered(None, _Report(1_000_000 - 2_000))  # this clock runs 2 s ahead
        assert fronts.broker_offset_ms == -2_000
        assert fronts.broker_now() == 998_000
        fronts._delivered(None, _Report(1_000_000 + 500))  # now behind: keep this clock
        assert fronts.broker_now() == 1_000_000
        fronts._delivered(OSError("lost"), _Report(0))  # a failed delivery tells nothing
        assert fronts.broker_offset_ms == 500
    finally:
        fronts.stop(flush_s=0)


class _Reporting:
    """A producer whose poll serves the delivery report of a heartbeat the broker stamped
    at ``stamp``, once."""

    def __init__(self, fronts: FrontHeartbeats, stamp: int) -> None:
        self.fronts, self.pending = fronts, [stamp]

    def poll(self, _timeout: float) -> int:
        while self.pending:
            self.fronts._delivered(None, _Report(self.pending.pop()))
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


def test_every_round_serves_delivery_reports_even_one_that_sends_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A report served late measures the clock as far ahead as it was late; a round that
    sends nothing must still serve the last round's, or the next heartbeat from the clock
    waits for as long (a continuous source task stopped releasing its last records)."""
    monkeypatch.setattr("framework.runners.spark.fronts.end_offsets", lambda *_a, **_k: {0: 5})
    monkeypatch.setattr("framework.runners.spark.fronts.partition_count", lambda _b, _t: 1)
    fronts = _fronts(outage_s=60)
    fronts.sources = {"a": _CaughtUp()}
    fronts.sent[front_id("a", 0)] = 10**12  # heartbeated far ahead: this round sends nothing
    fronts.broker_offset_ms = -14_000  # measured by a report served 14 s late
    fronts._producer = _Reporting(fronts, fronts.clock() - 3)  # type: ignore[assignment]
    try:
        assert fronts.beat() == []
        assert fronts.broker_offset_ms is not None and -1_000 < fronts.broker_offset_ms <= 0
    finally:
        fronts.stop(flush_s=0)


def test_a_skew_failpoint_moves_this_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLAMEPIPE_FAILPOINTS", "clock.skew_ms=2000")
    fronts = _fronts(outage_s=60)
    try:
        assert fronts.clock() - time.time_ns() // 1_000_000 >= 1_990
    finally:
        fronts.stop(flush_s=0)


def test_floors_are_promised_before_the_heartbeat_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("framework.runners.spark.fronts.end_offsets", lambda *_a, **_k: {0: 1})
    monkeypatch.setattr("framework.runners.spark.fronts.partition_count", lambda _b, _t: 1)
    fronts = _fronts(outage_s=60)
    fronts.sources = {"a": _Stage()}
    seen: list[dict[int, int]] = []

    def produce(*_args: object, **_kwargs: object) -> None:
        seen.append(fronts.floors("a"))

    monkeypatch.setattr("framework.runners.spark.fronts.produce_record", produce)
    try:
        (beat,) = fronts.beat()
        assert seen and seen[0] == {0: beat.slot} == fronts.floors("a")
    finally:
        fronts.stop(flush_s=0)


def test_an_end_offset_below_one_seen_or_no_progress_is_not_caught_up() -> None:
    """A broker restarting may answer with an end offset that is not its log's: taken as
    the end, it would promise the clock past a backlog still to be read."""
    fronts = _fronts(outage_s=60)
    try:
        assert fronts._caught_up("a", 0, 10, 10)
        assert not fronts._caught_up("a", 0, 10, -1)  # below the end seen: ignored
        assert not fronts._caught_up("a", 0, 3, 0)  # the same
        assert not fronts._caught_up("a", 1, None, 0)  # no progress of the query yet
        assert fronts._caught_up("a", 0, 12, 12)
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for


def test_a_carried_heartbeat_is_promised_at_once_and_sent_only_when_committed() -> None:
    """What a continuous source task's commit carries: step 2 for its last record, a
    floor from then on, and no second heartbeat for the same slot."""
    fronts = _fronts(outage_s=60)
    try:
        beat = fronts.carried("a", 0, 1_234)
        assert beat == Heartbeat(front_id("a", 0), 123)
        assert fronts.floors("a") == {0: 123}  # later records below it are lifted
        assert fronts.carried("a", 0, 1_239) is None  # promised already, not yet sent
        fronts.sent_with(beat)
        assert fronts.sent[front_id("a", 0)] == 123
        assert fronts.carried("a", 0, 1_240) == Heartbeat(front_id("a", 0), 124)
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for


def test_a_heartbeat_ahead_of_the_commit_is_promised_and_sent_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a continuous source task sends when it takes records with everything before
    them committed: the first one's slot, on every shard, now, and a floor for later
    records; the commit of those records then carries only a higher slot."""
    sent: list[tuple[int | None, dict[int, int]]] = []

    def produce(_producer: object, record: object, *_a: object, **_k: object) -> None:
        sent.append((getattr(record, "partition", None), fronts.floors("a")))

    monkeypatch.setattr("framework.runners.spark.fronts.produce_record", produce)
    fronts = _fronts(outage_s=60)
    fronts.shards = 2
    try:
        assert fronts.ahead("a", 0, 1_234) == Heartbeat(front_id("a", 0), 123)
        assert [shard for shard, _ in sent] == [0, 1]  # every shard, before returning
        assert all(floors == {0: 123} for _, floors in sent)  # promised before sent
        assert fronts.sent[front_id("a", 0)] == 123
        assert fronts.ahead("a", 0, 1_239) is None and len(sent) == 2  # no rise, nothing sent
        assert fronts.carried("a", 0, 1_238) is None  # the commit carries only a rise
        assert fronts.carried("a", 0, 1_240) == Heartbeat(front_id("a", 0), 124)
    finally:
        fronts.stop(flush_s=0)  # no broker: nothing to wait for
