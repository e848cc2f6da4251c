"""Window ticks: the driver wakes an aggregate stage whose min time completed a window.

Spark runs a micro-batch only when its input topic has new records, but an aggregate
emits a window when the min time of its segment passes the window's end, which may
happen while no item arrives. Every ``interval_ms``:

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

from framework.kafka.clients import close_quietly
from framework.wire.frames import FRAME_HEADERS, tick_frame

__all__ = ["Due", "WindowTicks"]

_log = logging.getLogger(__name__)


class Due(Protocol):
    """An aggregate stage as the ticks see it."""

    @property
    def topic(self) -> str:
        """The stage's input (shuffle) topic."""
        ...

    def min_slot(self) -> int:
        """The min time of the stage's segment."""
        ...

    def ticks_due(self, min_slot: int, now: float, retry_s: float) -> list[int]:
        """Partitions to tick now; marks them outstanding."""
        ...


class WindowTicks:
    """A daemon thread sending ticks to the aggregate stages of one run."""

    def __init__(
        self,
        bootstrap: str,
        stages: Sequence[Due],
        *,
        interval_ms: int,
        retry_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stages = list(stages)
        self.interval_s = interval_ms / 1000
        self.retry_s = retry_s
        self.clock = clock
        self.sent = 0
        self.error: str | None = None
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "log_level": 3}
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="window-ticks", daemon=True)

    def start(self) -> None:
        """Start the thread (nothing to do without aggregate stages)."""
        if self.stages:
            self._thread.start()

    def round(self) -> int:
        """Steps 1-2 once; the number of ticks sent."""
        sent = 0
        for stage in self.stages:
            # Step 1
            min_slot = stage.min_slot()
            # Step 2
            for partition in stage.ticks_due(min_slot, self.clock(), self.retry_s):
                self._producer.produce(
                    stage.topic,
                    value=tick_frame(),
                    partition=partition,
                    headers=list(FRAME_HEADERS),
                )
                sent += 1
        if sent:
            self._producer.flush(10)
        self.sent += sent
        return sent

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(self.interval_s):
            try:
                self.round()
                failures = 0
            except Exception as exc:  # a broker hiccup: the next round sends again
                failures += 1
                _log.warning("window ticks: %s", exc)
                if failures * self.interval_s > 120:
                    self.error = str(exc)
                    return

    def stop(self) -> None:
        """Stop the thread, flush what it sent and close the producer."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self._producer.flush(5)
        close_quietly(self._producer)
