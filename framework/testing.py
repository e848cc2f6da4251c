"""The in-process harness: run any pipeline with the real acker and barrier, no cluster.

result = pipeline.run(InProcessRunner(Shuffled(seed=3)))
assert result.values() == pipeline_sink.values
"""

from __future__ import annotations

from framework.runners.inprocess.delivery import Delivery, InOrder, Late, Shuffled
from framework.runners.inprocess.endpoints import ListSink, ListSource, SourceRecord
from framework.runners.inprocess.runner import DeadLetter, InProcessRunner, RunResult, run_local

__all__ = [
    "DeadLetter",
    "Delivery",
    "InOrder",
    "InProcessRunner",
    "Late",
    "ListSink",
    "ListSource",
    "RunResult",
    "Shuffled",
    "SourceRecord",
    "run_local",
]
