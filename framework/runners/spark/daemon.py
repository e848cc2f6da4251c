"""The Python daemon Spark forks its workers from, with flamepipe's task modules imported.

Spark starts one daemon per executor (``spark.python.daemon.module``; pyspark's own is
``pyspark.daemon``) and forks a Python worker from it for every task that needs one. A
worker forked from pyspark's daemon imports flamepipe, Arrow and the Kafka client while
it unpickles its first task; forked from this one it finds them imported. Measured on
the cluster tier (a continuous stage's task, two 4-slot workers, nothing else running):
the task began 1.4-1.6 s after its worker's fork with pyspark's daemon (see the
"began ... after its Python worker started" lines of the worker logs).

Nothing imported here starts a thread or opens a connection, so forking after it is
safe; the daemon writes its port to stdout, so nothing here may print. A module that
fails to import is left to the worker, which fails on it as it would without this daemon.
"""

from __future__ import annotations

import contextlib
import importlib

__all__: list[str] = []

_PRELOADED = (
    "framework.runners.spark.tasks",
    "framework.runners.spark.fused_tasks",
    "framework.runners.spark.continuous_tasks",
    "framework.runners.spark.warmup",
)


def _preload() -> None:
    for name in _PRELOADED:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


if __name__ == "__main__":
    _preload()
    from pyspark.daemon import manager

    manager()
