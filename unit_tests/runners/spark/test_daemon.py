"""The Python daemon Spark forks workers from (`framework.runners.spark.daemon`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from framework.runners.spark.daemon import without_installed_zips

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


def _pyspark_lib() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "python" / "lib"


def test_the_installed_pysparks_own_zips_go_and_others_stay() -> None:
    # zipimport compiles every module from source in every worker; the installed package
    # holds the same modules compiled.
    own = sorted(str(p) for p in _pyspark_lib().glob("*.zip"))
    assert own, "pip's pyspark ships pyspark.zip and py4j's zip"
    site = str(_pyspark_lib().parents[2])
    other = "/opt/spark/python/lib/pyspark.zip"
    path = [*own, other, site, "/somewhere"]
    assert without_installed_zips(path) == [other, site, "/somewhere"]


def test_without_an_installed_pyspark_the_path_is_kept() -> None:
    own = [str(p) for p in _pyspark_lib().glob("*.zip")]
    path = [*own, "/nowhere"]
    assert without_installed_zips(path) == path


def test_the_daemons_workers_import_pyspark_installed_not_from_the_zips() -> None:
    own = os.pathsep.join(str(p) for p in _pyspark_lib().glob("*.zip"))
    probe = (
        "import sys, runpy\n"
        "from framework.runners.spark import daemon\n"
        "sys.path[:] = daemon.without_installed_zips(sys.path)\n"
        "daemon._preload()\n"
        "import pyspark\n"
        "sys.stderr.write(pyspark.__file__)\n"
    )
    env = {**os.environ, "PYTHONPATH": own}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert ".zip" not in done.stderr and done.stderr.endswith("__init__.py")
