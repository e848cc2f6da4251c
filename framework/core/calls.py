"""``map_async``: one call of an external service per item, many calls in flight at once.

The user's ``fn`` is a coroutine function (``async def fn(payload) -> value``). A stage
task collects the items that reach the node in its batch and runs their calls together
(`MapAsyncOp.apply_batch`), at most ``concurrency`` at a time, on one event loop per
operation that lives as long as the operation, so a client the function keeps (an
``httpx.AsyncClient``) stays bound to a running loop. Protocol per item:

1. Call ``fn(payload)`` under a ``timeout_s`` deadline.
2. If it raises or times out, wait ``backoff_s * 2**attempt`` and call again, up to
   ``retries`` more times.
3. The result becomes the item's one output (child id 0, like ``map``); after the last
   failed attempt the item fails with `UserFunctionError` naming every attempt's error,
   which the task sends to the dead-letter topic with that reason.

Outputs keep the order of their inputs. Exactly once is a property of the output, not of
the calls: a retried task batch, a restart or a replay calls the service again for the
items it processes again, and only one call's result per item is ever committed (the
others were in aborted transactions, or are dropped by the barrier as already released).
A service whose answer may change between calls therefore gives a pipeline whose output
is one of its answers, each item's exactly once.
"""

from __future__ import annotations

import asyncio
import math
import reprlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from framework.core.meta import Record
from framework.core.values import UserValue
from framework.errors import PipelineError, UserFunctionError
from framework.retries import Retry


@dataclass(frozen=True, slots=True)
class AsyncCall:
    """How ``map_async`` calls its function (see the module docstring)."""

    concurrency: int = 16
    timeout_s: float = 10.0
    retries: int = 2
    backoff_s: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not 1 <= self.concurrency <= 10_000:
            raise PipelineError(f"map_async concurrency={self.concurrency!r}: give 1..10000")
        if not 0 < self.timeout_s <= 3600:
            raise PipelineError(f"map_async timeout_s={self.timeout_s!r}: give (0, 3600] s")
        if isinstance(self.retries, bool) or not 0 <= self.retries <= 100:
            raise PipelineError(f"map_async retries={self.retries!r}: give 0..100")
        if not 0 <= self.backoff_s <= 60:
            raise PipelineError(f"map_async backoff_s={self.backoff_s!r}: give [0, 60] s")

    def policy(self) -> Retry:
        """Step 2: ``retries`` more tries after any error, pausing ``backoff_s``, doubling."""
        return Retry(
            _every_error,
            attempts=self.retries + 1,
            first_s=self.backoff_s,
            factor=2.0,
            most_s=math.inf,
        )


def _every_error(_exc: BaseException) -> bool:
    return True


class _Loop:
    """An event loop on a thread of its own, started on first use.

    A thread, not ``run_until_complete`` on the caller's: Spark's Python worker and a
    notebook may already run a loop on theirs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, coroutine: Awaitable[UserValue]) -> UserValue:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="flamepipe-map-async", daemon=True
                ).start()
                self._loop = loop
        return asyncio.run_coroutine_threadsafe(_awaited(coroutine), self._loop).result()


async def _awaited(awaitable: Awaitable[UserValue]) -> UserValue:
    return await awaitable


@dataclass(slots=True)
class MapAsyncOp:
    """The physical ``map_async``; see the module docstring."""

    name: str
    op_id: int
    fn: Callable[[UserValue], Awaitable[UserValue]]
    call: AsyncCall
    _loop: _Loop = field(default_factory=_Loop, repr=False, compare=False)
    calls: int = 0  # calls made, retries included
    failures: int = 0  # items that failed every attempt

    def apply(self, record: Record) -> list[Record]:
        """One item alone (the in-process runner); raises `UserFunctionError` on failure."""
        (outcome,) = self.apply_batch([record])
        if isinstance(outcome, UserFunctionError):
            raise outcome
        return outcome

    def apply_batch(self, records: Sequence[Record]) -> list[list[Record] | UserFunctionError]:
        """Per record, in order: its one output, or the error of its last attempt."""
        if not records:
            return []
        if any(r.meta.tombstone for r in records):  # the graph check keeps groupings out
            raise PipelineError(f"{self.name} got a tombstone: map_async cannot follow a group")
        results: list[UserValue] = self._loop.run(self._all([r.value for r in records]))
        outcomes: list[list[Record] | UserFunctionError] = []
        for record, result in zip(records, results, strict=True):
            if isinstance(result, UserFunctionError):
                self.failures += 1
                outcomes.append(result)
            else:
                outcomes.append([Record(record.meta.child(self.op_id, 0), result)])
        return outcomes

    async def _all(self, payloads: list[UserValue]) -> list[UserValue]:
        gate = asyncio.Semaphore(self.call.concurrency)

        async def one(payload: object) -> UserValue:
            async with gate:
                return await self._with_retries(payload)

        return list(await asyncio.gather(*(one(p) for p in payloads)))

    async def _with_retries(self, payload: object) -> UserValue:
        errors: list[str] = []
        call = self.call

        def note(exc: BaseException, _pause_s: float = 0.0) -> None:
            timed_out = isinstance(exc, TimeoutError)
            errors.append(f"timed out after {call.timeout_s} s" if timed_out else repr(exc))

        async def once() -> UserValue:
            self.calls += 1
            # Step 1
            return await asyncio.wait_for(self.fn(payload), call.timeout_s)

        try:
            # Step 2: the user's function, so any error is its item's to retry
            return await call.policy().call_async(once, note)
        except Exception as exc:
            note(exc)
        # Step 3
        return UserFunctionError(
            f"{self.name} failed on {reprlib.repr(payload)} after {len(errors)} attempt(s): "
            + "; ".join(errors)
        )
