"""The one retry policy: each step of `Retry.call` and `Retry.call_async`."""

from __future__ import annotations

import asyncio
import doctest
import time
from collections.abc import Callable

import pytest

import framework.retries
from framework.retries import Retry


class BusyError(Exception):
    """An error that passes."""


def failing(times: int, error: type[Exception] = BusyError) -> Callable[[], str]:
    """A call that fails ``times`` times, then answers."""
    calls = [0]

    def call() -> str:
        calls[0] += 1
        if calls[0] <= times:
            raise error(f"try {calls[0]}")
        return f"done after {calls[0]}"

    return call


def busy(exc: BaseException) -> bool:
    return isinstance(exc, BusyError)


def test_a_retriable_error_is_tried_again_with_growing_capped_pauses() -> None:
    pauses: list[float] = []
    policy = Retry(busy, attempts=5, first_s=0.001, factor=2.0, most_s=0.003)
    assert policy.call(failing(4), lambda _e, p: pauses.append(p)) == "done after 5"
    assert pauses == [0.001, 0.002, 0.003, 0.003]


def test_an_error_the_policy_does_not_retry_escapes_at_once() -> None:
    seen: list[BaseException] = []
    with pytest.raises(ValueError, match="try 1"):
        Retry(busy, attempts=5, first_s=0).call(
            failing(1, ValueError), lambda e, _p: seen.append(e)
        )
    assert seen == []


def test_after_the_last_attempt_the_last_error_escapes() -> None:
    with pytest.raises(BusyError, match="try 3"):
        Retry(busy, attempts=3, first_s=0).call(failing(5))
    assert Retry(busy, attempts=1).call(failing(0)) == "done after 1"


def test_the_deadline_ends_the_tries_and_no_pause_runs_past_it() -> None:
    pauses: list[float] = []
    began = time.monotonic()
    with pytest.raises(BusyError):
        Retry(busy, within_s=0.2, first_s=0.15).call(failing(100), lambda _e, p: pauses.append(p))
    assert time.monotonic() - began < 1.0
    assert pauses[0] == pytest.approx(0.15, abs=0.01) and pauses[1] < 0.06


def test_a_policy_must_end() -> None:
    with pytest.raises(ValueError, match="must end"):
        Retry(busy)
    with pytest.raises(ValueError, match="attempts=0"):
        Retry(busy, attempts=0)


def test_on_retry_may_stop_the_tries() -> None:
    def stop(_exc: BaseException, _pause: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Retry(busy, attempts=5, first_s=0).call(failing(3), stop)


def test_the_async_call_follows_the_same_steps() -> None:
    pauses: list[float] = []
    calls = [0]

    async def flaky() -> int:
        calls[0] += 1
        if calls[0] < 3:
            raise BusyError
        return calls[0]

    policy = Retry(busy, attempts=3, first_s=0.001, factor=3.0)
    assert asyncio.run(policy.call_async(flaky, lambda _e, p: pauses.append(p))) == 3
    assert pauses == [0.001, 0.003]
    calls[0] = -10
    with pytest.raises(BusyError):
        asyncio.run(policy.call_async(flaky))


def test_the_module_example_runs() -> None:
    failed, tried = doctest.testmod(framework.retries)
    assert tried >= 3 and failed == 0
