"""Class-data archives: a JVM flamepipe starts maps the classes a previous start loaded.

Most of a JVM's start is loading, verifying and linking classes: Spark's driver loads
about 9 000 of them before its first job. Java's Class Data Sharing keeps them, parsed and
verified, in an archive file that later JVMs map (``-XX:SharedArchiveFile``). Measured on
2 cores: a local SparkSession up and through its first job in 8.6-9.5 s (9.5-10.6 CPU-s of
its JVM) without an archive, 4.9-5.2 s (5.6-5.8 CPU-s) with one.

Protocol:

1. An archive is named by the digest of what decides whether a JVM can use it (the java
   binary, the class path with each jar's size and modification time, what the caller
   adds), under ``<cache>/jvm``; a JVM started the same way next time finds it. The times
   matter: a JVM refuses an archive whose jars changed since, and a virtualenv installed
   again at the same path has the same jars with new times.
2. A JVM uses an archive only once it is whole: `dump_flags` makes the JVM write it at
   exit under a temporary name (``-XX:ArchiveClassesAtExit``), and `publish` renames it
   once that JVM has exited and a JVM on the same class path mapped it with every
   region's checksum verified (``-Xshare:on -XX:+VerifySharedSpaces``). That check is not
   optional: a truncated archive (its writer killed mid-write) crashes every JVM that maps
   it with SIGBUS, ``-Xshare:auto`` or not (measured). With ``-Xshare:auto`` a JVM whose
   whole archive does not match (another JDK build, another class path) runs without it,
   as it would with none.
3. A JVM whose archive is missing starts without one and writes none: archives are built
   deliberately (``make bootstrap``; `framework.runners.spark.class_archive` for the Spark
   driver), never by the runs whose start they would slow down.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from framework.errors import StackError
from framework.local.tools import java_executable

_log = logging.getLogger(__name__)

# The archive's own messages (a signed jar's classes skipped, a mismatch) go to the JVM's
# stdout by default, which is the terminal of whoever started it.
_KEPT = 3
_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def _java_identity() -> str:
    """The java binary as a file: another JDK, or the same one upgraded, is another name."""
    try:
        java = Path(java_executable()).resolve()
        st = java.stat()
    except (StackError, OSError):
        return "no java"  # the JVM's start fails on it, not this name
    return f"{java}:{st.st_size}:{st.st_mtime_ns}"


def _file(path: Path) -> str:
    st = path.stat()
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def _identity(entry: str) -> list[str]:
    """What ``entry`` names as the JVM sees it: a class path (``:``-separated) is its jars
    and directories, ``dir/*`` or a directory the jars in it, a file its size and time;
    anything else (a version) itself."""
    out: list[str] = []
    for part in entry.split(":"):
        path = Path(part.removesuffix("/*"))
        try:
            if path.is_dir():
                out += [_file(j) for j in sorted(path.glob("*.jar"))] or [str(path)]
            elif path.is_file():
                out.append(_file(path))
            else:
                out.append(part)
        except OSError:
            out.append(part)
    return out


def archive_path(cache_dir: Path, role: str, inputs: Sequence[str]) -> Path:
    """Step 1: where the archive of JVMs of ``role`` started with ``inputs`` (class paths,
    jars, their directories, versions) lives."""
    names = [_java_identity()] + [n for entry in inputs for n in _identity(entry)]
    digest = hashlib.sha256("\0".join(names).encode()).hexdigest()
    return cache_dir / "jvm" / f"{role}-{digest[:16]}.jsa"


def use_flags(archive: Path) -> list[str]:
    """The JVM flags that map ``archive``; none while it does not exist (step 3)."""
    if not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", *_QUIET]


def partial_path(archive: Path) -> Path:
    """The temporary file this process's `dump_flags` make a JVM write ``archive`` to."""
    return archive.with_name(f".{archive.name}.{os.getpid()}")


def dump_flags(archive: Path) -> tuple[list[str], Path]:
    """Step 2: flags that make a JVM write ``archive``'s classes at its exit, and the
    temporary file they go to (`publish` it once the JVM has exited)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(archive)
    partial.unlink(missing_ok=True)
    return [f"-XX:ArchiveClassesAtExit={partial}", *_QUIET], partial


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _maps(partial: Path, classpath: str) -> str | None:
    """None if a JVM on ``classpath`` maps ``partial`` with every checksum right, else why
    not."""
    # A corrupt archive can crash the checking JVM (SIGBUS in its checksum): its crash
    # report goes beside the archive and is deleted, not into the caller's directory.
    crash = partial.with_name(f"{partial.name}.crash.log")
    cmd = [java_executable(), f"-XX:SharedArchiveFile={partial}", "-Xshare:on"]
    cmd += [f"-XX:ErrorFile={crash}", "-XX:+VerifySharedSpaces", "-cp", classpath, "-version"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired, StackError) as exc:
        return str(exc)
    finally:
        crash.unlink(missing_ok=True)
    if done.returncode == 0:
        return None
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip("# ")]
    return f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"


def publish(
    partial: Path, archive: Path, jvm_pid: int, classpath: str, timeout_s: float = 120.0
) -> bool:
    """Step 2: wait for the JVM ``jvm_pid`` (class path ``classpath``) to exit, check what
    it wrote, then rename it to ``archive``; False (and nothing renamed) if it did not exit
    in time, wrote nothing, or wrote what a JVM cannot map."""
    deadline = time.monotonic() + timeout_s
    while _alive(jvm_pid):
        if time.monotonic() > deadline:
            _log.warning("JVM %d did not exit in %.0f s: no class archive", jvm_pid, timeout_s)
            partial.unlink(missing_ok=True)
            return False
        time.sleep(0.1)
    if not partial.is_file() or partial.stat().st_size == 0:
        _log.warning("JVM %d wrote no class archive at %s", jvm_pid, partial)
        return False
    broken = _maps(partial, classpath)
    if broken is not None:
        _log.warning("the class archive JVM %d wrote is not usable (%s)", jvm_pid, broken)
        partial.unlink(missing_ok=True)
        return False
    os.replace(partial, archive)
    _log.info("class archive %s (%.0f MB)", archive, archive.stat().st_size / 1e6)
    _prune(archive)
    return True


def _prune(archive: Path) -> None:
    """Keep the `_KEPT` newest archives of ``archive``'s role: each is ~170 MB, and a new
    JDK, pyspark or jar set names a new one. A JVM that mapped a removed one keeps its
    mapping; one that starts with its name runs without it (``-Xshare:auto``)."""
    role = archive.name.rsplit("-", 1)[0]
    mine = sorted(archive.parent.glob(f"{role}-*.jsa"), key=lambda p: p.stat().st_mtime)
    for old in mine[:-_KEPT]:
        if old != archive:
            old.unlink(missing_ok=True)
