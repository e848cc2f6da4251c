"""The Python daemon Spark forks workers from (`framework.runners.spark.daemon`)."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
from framework.runners.spark import daemon
daemon._preload()
missing = [m for m in daemon._PRELOADED if m not in sys.modules]
threads = __import__("threading").active_count()
sys.stderr.write(f"{missing} {threads}")
"""


def test_the_preload_imports_the_task_modules_silently_and_starts_no_thread() -> None:
    # The daemon tells Spark its port on stdout: a preload that printed would break it,
    # and a thread started before the fork would be missing in every worker.
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == ""
    assert done.stderr == "[] 1"
