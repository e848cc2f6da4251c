"""`flamepipe acker|barrier` start: tried again while the cluster fails it, not otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from framework.cli import serve
from framework.errors import (
    ConfigError,
    DeadlineExceeded,
    Fenced,
    KafkaClientError,
    ServiceFailed,
)
from framework.runners.assembly import ServiceSet


def _build(failures: list[Exception]) -> Any:
    calls = []

    def build(epoch: int) -> ServiceSet:
        calls.append(epoch)
        if failures:
            raise failures.pop(0)
        return ServiceSet()

    build.calls = calls  # type: ignore[attr-defined]
    return build


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "_START_PAUSE_S", 0.0)


def test_a_start_failing_on_the_cluster_is_tried_again() -> None:
    build = _build([DeadlineExceeded("did not get ready in 30.0 s"), KafkaClientError("no leader")])
    started = serve._start_retrying(build, 3, lambda: False)
    assert isinstance(started, ServiceSet)
    assert build.calls == [3, 3, 3]


def test_it_gives_up_after_the_last_attempt() -> None:
    failures: list[Exception] = [KafkaClientError("broker away")] * serve._START_ATTEMPTS
    build = _build(list(failures))
    with pytest.raises(KafkaClientError, match="broker away"):
        serve._start_retrying(build, 0, lambda: False)
    assert len(build.calls) == serve._START_ATTEMPTS


@pytest.mark.parametrize("error", [ConfigError("bad setting"), Fenced("a newer leader")])
def test_configuration_errors_and_fencing_fail_at_once(error: Exception) -> None:
    build = _build([error])
    with pytest.raises(type(error)):
        serve._start_retrying(build, 0, lambda: False)
    assert build.calls == [0]


def test_a_lost_leadership_ends_the_retries() -> None:
    build = _build([ServiceFailed("no leader")])
    assert serve._start_retrying(build, 0, lambda: True) is None
    assert build.calls == [0]


class _Failing(ServiceSet):
    """Services whose check raises the next of ``failures`` (then, with none left, the
    lost leadership ends the run)."""

    def __init__(self, failures: list[Exception], lost: list[bool]) -> None:
        super().__init__()
        self.failures = failures
        self.lost = lost
        self.stopped = 0

    def check(self) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.lost.append(True)

    def stop_quietly(self, timeout: float = 0.0) -> None:
        self.stopped += 1


def _serve(failures: list[Exception]) -> tuple[list[_Failing], list[bool]]:
    made: list[_Failing] = []
    lost: list[bool] = []

    def build(_epoch: int) -> ServiceSet:
        made.append(_Failing(failures, lost))
        return made[-1]

    serve._serve_epochs(build, lambda _s: "figures", lambda: 0, lambda: bool(lost))
    return made, lost


def test_a_service_broken_by_a_broker_restart_is_started_again() -> None:
    """A barrier's transaction that a broker restart broke stops its services, which
    start again in the same process: no exit for a supervisor to catch."""
    made, _ = _serve([KafkaClientError("transaction failed: send_offsets hung")])
    assert len(made) == 2 and all(s.stopped == 1 for s in made)


def test_other_failures_and_too_many_restarts_end_the_process() -> None:
    with pytest.raises(ConfigError):
        _serve([ConfigError("bad setting")])
    many: list[Exception] = [KafkaClientError("again")] * (serve._RESTARTS + 1)
    with pytest.raises(KafkaClientError, match="again"):
        _serve(many)
