"""Building a Spark JVM's class archive (`framework.runners.spark.class_archive`), its
steps with a fake child session: a built archive is used as it is (step 1), a session
that fails or hangs leaves nothing behind (step 2), and what the child's JVM wrote is
published under the archive's name (step 3). The real JVMs: integration_tests/
test_class_archive.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from framework.config import Settings
from framework.runners.spark import class_archive


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "jvm" / "spark-driver-0123.jsa"
    monkeypatch.setattr(class_archive, "driver_class_archive", lambda _settings: path)
    return path


def _session(monkeypatch: pytest.MonkeyPatch, **answer: Any) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "raise_" in answer:
            raise answer["raise_"]
        return subprocess.CompletedProcess(argv, answer["code"], answer["out"], answer["err"])

    monkeypatch.setattr(class_archive.subprocess, "run", run)
    return calls


def test_step_1_an_archive_already_built_is_used_without_a_session(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"classes")
    calls = _session(monkeypatch, code=0, out="", err="")
    assert class_archive.build_driver_archive(Settings(cache_dir=tmp_path)) == archive
    assert calls == []


@pytest.mark.parametrize(
    "answer",
    [
        {"code": 1, "out": "", "err": "Exception in thread main\nboom"},
        {"code": 0, "out": "nothing useful\n", "err": ""},
        {"raise_": subprocess.TimeoutExpired(["python"], 1.0)},
    ],
    ids=["failed", "no pid line", "hung"],
)
def test_step_2_a_session_that_fails_or_hangs_leaves_no_archive_and_no_partial(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any]
) -> None:
    calls = _session(monkeypatch, **answer)
    published: list[object] = []
    monkeypatch.setattr(class_archive, "publish", lambda *a, **k: published.append(a) or True)
    assert class_archive.build_driver_archive(Settings(cache_dir=tmp_path), timeout_s=1) is None
    [argv] = calls
    assert argv[1:5] == ["-m", "framework.runners.spark.class_archive", "--child", "driver"]
    assert any(flag.startswith("-XX:ArchiveClassesAtExit=") for flag in argv)
    assert published == []
    assert not archive.exists()
    assert not class_archive.partial_path(archive).exists()


def test_step_3_what_the_childs_jvm_wrote_is_published_as_the_archive(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = class_archive.partial_path(archive)
    _session(monkeypatch, code=0, out=f"spark up\njvm-pid\t4242\t{written}\t/cp/a:/cp/b\n", err="")
    published: list[tuple[Any, ...]] = []

    def publish(partial: Path, target: Path, pid: int, classpath: str, timeout_s: float) -> bool:
        published.append((partial, target, pid, classpath))
        return True

    monkeypatch.setattr(class_archive, "publish", publish)
    assert class_archive.build_driver_archive(Settings(cache_dir=tmp_path)) == archive
    assert published == [(written, archive, 4242, "/cp/a:/cp/b")]
    monkeypatch.setattr(class_archive, "publish", lambda *a, **k: False)
    assert class_archive.build_driver_archive(Settings(cache_dir=tmp_path)) is None
