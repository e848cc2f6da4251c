"""One retry policy: which errors to try again, how long to pause, when to give up.

Every place that asks again after a failure (a Kafka call while its error passes, a
WebHDFS request, a service's start, a ``map_async`` call) states a `Retry` and runs its
call through it, so the rules read the same everywhere:

1. Call. A result ends the loop.
2. An error ``retriable`` refuses, or one after the last try (``attempts``) or past the
   deadline (``within_s``), escapes as it is: the caller says what it means.
3. Otherwise pause (``first_s``, times ``factor`` after each try, at most ``most_s``,
   never past the deadline), tell ``on_retry`` (a log line, a stop check that may
   raise), and go back to step 1.

>>> flaky = iter([ValueError("busy"), ValueError("busy"), "done"])
>>> def call() -> str:
...     out = next(flaky)
...     if isinstance(out, Exception):
...         raise out
...     return out
>>> Retry(lambda e: isinstance(e, ValueError), attempts=3, first_s=0).call(call)
'done'
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from framework.deadline import Deadline

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """The policy of one kind of call (see the module docstring for the steps)."""

    retriable: Callable[[BaseException], bool]
    attempts: int | None = None  # tries in all (None: until the deadline)
    within_s: float | None = None  # give up once this is spent (None: after the attempts)
    first_s: float = 0.05
    factor: float = 1.0
    most_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts is None and self.within_s is None:
            raise ValueError("a retry needs attempts, within_s or both: it must end")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts={self.attempts}: at least one try")

    def pauses(self) -> Iterator[float]:
        """The pause before each try after the first, without the deadline's cap."""
        pause = self.first_s
        while True:
            yield min(pause, self.most_s)
            pause *= self.factor

    def call(
        self,
        fn: Callable[[], T],
        on_retry: Callable[[BaseException, float], None] | None = None,
    ) -> T:
        """``fn()`` under this policy; ``on_retry(error, pause_s)`` before each pause."""
        tries = _Tries(self)
        while True:
            try:
                # Step 1
                return fn()
            except Exception as exc:
                # Steps 2-3
                time.sleep(tries.pause_after(exc, on_retry))

    async def call_async(
        self,
        fn: Callable[[], Awaitable[T]],
        on_retry: Callable[[BaseException, float], None] | None = None,
    ) -> T:
        """`call` for a coroutine function: the pauses do not block the event loop."""
        tries = _Tries(self)
        while True:
            try:
                # Step 1
                return await fn()
            except Exception as exc:
                # Steps 2-3
                await asyncio.sleep(tries.pause_after(exc, on_retry))


class _Tries:
    """Steps 2-3 for one run of a policy: its count, its deadline, its next pause."""

    def __init__(self, policy: Retry) -> None:
        self.policy = policy
        self.count = 0
        self.deadline = Deadline(policy.within_s) if policy.within_s is not None else None
        self.pauses = policy.pauses()

    def pause_after(
        self, exc: Exception, on_retry: Callable[[BaseException, float], None] | None
    ) -> float:
        """The pause before the next try, or ``exc`` raised when there is none."""
        policy, deadline = self.policy, self.deadline
        self.count += 1
        # Step 2
        last = policy.attempts is not None and self.count >= policy.attempts
        if not policy.retriable(exc) or last or (deadline is not None and deadline.expired):
            raise exc
        # Step 3
        pause = next(self.pauses)
        if deadline is not None:
            pause = deadline.remaining(pause)
        if on_retry is not None:
            on_retry(exc, pause)
        return pause
