"""Long-running services of a pipeline: the acker, the min-time view and the barriers.

Each runs as a thread (`start` / `stop`, or a ``with`` block) or in the caller's thread
(`run_forever`); see docs/runtime.md and docs/decisions/barrier-positions.md.
"""

from __future__ import annotations

from framework.services.acker import AckerService
from framework.services.barrier import BarrierService
from framework.services.common import acks_topic_spec, mintime_topic_spec
from framework.services.mintime import MinTimeView

__all__ = [
    "AckerService",
    "BarrierService",
    "MinTimeView",
    "acks_topic_spec",
    "mintime_topic_spec",
]
