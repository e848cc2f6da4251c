"""The barrier's counters and the timings its status line reports."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from framework.core.meta import Record


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
    # Min times that waited for the barrier to read what was committed before them; the
    # seconds of asking for the committed end, and from seeing a min time to being free
    # to apply it (the query plus any reading still to do).
    fence_waits: int = 0
    end_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))
    fence_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))
    # Seconds from seeing a min time that releases a bundle to its write being done, and
    # of every write (bundle or not): the price of the write mode (transaction or not).
    release_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))
    write_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))
    # Seconds from an item's append (the middle of its slot) to its bundle's commit: the
    # end-to-end latency as far as the barrier sees it (a reader adds its poll).
    latency_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))
    items_released: int = 0  # items in committed bundles (items_out also counts headers)

    def note_latencies(self, records: Sequence[Record], delta_ms: int) -> None:
        """Record the latency of a committed bundle's items (at most `_SAMPLES` of them,
        evenly spread: a bundle of 100 000 items must not cost 100 000 appends)."""
        now_ms = time.time() * 1000.0
        self.items_released += len(records)
        step = max(1, len(records) // _SAMPLES)
        half = delta_ms / 2
        append = self.latency_s.append
        for record in records[::step]:
            append(max(0.0, now_ms - record.meta.gt.slot * delta_ms - half) / 1000.0)

    def note_slot_latencies(self, slots: Sequence[tuple[int, int]], delta_ms: int) -> None:
        """`note_latencies` of a committed bundle given as (slot, item count) pairs."""
        now_ms = time.time() * 1000.0
        total = sum(count for _, count in slots)
        self.items_released += total
        step = max(1, total // _SAMPLES)
        half = delta_ms / 2
        append = self.latency_s.append
        seen = 0
        for slot, count in slots:
            # Items seen .. seen + count - 1 of the bundle; every `step`-th is sampled, as
            # note_latencies samples them: the multiples of `step` in that range.
            samples = _ceil_div(seen + count, step) - _ceil_div(seen, step)
            seen += count
            latency = max(0.0, now_ms - slot * delta_ms - half) / 1000.0
            for _ in range(samples):
                append(latency)

    def timings(self) -> str:
        """Recent release and write times, p50/p99 in ms, and what was written ahead (for
        status lines)."""
        text = f"release {_p50_p99(self.release_s)}, write {_p50_p99(self.write_s)}"
        if self.fence_s:
            text += f", fence {_p50_p99(self.fence_s)} (end query {_p50_p99(self.end_s)})"
        if self.ahead or self.aborts:
            text += f", ahead {self.ahead} items (held {self.holds}, aborted {self.aborts})"
        return text


_RECENT = 1000
_SAMPLES = 64


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def quantiles(values: Iterable[float]) -> tuple[float, float] | None:
    """``(p50, p99)`` of ``values`` by nearest rank (p99 of 10 values is the largest);
    None if there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[(len(ordered) - 1) // 2], ordered[math.ceil(0.99 * len(ordered)) - 1]


def _p50_p99(values: Iterable[float]) -> str:
    found = quantiles(values)
    if found is None:
        return "-"
    return f"p50 {found[0] * 1000:.0f} ms / p99 {found[1] * 1000:.0f} ms"
