"""Delivery modes of the in-process harness: in which order things happen.

Every mode keeps what the real system guarantees (a front ingests its partition in offset
order, acks precede the heartbeat that passes them, an operation acks its outputs before
the receipt of its input) and varies what it does not: which front goes next, which item
in flight is processed next, and when notifications and heartbeats arrive.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InOrder:
    """Ingest in global-time order and process each record to completion (the oracle)."""


@dataclass(frozen=True, slots=True)
class Shuffled:
    """Seeded random choice at every step among all enabled ingests, items, heartbeats."""

    seed: int = 0


@dataclass(frozen=True, slots=True)
class Late:
    """The last ``fronts`` partitions are ingested only after all others were processed.

    Their items arrive after later items of other fronts: groupings must repair, and the
    barrier must wait (those fronts have not heartbeated). With ``seed`` the rest is
    `Shuffled`, else `InOrder`.
    """

    fronts: int = 1
    seed: int | None = None


Delivery = InOrder | Shuffled | Late
