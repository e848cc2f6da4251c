"""Window ticks: the driver wakes an aggregate stage whose min time completed a window.

Spark runs a micro-batch only when its input topic has new records, but an aggregate
emits a window when the min time of its segment passes the window's end, which may
happen while no item arrives. Whenever the min time grows (`poke`), and at the latest every
``interval_ms``:

1. Read the aggregate segment's min time ``m`` (the value the next batch will get).
2. For each partition of the stage's input topic whose earliest pending window end (from
   its last task's summary; unknown counts as 0) is at or below ``m`` and that has no tick
   outstanding for it, append a tick (`framework.wire.frames.tick_frame`) to it.
3. The tick's batch passes ``m`` or more to the task, which emits the window and reports
   its next pending end; that report clears the outstanding tick.

A tick carries nothing, so a duplicate or a late one costs one batch and changes nothing;
a tick not followed by a report within ``retry_s`` is sent again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from confluent_kafka import Producer

from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import ServiceFailed
from framework.kafka.clients import close_quietly, new_producer, produce_record
from framework.service import Service
from framework.wire.frames import FRAME_HEADERS, tick_frame
from framework.wire.records import OutRecord

_log = logging.getLogger(__name__)
_GIVE_UP_S = 120  # two minutes of failed rounds: the broker is not coming back soon


class Due(Protocol):
    """An aggregate stage as the ticks see it."""

    @property
    def topic(self) -> str:
        """The stage's input (shuffle) topic."""
        ...

    def min_time(self) -> int:
        """The min time of the stage's segment."""
        ...

    def ticks_due(self, min_time: int, now: float, retry_s: float) -> list[int]:
        """Partitions to tick now; marks them outstanding."""
        ...


class WindowTicks(Service):
    """A service sending ticks to the aggregate stages of one run; a failed round is tried
    again at the next, and only failures for two minutes stop it (`error`)."""

    def __init__(
        self,
        bootstrap: str,
        stages: Sequence[Due],
        *,
        interval_ms: int,
        retry_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("flamepipe-window-ticks")
        self.stages = list(stages)
        self.interval_s = interval_ms / 1000
        self.retry_s = retry_s
        self.clock = clock
        self.sent = 0
        self._failures = 0
        self._producer: Producer | None = new_producer(
            bootstrap, {"linger.ms": 0, "acks": "all", "log_level": 3}
        )
        self._wake = threading.Event()

    def poke(self, *_: object) -> None:
        """Run a round now: the min time grew (a `MinTimeView` subscriber). Polling alone
        left a completed window waiting up to ``interval_ms`` (25 ms on average at 50)."""
        self._wake.set()

    def round(self) -> int:
        """Steps 1-2 once; the number of ticks sent."""
        producer = self._producer
        if producer is None:
            raise ServiceFailed("window ticks are stopped")
        sent = 0
        for stage in self.stages:
            # Step 1
            min_time = stage.min_time()
            # Step 2
            for partition in stage.ticks_due(min_time, self.clock(), self.retry_s):
                tick = OutRecord(stage.topic, partition, None, tick_frame(), FRAME_HEADERS)
                produce_record(producer, tick)
                sent += 1
        if sent:
            producer.flush(10)
        self.sent += sent
        return sent

    def stop(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Stop, flush what was sent and close the producer; raise the failure that
        stopped the service, if any."""
        self._wake.set()
        if not self.running:
            self._close()
        super().stop(timeout)

    def _open(self) -> None:
        """Nothing to open: the producer exists from the start (`round` works unstarted)."""

    def _step(self) -> None:
        self._wake.wait(self.interval_s)
        self._wake.clear()
        if self._stopping.is_set():
            return
        try:
            self.round()
            self._failures = 0
        except Exception as exc:  # a broker hiccup: the next round sends again
            self._failures += 1
            _log.warning("window ticks: %s", exc)
            if self._failures * self.interval_s > _GIVE_UP_S:
                raise ServiceFailed(f"window ticks failed for {_GIVE_UP_S} s: {exc!r}") from exc

    def _close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(5)
            close_quietly(producer)
