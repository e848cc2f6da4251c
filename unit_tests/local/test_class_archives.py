"""Class-data archives (`framework.local.class_archives`): named by what a JVM needs,
used only when complete, published only after the JVM that wrote them exited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from framework.local.class_archives import archive_path, dump_flags, publish, use_flags


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


def test_publish_waits_for_the_writer_to_exit_before_the_archive_takes_its_name(
    tmp_path: Path,
) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    _, partial = dump_flags(archive)
    # A stand-in for the JVM: writes its archive as it exits, after a while.
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import time, pathlib; time.sleep(1); pathlib.Path({str(partial)!r})"
            ".write_bytes(b'classes')",
        ]
    )
    assert not archive.exists()
    published = publish(partial, archive, writer.pid, timeout_s=30)
    writer.wait()
    assert published and archive.read_bytes() == b"classes" and not partial.exists()


def test_nothing_is_published_when_the_writer_wrote_nothing(tmp_path: Path) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    _, partial = dump_flags(archive)
    gone = 2**22 + 7  # above Linux's largest pid: a writer that has exited
    assert not publish(partial, archive, gone, timeout_s=5)
    assert not archive.exists()


def test_nothing_is_published_when_the_writer_does_not_exit_in_time(tmp_path: Path) -> None:
    archive = archive_path(tmp_path, "r", ["x"])
    _, partial = dump_flags(archive)
    partial.write_bytes(b"half")
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not publish(partial, archive, writer.pid, timeout_s=0.5)
    finally:
        writer.kill()
        writer.wait()
    assert not archive.exists() and not partial.exists()


def test_only_the_newest_archives_of_a_role_are_kept(tmp_path: Path) -> None:
    import os

    olds = [archive_path(tmp_path, "r", [str(n)]) for n in range(4)]
    other = archive_path(tmp_path, "other", ["0"])
    for n, old in enumerate([*olds, other]):
        old.parent.mkdir(parents=True, exist_ok=True)
        old.write_bytes(b"classes")
        os.utime(old, (1_000 + n, 1_000 + n))
    archive = archive_path(tmp_path, "r", ["new"])
    _, partial = dump_flags(archive)
    partial.write_bytes(b"classes")
    assert publish(partial, archive, 2**22 + 7, timeout_s=5)
    assert sorted(p for p in olds if p.exists()) == sorted(olds[2:])
    assert archive.exists() and other.exists()
