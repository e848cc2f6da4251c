"""Adapter: running flamepipe pipelines on Apache Spark (PySpark).

The names load on first use: a Python worker imports this package for its stage tasks
(`framework.runners.spark.tasks`), and the driver's side (the runner, the live page's
server, the services) is 0.4 s of imports it never uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.runners.spark.runner import PipelineRun, SparkRunner
    from framework.runners.spark.session import spark_session

__all__ = ["PipelineRun", "SparkRunner", "spark_session"]

_HOMES = {
    "PipelineRun": "framework.runners.spark.runner",
    "SparkRunner": "framework.runners.spark.runner",
    "spark_session": "framework.runners.spark.session",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
