"""SnapshotWriter: asynchronous, ordered, durable before done, failures surface."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from framework.errors import StateError
from framework.snapshots.backends.memory import MemoryBackend
from framework.snapshots.snapshot_writer import Saved, SnapshotWriter


def _const(data: bytes) -> Callable[[], bytes]:
    return lambda: data


class _FailingBackend(MemoryBackend):
    def put(self, unit: str, slot: int, data: bytes) -> None:
        if unit == "bad":
            raise StateError("disk full")
        super().put(unit, slot, data)


def test_done_means_durable_and_order_is_kept() -> None:
    backend = MemoryBackend()
    seen: list[tuple[str, bytes]] = []

    def on_done(future: Future[Saved]) -> None:
        saved = future.result()
        # The acceptance would be sent here: the bytes must already be stored.
        seen.append((threading.current_thread().name, backend.get(saved.unit, saved.slot)))

    with SnapshotWriter(backend) as writer:
        futures = [writer.submit("g.p0", s, _const(b"s%d" % s), on_done) for s in range(5)]
    assert [f.result() for f in futures] == [Saved("g.p0", s, 2) for s in range(5)]
    assert seen == [("flamepipe-snapshot-writer", b"s%d" % s) for s in range(5)]


def test_submit_returns_while_a_save_is_running() -> None:
    gate = threading.Event()
    writer = SnapshotWriter(MemoryBackend())

    def slow() -> bytes:
        gate.wait(10)
        return b"slow"

    first = writer.submit("u", 1, slow)
    start = time.monotonic()
    second = writer.submit("u", 2, lambda: b"fast")
    assert time.monotonic() - start < 0.5
    assert not first.done() and not second.done()
    gate.set()
    writer.close()
    assert first.result().size == 4 and second.result().slot == 2


def test_a_full_queue_pushes_back() -> None:
    gate = threading.Event()
    writer = SnapshotWriter(MemoryBackend(), capacity=1)
    writer.submit("u", 1, lambda: b"1" if gate.wait(10) else b"")  # running, blocked
    time.sleep(0.05)  # let the writer take it off the queue
    writer.submit("u", 2, lambda: b"2")  # fills the queue
    third_in = threading.Event()

    def third() -> None:
        writer.submit("u", 3, lambda: b"3")
        third_in.set()

    threading.Thread(target=third).start()
    assert not third_in.wait(0.3), "submit should wait while the queue is full"
    assert writer.pending == 1
    gate.set()
    assert third_in.wait(5)
    writer.close()
    assert writer.backend.latest("u") == (3, b"3")


def test_close_drains_everything_submitted() -> None:
    backend = MemoryBackend()
    writer = SnapshotWriter(backend, capacity=4)
    for slot in range(50):
        writer.submit(f"u{slot % 7}", slot, _const(bytes([slot])))
    writer.close()
    assert sum(len(backend.units(s)) for s in range(50)) == 50
    with pytest.raises(StateError, match="writer is closed"):
        writer.submit("u", 99, lambda: b"late")


def test_failed_saves_fail_their_future_and_close() -> None:
    backend = _FailingBackend()
    failures: list[BaseException | None] = []
    writer = SnapshotWriter(backend)
    bad = writer.submit("bad", 1, lambda: b"x", lambda f: failures.append(f.exception()))
    broken = writer.submit("u", 2, lambda: 1 // 0)  # type: ignore[arg-type, return-value]
    good = writer.submit("u", 3, lambda: b"ok")
    with pytest.raises(StateError, match=r"2 snapshot save\(s\) failed; first: 'bad' at slot 1"):
        writer.close()
    with pytest.raises(StateError, match="disk full"):
        bad.result()
    with pytest.raises(ZeroDivisionError):
        broken.result()
    assert good.result().slot == 3
    assert len(failures) == 1 and isinstance(failures[0], StateError)


def test_a_failing_callback_is_not_swallowed() -> None:
    writer = SnapshotWriter(MemoryBackend())

    def on_done(_: Future[Saved]) -> None:
        raise RuntimeError("accept could not be sent")

    future = writer.submit("u", 1, lambda: b"x", on_done)
    with pytest.raises(StateError, match="accept could not be sent"):
        writer.close()
    assert future.result().slot == 1


def test_bad_keys_fail_at_submit() -> None:
    with SnapshotWriter(MemoryBackend()) as writer:
        with pytest.raises(ValueError):
            writer.submit("", 1, lambda: b"x")
        with pytest.raises(ValueError):
            writer.submit("u", -5, lambda: b"x")
    with pytest.raises(ValueError):
        SnapshotWriter(MemoryBackend(), capacity=0)
