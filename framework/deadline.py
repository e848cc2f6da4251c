"""One way to bound a wait: a `Deadline` started now, checked as often as the wait loops.

Every wait in flamepipe that is not a single client call with its own timeout goes through
it, so a wait that runs out always raises `DeadlineExceeded` with what was awaited::

    deadline = Deadline(DEFAULT_TIMEOUT_S, f"reading {topic} to its end")
    while waiting:
        deadline.check()
        poll(deadline.remaining(0.1))
"""

from __future__ import annotations

import time

from framework.errors import DeadlineExceeded

DEFAULT_TIMEOUT_S = 30.0
"""How long a Kafka or ZooKeeper round trip of flamepipe's own may take before it fails.

Generous on purpose: a freshly created topic has no leader for a second or two, and a
broker under a compaction or a GC pause answers late; 30 s is what Kafka's own clients
allow a request (``request.timeout.ms``)."""


class Deadline:
    """``timeout_s`` from its creation (monotonic clock); ``what`` names the wait."""

    __slots__ = ("_end", "timeout_s", "what")

    def __init__(self, timeout_s: float, what: str = "waiting") -> None:
        self.timeout_s = timeout_s
        self.what = what
        self._end = time.monotonic() + timeout_s

    @property
    def expired(self) -> bool:
        """Whether the time is up."""
        return time.monotonic() >= self._end

    def remaining(self, most: float | None = None) -> float:
        """Seconds left (never below 0), at most ``most`` if given: one poll's wait."""
        left = max(0.0, self._end - time.monotonic())
        return left if most is None else min(left, most)

    def check(self) -> None:
        """`DeadlineExceeded` naming the wait, once the time is up."""
        if self.expired:
            raise DeadlineExceeded(f"{self.what}: not done within {self.timeout_s:g} s")
