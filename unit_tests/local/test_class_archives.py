"""Class-data archives (`framework.local.class_archives`): named by what a JVM needs,
used only when complete, published only after the JVM that wrote them exited."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.local.class_archives import archive_path, dump_flags, publish, use_flags
from framework.local.tools import java_executable


def test_an_archive_is_named_by_its_inputs(tmp_path: Path) -> None:
    one = archive_path(tmp_path, "spark-driver", ["4.2.0", "/jars/a.jar"])
    assert one == archive_path(tmp_path, "spark-driver", ["4.2.0", "/jars/a.jar"])
    assert one.parent == tmp_path / "jvm" and one.name.startswith("spark-driver-")
    assert one != archive_path(tmp_path, "spark-driver", ["4.2.0", "/jars/b.jar"])
    assert one != archive_path(tmp_path, "kafka", ["4.2.0", "/jars/a.jar"])


def test_a_missing_archive_adds_no_flag_and_a_present_one_is_mapped(tmp_path: Path) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    assert use_flags(archive) == []
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"classes")
    flags = use_flags(archive)
    assert f"-XX:SharedArchiveFile={archive}" in flags
    assert "-Xshare:auto" in flags  # a mismatching archive falls back, never fails a start


def test_a_dump_goes_to_a_temporary_name(tmp_path: Path) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    flags, partial = dump_flags(archive)
    assert f"-XX:ArchiveClassesAtExit={partial}" in flags
    assert partial != archive and partial.parent == archive.parent


def _java_writing(partial: Path, classpath: str) -> subprocess.Popen[bytes]:
    """A real JVM that writes a (small) class archive to ``partial`` as it exits."""
    flags, _ = dump_flags(partial)  # the quiet flags; the path is given explicitly below
    quiet = [f for f in flags if f.startswith("-Xlog")]
    cmd = [java_executable(), f"-XX:ArchiveClassesAtExit={partial}", *quiet]
    return subprocess.Popen([*cmd, "-cp", classpath, "-version"], stderr=subprocess.DEVNULL)


def test_an_archive_takes_its_name_once_its_jvm_exited_and_a_jvm_maps_it(
    tmp_path: Path,
) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    _, partial = dump_flags(archive)
    writer = _java_writing(partial, str(tmp_path))
    assert publish(partial, archive, writer.pid, str(tmp_path), timeout_s=60)
    assert writer.wait() == 0
    assert archive.stat().st_size > 0 and not partial.exists()
    assert use_flags(archive)


def test_a_truncated_archive_is_never_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A JVM mapping a truncated archive dies of SIGBUS, -Xshare:auto or not; its crash
    # report is not left behind (it went into the working directory: the repository).
    monkeypatch.chdir(tmp_path)
    archive = archive_path(tmp_path, "r", ["x"])
    _, partial = dump_flags(archive)
    writer = _java_writing(partial, str(tmp_path))
    assert writer.wait() == 0
    whole = partial.read_bytes()
    partial.chmod(0o644)
    partial.write_bytes(whole[: len(whole) // 2])
    assert not publish(partial, archive, writer.pid, str(tmp_path), timeout_s=60)
    assert not archive.exists() and not partial.exists()
    assert not [p.name for p in tmp_path.rglob("*") if "hs_err" in p.name or "crash" in p.name]


def test_nothing_is_published_when_the_writer_wrote_nothing(tmp_path: Path) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    _, partial = dump_flags(archive)
    gone = 2**22 + 7  # above Linux's largest pid: a writer that has exited
    assert not publish(partial, archive, gone, str(tmp_path), timeout_s=5)
    assert not archive.exists()


def test_nothing_is_published_when_the_writer_does_not_exit_in_time(tmp_path: Path) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    _, partial = dump_flags(archive)
    partial.write_bytes(b"half")
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not publish(partial, archive, writer.pid, str(tmp_path), timeout_s=0.5)
    finally:
        writer.kill()
        writer.wait()
    assert not archive.exists() and not partial.exists()


def test_only_the_newest_archives_of_a_role_are_kept(tmp_path: Path) -> None:
    olds = [archive_path(tmp_path, "r", [str(n)]) for n in range(4)]
    other = archive_path(tmp_path, "other", ["0"])
    for n, old in enumerate([*olds, other]):
        old.parent.mkdir(parents=True, exist_ok=True)
        old.write_bytes(b"classes")
        os.utime(old, (1_000 + n, 1_000 + n))
    archive = archive_path(tmp_path, "r", ["new"])
    _, partial = dump_flags(archive)
    writer = _java_writing(partial, str(tmp_path))
    assert publish(partial, archive, writer.pid, str(tmp_path), timeout_s=60)
    writer.wait()
    assert sorted(p for p in olds if p.exists()) == sorted(olds[2:])
    assert archive.exists() and other.exists()


def test_a_jar_changed_or_installed_again_names_another_archive(tmp_path: Path) -> None:
    # A JVM refuses an archive whose jars changed since: a virtualenv installed again at
    # the same path has the same jars with new times, and must not look for the old one.
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"a")
    before = archive_path(tmp_path, "r", [f"{jars}/*"])
    assert archive_path(tmp_path, "r", [f"{jars}/*"]) == before
    assert archive_path(tmp_path, "r", [str(jars)]) == before  # the directory names its jars
    os.utime(jars / "a.jar", (2_000_000, 2_000_000))
    touched = archive_path(tmp_path, "r", [f"{jars}/*"])
    assert touched != before
    assert archive_path(tmp_path, "r", [f"/x.jar:{jars / 'a.jar'}"]) != archive_path(
        tmp_path, "r", [f"/x.jar:{jars / 'b.jar'}"]
    )
    (jars / "b.jar").write_bytes(b"b")
    assert archive_path(tmp_path, "r", [f"{jars}/*"]) != touched
