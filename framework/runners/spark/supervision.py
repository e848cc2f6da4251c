"""Restarting a stage query that died of a passing failure, or whose batch hangs.

A broker restart, a lost executor or a Kafka client stuck after a crash elsewhere can end
or stall one stage's streaming query while the rest of the pipeline runs. Restarting the
driver for it costs a new Spark session (about 12 s here); restarting the query costs a
second or two and needs nothing else.

Protocol of `QuerySupervisor.heal` (the run's health check calls it about once a second):

1. For each stage query: it is to restart if it died of a failure that is not
   deterministic (anything but the errors in `FINAL`: a violation of the model, a bad
   configuration, a user function failing with ``fail_fast``, which a restart would only
   repeat), or if its current micro-batch has run longer than ``stuck_batch_ms``.
2. Within the budget (`RESTARTS` per query in `WINDOW_S`): stop it (a batch in flight is
   cancelled: Spark interrupts its tasks and ends their Python workers) and start it again
   from its checkpoint, logging which stage and why.
3. Over the budget: `ServiceFailed`; the driver restarts the run (`SparkRunner.run`), or
   stops after too many. A final failure: `ProtocolViolation` or `PipelineError`, which
   stop the driver: a person reads why.

A query restarted from its checkpoint runs its last planned batch again, exactly as after
a driver restart: the tasks that committed find their markers and skip, the others
commit now (docs/fault-tolerance.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Protocol

from framework.errors import PipelineError, ProtocolViolation, ServiceFailed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

FINAL = (
    "ProtocolViolation",
    "ConfigError",
    "PipelineError",
    "UserFunctionError",
    "EncodeError",
    "DecodeError",
    "Unauthenticated",
)
"""Failures a restart would repeat: the run stops and says why."""

RESTARTS = 3
WINDOW_S = 600.0


class Supervised(Protocol):
    """What the supervisor needs of a stage query (`StageQuery`)."""

    def failure(self) -> str | None:
        """Why the query died, or None while it runs."""
        ...

    def batch_age_s(self) -> float | None:
        """How long the batch in flight has run (None: none is)."""
        ...

    def restart(self, spark: SparkSession) -> None:
        """Stop the query (cancelling a batch in flight) and start it from its checkpoint."""
        ...


@dataclass
class QuerySupervisor:
    """Steps 1-3 over the queries of one run."""

    app: str
    queries: Callable[[], Mapping[str, Supervised]]
    spark: SparkSession
    _: KW_ONLY
    stuck_batch_s: float
    clock: Callable[[], float] = time.monotonic
    restarts: dict[str, deque[float]] = field(default_factory=dict, init=False)
    restarted: int = field(default=0, init=False)
    """Queries restarted so far (a figure)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def heal(self) -> None:
        """Steps 1-3; `ServiceFailed` for a query that must not or cannot restart."""
        with self._lock:
            for stage, query in self.queries().items():
                # Step 1
                why = self._why(stage, query)
                if why is not None:
                    self._restart(stage, query, why)

    def _why(self, stage: str, query: Supervised) -> str | None:
        failure = query.failure()
        if failure is not None:
            final = next((name for name in FINAL if name in failure), None)
            if final is not None:
                # Not a ServiceFailed: the driver restarts a run that failed with one.
                error = ProtocolViolation if final == "ProtocolViolation" else PipelineError
                raise error(f"stage {stage} of {self.app!r} failed: {failure}")
            return f"it failed: {_first_line(failure)}"
        age = query.batch_age_s()
        if age is not None and age > self.stuck_batch_s:
            return (
                f"its micro-batch made no progress for {age:.0f} s "
                f"(stuck_batch_ms={self.stuck_batch_s * 1000:.0f})"
            )
        return None

    def _restart(self, stage: str, query: Supervised, why: str) -> None:
        # Step 2
        now = self.clock()
        recent = self.restarts.setdefault(stage, deque())
        while recent and now - recent[0] > WINDOW_S:
            recent.popleft()
        if len(recent) >= RESTARTS:
            # Step 3
            raise ServiceFailed(
                f"stage {stage} of {self.app!r}: {why}, and its query was restarted "
                f"{len(recent)} times in {WINDOW_S / 60:.0f} min: stopping the driver"
            )
        recent.append(now)
        self.restarted += 1
        _log.warning(
            "stage %s of %r: %s: restarting its query (%d of %d in %.0f min)",
            stage,
            self.app,
            why,
            len(recent),
            RESTARTS,
            WINDOW_S / 60,
        )
        query.restart(self.spark)
        _log.info("stage %s of %r: query restarted", stage, self.app)


def _first_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else text)[:limit]
