"""One contract, three state backends: memory, files, RocksDB."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework.config import Settings
from framework.errors import ConfigError, SnapshotMissing, StateError
from framework.snapshots.backends.base import StateBackend
from framework.snapshots.backends.factory import open_backend
from framework.snapshots.backends.files import FileBackend
from framework.snapshots.backends.memory import MemoryBackend
from framework.snapshots.backends.rocks import RocksBackend
from unit_tests.snapshots.crash_writer import is_whole, open_kind

ROOT = Path(__file__).resolve().parents[3]
KINDS = ("memory", "file", "rocksdb")
# Names that would break a naive file layout or key encoding.
ODD_UNITS = ("a", "ab", "a/b", "..", ".hidden", "%2E", "ünï", "a\x01b", "count.p3")

Opener = Callable[[], StateBackend]


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the parametrized backend; reopening a persistent one sees the same data."""
    opened: list[StateBackend] = []
    memory = MemoryBackend()

    def open_() -> StateBackend:
        if request.param == "memory":
            return memory  # lives as long as the process: "reopening" is the same dict
        for old in opened:
            old.close()  # RocksDB allows one open handle per directory
        backend: StateBackend
        if request.param == "file":
            backend = FileBackend(tmp_path / "snaps")
        else:
            backend = RocksBackend(tmp_path / "rocks")
        opened.append(backend)
        return backend

    yield open_
    memory.close()
    for backend in opened:
        backend.close()


def test_round_trip_and_missing_keys(opener: Opener) -> None:
    backend = opener()
    backend.put("count.p0", 7, b"state at 7")
    backend.put("count.p0", 9, b"state at 9")
    assert backend.get("count.p0", 7) == b"state at 7"
    assert backend.get("count.p0", 9) == b"state at 9"
    backend.put("empty", 0, b"")
    assert backend.get("empty", 0) == b""
    with pytest.raises(SnapshotMissing, match=r"'count\.p0' at slot 8"):
        backend.get("count.p0", 8)
    with pytest.raises(SnapshotMissing):
        backend.get("other", 7)


def test_latest_at_or_below(opener: Opener) -> None:
    backend = opener()
    for slot in (10, 20, 30):
        backend.put("a", slot, f"a{slot}".encode())
    backend.put("ab", 25, b"ab25")  # a neighbour unit must never leak into "a"
    backend.put("a/b", 5, b"a/b5")
    assert backend.latest("a") == (30, b"a30")
    assert backend.latest("a", at_or_below=25) == (20, b"a20")
    assert backend.latest("a", at_or_below=20) == (20, b"a20")
    assert backend.latest("a", at_or_below=9) is None
    assert backend.latest("ab", at_or_below=24) is None
    assert backend.latest("a/b") == (5, b"a/b5")
    assert backend.latest("nobody") is None


def test_put_twice_is_idempotent(opener: Opener) -> None:
    backend = opener()
    backend.put("u", 3, b"same")
    backend.put("u", 3, b"same")
    assert backend.get("u", 3) == b"same"
    assert backend.units(3) == ["u"]
    backend.put("u", 3, b"replaced")  # the later write wins, whole
    assert backend.get("u", 3) == b"replaced"
    assert backend.drop_below(4) == 1


def test_drop_below_counts_and_keeps_the_rest(opener: Opener) -> None:
    backend = opener()
    for unit in ("x", "y"):
        for slot in (1, 2, 3, 4):
            backend.put(unit, slot, f"{unit}{slot}".encode())
    assert backend.drop_below(3) == 4
    assert backend.drop_below(3) == 0
    assert backend.latest("x", at_or_below=2) is None
    assert backend.latest("y") == (4, b"y4")
    assert backend.units(3) == ["x", "y"]
    assert backend.drop_below(100) == 4
    assert backend.latest("x") is None


def test_many_units_with_odd_names(opener: Opener) -> None:
    backend = opener()
    units = [*ODD_UNITS, *(f"grp.p{i}" for i in range(40))]
    for i, unit in enumerate(units):
        backend.put(unit, 100, unit.encode())
        if i % 2:
            backend.put(unit, 200, unit.encode() * 2)
    assert backend.units(100) == sorted(units)
    assert backend.units(200) == sorted(units[1::2])
    assert backend.units(150) == []
    for unit in units:
        assert backend.get(unit, 100) == unit.encode()


def test_snapshots_survive_reopening(opener: Opener) -> None:
    backend = opener()
    backend.put("u", 1, b"one")
    backend.put("..", 2, b"two")
    reopened = opener()
    assert reopened.get("u", 1) == b"one"
    assert reopened.latest("..") == (2, b"two")


class _TornBytes:
    """Data whose conversion fails midway through a put."""

    def __bytes__(self) -> bytes:
        raise OSError("disk pulled out mid-put")

    def __buffer__(self, flags: int) -> memoryview:
        raise OSError("disk pulled out mid-put")


def test_a_failed_put_leaves_the_old_state(opener: Opener, tmp_path: Path) -> None:
    backend = opener()
    backend.put("u", 5, b"old")
    with pytest.raises((OSError, StateError, TypeError)):
        backend.put("u", 5, _TornBytes())  # type: ignore[arg-type]
    assert backend.get("u", 5) == b"old"
    assert backend.units(5) == ["u"]
    assert not list(tmp_path.rglob("*.tmp"))


def test_bad_keys_are_refused(opener: Opener) -> None:
    backend = opener()
    for unit, slot in (("", 1), ("a\x00b", 1), ("u", -1), ("u", 2**63), ("u", True)):
        with pytest.raises(ValueError):
            backend.put(unit, slot, b"x")
    with pytest.raises(ValueError):
        backend.drop_below(-1)


def test_closed_backend_refuses_work(opener: Opener) -> None:
    backend = opener()
    backend.close()
    if isinstance(backend, FileBackend):
        return  # nothing to close: every call opens its own files
    with pytest.raises(StateError, match="closed"):
        backend.put("u", 1, b"x")


def test_file_temp_left_by_a_crash_is_ignored_then_cleaned(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path)
    backend.put("g.p1", 4, b"whole")
    unit_dir = tmp_path / "g.p1"
    stale = unit_dir / f".{4:020d}.{'0' * 32}.tmp"
    stale.write_bytes(b"half of a new snap")  # a put killed between steps 1 and 3
    fresh = unit_dir / f".{6:020d}.{'1' * 32}.tmp"
    fresh.write_bytes(b"another process is writing this one")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    assert backend.get("g.p1", 4) == b"whole"
    assert backend.latest("g.p1") == (4, b"whole")
    assert backend.units(6) == []
    reopened = FileBackend(tmp_path, stale_after_s=600)
    assert reopened.removed_temp == 1
    assert not stale.exists() and fresh.exists()
    assert sorted(p.name for p in unit_dir.iterdir()) == [fresh.name, f"{4:020d}.snap"]


def test_file_layout_is_documented_one(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path)
    backend.put("app.count.p2", 123, b"x")
    backend.put(".", 1, b"dot")
    assert (tmp_path / "app.count.p2" / "00000000000000000123.snap").read_bytes() == b"x"
    assert (tmp_path / "%2E" / "00000000000000000001.snap").read_bytes() == b"dot"


@pytest.mark.parametrize("kind", ["file", "rocksdb"])
def test_kill_9_mid_put_leaves_only_whole_snapshots(kind: str, tmp_path: Path) -> None:
    path = tmp_path / kind
    proc = subprocess.Popen(
        [sys.executable, "-m", "unit_tests.snapshots.crash_writer", kind, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)  # well inside the put loop
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    backend = open_kind(kind, path)
    try:
        seen = 0
        for slot in range(5):
            for unit in backend.units(slot):
                assert is_whole(backend.get(unit, slot)), f"torn snapshot {unit}@{slot}"
                seen += 1
        assert seen == 15  # 3 units x 5 slots, all written before "ready"
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("kind", "cls", "sub"),
    [
        ("memory", MemoryBackend, None),
        ("file", FileBackend, "files"),
        ("rocksdb", RocksBackend, "rocksdb"),
    ],
)
def test_open_backend_follows_the_settings(
    kind: str, cls: type, sub: str | None, tmp_path: Path
) -> None:
    settings = Settings(state_dir=tmp_path, state_backend=kind)
    backend = open_backend(settings)
    try:
        assert isinstance(backend, cls)
        backend.put("u", 1, b"x")
        if sub is not None:
            assert (tmp_path / "snapshots" / sub).exists()
    finally:
        backend.close()


def test_missing_rocksdict_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # import now raises ImportError
    settings = Settings(state_dir=tmp_path, state_backend="rocksdb")
    with pytest.raises(ConfigError, match=r"pip install 'flamepipe\[rocksdb\]'"):
        open_backend(settings)


def test_rocksdb_in_use_by_another_handle_is_a_state_error(tmp_path: Path) -> None:
    first = RocksBackend(tmp_path / "db")
    try:
        with pytest.raises(StateError, match="another process"):
            RocksBackend(tmp_path / "db")
    finally:
        first.close()
