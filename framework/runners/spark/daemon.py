"""The Python daemon Spark forks its workers from, with flamepipe's task modules imported.

Spark starts one daemon per executor (``spark.python.daemon.module``; pyspark's own is
``pyspark.daemon``) and forks a Python worker from it for every task that needs one. A
worker forked from pyspark's daemon imports flamepipe, Arrow and the Kafka client while
it unpickles its first task; forked from this one it finds them imported. Measured on
the cluster tier (a continuous stage's task, two 4-slot workers, nothing else running):
the task began 1.4-1.6 s after its worker's fork with pyspark's daemon (see the
"began ... after its Python worker started" lines of the worker logs).

Spark puts ``pyspark.zip`` and py4j's zip first on the daemon's path. A pip-installed
pyspark carries those zips inside its own package directory, next to the same modules
installed with their compiled bytecode; zipimport compiles every module from source (twice:
once to name its file, once to run it), in every daemon and every forked worker. Measured:
``import pyspark.worker`` took 1.0-1.3 CPU-s from the zips, 0.2 s installed, and in a
continuous word count's profile zipimport was about a sixth of the Python workers' samples.
So when the zips are the installed package's own, the daemon takes them off its path
(same code, compiled once), and it imports ``pyspark.worker`` before forking, which every
worker would otherwise import after its fork.

Nothing imported here starts a thread or opens a connection, so forking after it is
safe; the daemon writes its port to stdout, so nothing here may print. A module that
fails to import is left to the worker, which fails on it as it would without this daemon.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import sys
from pathlib import Path

_PRELOADED = (
    # pyarrow imports pandas on its first array made from Python objects (a batch
    # operator's input): 0.46 CPU-s in every task's fresh worker, 1.6 s under load.
    "pandas",
    "framework.runners.spark.tasks",
    "framework.runners.spark.fused_tasks",
    "framework.runners.spark.continuous_tasks",
    "framework.runners.spark.warmup",
    "pyspark.worker",
)


def without_installed_zips(path: list[str]) -> list[str]:
    """``path`` without the zips of the installed pyspark's own ``python/lib`` when pyspark
    and py4j are both installed, else with those zips moved to its end; a cluster's
    SPARK_HOME zips, which may differ from what is installed, stay where they are.

    Dropped rather than kept last: every task's worker calls
    ``importlib.invalidate_caches()`` (``pyspark.worker_util.setup_spark_files``), which
    reads each zip's directory again (pyspark.zip: ~1 000 entries).
    """
    plain = [p for p in path if not p.endswith(".zip")]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", plain)
    if spec is None or spec.origin is None:
        return path
    own = Path(spec.origin).resolve().parent / "python" / "lib"
    zips = [p for p in path if p.endswith(".zip") and Path(p).resolve().parent == own]
    rest = [p for p in path if p not in zips]
    if importlib.machinery.PathFinder.find_spec("py4j", plain) is not None:
        return rest
    return rest + zips


def _preload() -> None:
    for name in _PRELOADED:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


if __name__ == "__main__":
    if "pyspark" not in sys.modules:
        sys.path[:] = without_installed_zips(sys.path)
        for entry in [p for p in sys.path_importer_cache if p.endswith(".zip")]:
            if entry not in sys.path:
                del sys.path_importer_cache[entry]
    _preload()
    from pyspark.daemon import manager

    manager()
