"""Restarting a stage query: passing failures and hung batches restart, final ones stop."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from framework.errors import FlamepipeError, ProtocolViolation, ServiceFailed
from framework.runners.spark.queries import StageInterrupted, StageQuery
from framework.runners.spark.supervision import RESTARTS, WINDOW_S, QuerySupervisor
from framework.runners.startup import is_passing


class _Query:
    def __init__(self) -> None:
        self.failed: str | None = None
        self.age: float | None = None
        self.restarts = 0

    def failure(self) -> str | None:
        return self.failed

    def batch_age_s(self) -> float | None:
        return self.age

    def restart(self, spark: Any) -> None:
        assert spark == "spark"
        self.restarts += 1
        self.failed, self.age = None, None


def _supervisor(query: _Query, now: list[float]) -> QuerySupervisor:
    return QuerySupervisor(
        "app", lambda: {"s1": query}, "spark", stuck_batch_s=60, clock=lambda: now[0]
    )


def test_a_healthy_query_is_left_alone() -> None:
    query = _Query()
    query.age = 59.0
    _supervisor(query, [0.0]).heal()
    assert query.restarts == 0


def test_a_passing_failure_and_a_hung_batch_restart_the_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    query, now = _Query(), [0.0]
    supervisor = _supervisor(query, now)
    query.failed = "stage s1: batch 7 failed: KafkaClientError: transaction failed"
    supervisor.heal()
    query.age = 61.0
    supervisor.heal()
    assert query.restarts == 2 and supervisor.restarted == 2
    text = caplog.text
    assert "stage s1 of 'app': it failed: stage s1: batch 7 failed" in text
    assert "made no progress for 61 s" in text and "restarting its query" in text


def test_too_many_restarts_in_the_window_stop_the_driver() -> None:
    query, now = _Query(), [0.0]
    supervisor = _supervisor(query, now)
    for _ in range(RESTARTS):
        query.age = 100.0
        supervisor.heal()
        now[0] += 1
    query.age = 100.0
    with pytest.raises(ServiceFailed, match="restarted 3 times in 10 min: stopping the driver"):
        supervisor.heal()
    now[0] += WINDOW_S  # the old restarts age out of the window
    supervisor.heal()
    assert query.restarts == RESTARTS + 1


def test_a_broker_restart_seen_by_a_new_task_restarts_the_stage() -> None:
    """A task that makes its first admin client while the broker restarts finds no broker:
    an outage, which the next tasks outlive, not a configuration error that stops the run
    (it stopped the driver of the crash harness once in a broker restart)."""
    query = _Query()
    query.failed = (
        "continuous tasks failed: KafkaUnreachable: cannot reach Kafka at 127.0.0.1:9092 "
        "(127.0.0.1:9092: Connection refused): start it (`flamepipe up`) or point "
        "bootstrap_servers (FLAMEPIPE_BOOTSTRAP_SERVERS, --bootstrap) at a running broker"
    )
    _supervisor(query, [0.0]).heal()
    assert query.restarts == 1


@pytest.mark.parametrize("error", ["ProtocolViolation", "ConfigError", "UserFunctionError"])
def test_a_final_failure_stops_without_a_restart(error: str) -> None:
    query = _Query()
    query.failed = f"stage s1: batch 3 failed: {error}: what a restart would repeat"
    with pytest.raises(FlamepipeError, match=f"stage s1 of 'app' failed: .*{error}") as raised:
        _supervisor(query, [0.0]).heal()
    assert not is_passing(raised.value)  # the driver stops: no restart repeats it
    assert isinstance(raised.value, ProtocolViolation) == (error == "ProtocolViolation")
    assert query.restarts == 0


def test_a_violation_found_by_a_batch_check_stops_the_driver() -> None:
    """Spark's report of the failed query keeps only the first line of the Python
    traceback; the query's own record of its last error names the violation."""
    query = StageQuery.__new__(StageQuery)
    query.spec = SimpleNamespace(stage=SimpleNamespace(id="s1"))  # type: ignore[assignment]
    query._stopping = False
    query._batch_started = None
    query.last_error = None

    def violating(_frame: Any, _batch_id: int) -> None:
        raise ProtocolViolation("a record of lines[0] became readable after the heartbeat")

    query._run_batch = violating  # type: ignore[method-assign]
    with pytest.raises(StageInterrupted):
        query._batch(None, 3)
    assert query.batch_age_s() is None
    query.query = SimpleNamespace(
        isActive=False, exception=lambda: "An exception was raised by the Python Proxy."
    )
    failure = query.failure()
    assert failure is not None and failure.startswith("ProtocolViolation: a record")
    supervisor = QuerySupervisor("app", lambda: {"s1": query}, "spark", stuck_batch_s=60)
    with pytest.raises(ProtocolViolation):
        supervisor.heal()
