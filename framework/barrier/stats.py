"""The barrier's counters and the timings its status line reports."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["BarrierStats"]


@dataclass
class BarrierStats:
    """Counters of one barrier run, and how long its recent writes took."""

    records_in: int = 0  # frames
    refused: int = 0  # records without a valid fp.mac: never decoded
    items_in: int = 0
    items_out: int = 0
    bundles: int = 0
    commits: int = 0
    # Exactly once: items written into a bundle transaction ahead of their release,
    # releases held until a later min time, bundle transactions aborted.
    ahead: int = 0
    holds: int = 0
    aborts: int = 0
    # Seconds from seeing a min time that releases a bundle to its write being done, and
    # of every write (bundle or not): the price of the write mode (transaction or not).
    release_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))
    write_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))

    def timings(self) -> str:
        """Recent release and write times, p50/p99 in ms, and what was written ahead (for
        status lines)."""
        text = f"release {_p50_p99(self.release_s)}, write {_p50_p99(self.write_s)}"
        if self.ahead or self.aborts:
            text += f", ahead {self.ahead} items (held {self.holds}, aborted {self.aborts})"
        return text


_RECENT = 1000


def _p50_p99(values: Iterable[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "-"
    # Nearest rank: p99 of 10 values is the largest.
    p50, p99 = ordered[(len(ordered) - 1) // 2], ordered[math.ceil(0.99 * len(ordered)) - 1]
    return f"p50 {p50 * 1000:.0f} ms / p99 {p99 * 1000:.0f} ms"
