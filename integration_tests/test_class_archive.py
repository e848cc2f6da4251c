"""The Spark driver's class-data archive: built once, then mapped by every session's JVM."""

from __future__ import annotations

import subprocess
import sys

from framework.config import Settings
from framework.runners.spark.class_archive import build_driver_archive
from framework.runners.spark.session import driver_class_archive

_PROBE = """
import sys
from framework.config import Settings
from framework.runners.spark import spark_session
settings = Settings.load().with_(spark_master="local[1]")
spark = spark_session(settings, "class-archive-probe")
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
maps = open(f"/proc/{pid}/maps").read()
spark.stop()
sys.stdout.write("mapped" if sys.argv[1] in maps else "not mapped")
"""


def test_a_built_archive_is_mapped_by_the_next_sessions_jvm() -> None:
    archive = build_driver_archive(Settings.load())  # bootstrap built it already, or now
    assert archive is not None, "the class archive could not be built (see the log)"
    assert archive == driver_class_archive(Settings.load()) and archive.is_file()

    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(archive)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # Mapped, not merely named on the command line: -Xshare:auto would run without it.
    assert done.stdout == "mapped"
