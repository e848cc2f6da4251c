"""Saving snapshots off the processing thread: FlameStream's snapshots are asynchronous.

The grouping that receives a snapshot request submits a function that serializes the
immutable part of its state and goes on processing; the writer thread calls it, puts the
bytes into the backend, and only then completes the future and calls ``on_done``. The
caller sends its acceptance to the acker from there: acceptance means durable.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from framework.errors import StateError
from framework.snapshots.backends.base import StateBackend, check_key


@dataclass(frozen=True, slots=True)
class Saved:
    """A snapshot that is durable in the backend."""

    unit: str
    slot: int
    size: int


@dataclass(frozen=True, slots=True)
class _Job:
    unit: str
    slot: int
    data_fn: Callable[[], bytes]
    future: Future[Saved]
    on_done: Callable[[Future[Saved]], None] | None


_STOP = None


class SnapshotWriter:
    """One background thread saving submitted snapshots in submission order.

    Failures are never swallowed: a failed save fails its future (and ``on_done`` sees
    it), and `close` raises `StateError` if any save or ``on_done`` callback failed.
    """

    def __init__(self, backend: StateBackend, capacity: int = 16) -> None:
        if capacity < 1:
            raise ValueError(f"capacity={capacity} must be >= 1")
        self.backend = backend
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=capacity)
        self._failures: list[tuple[str, int, BaseException]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(
            target=self._loop, name="flamepipe-snapshot-writer", daemon=True
        )
        self._thread.start()

    def submit(
        self,
        unit: str,
        slot: int,
        data_fn: Callable[[], bytes],
        on_done: Callable[[Future[Saved]], None] | None = None,
    ) -> Future[Saved]:
        """Queue the snapshot ``data_fn()`` of ``(unit, slot)``; return its future.

        Returns at once unless ``capacity`` saves are already waiting; then it waits for
        room (back-pressure instead of unbounded memory). ``on_done(future)`` runs on the
        writer thread after the save succeeded or failed; it must not block for long.
        """
        check_key(unit, slot)
        future: Future[Saved] = Future()
        with self._lock:
            if self._closed:
                raise StateError(f"snapshot writer is closed: cannot save {unit!r}@{slot}")
            self._queue.put(_Job(unit, slot, data_fn, future, on_done))
        return future

    @property
    def pending(self) -> int:
        """Saves submitted and not yet started (approximate, for metrics)."""
        return self._queue.qsize()

    def close(self, timeout: float | None = None) -> None:
        """Save everything submitted, stop the thread, and raise if any save failed."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise StateError(f"snapshot writer did not drain within {timeout}s")
        if self._failures:
            unit, slot, exc = self._failures[0]
            raise StateError(
                f"{len(self._failures)} snapshot save(s) failed; first: {unit!r} at slot "
                f"{slot}: {exc!r}"
            ) from exc

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _loop(self) -> None:
        while (job := self._queue.get()) is not _STOP:
            self._run(job)

    def _run(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            data = job.data_fn()
            self.backend.put(job.unit, job.slot, data)
        except Exception as exc:
            self._failures.append((job.unit, job.slot, exc))
            job.future.set_exception(exc)
        else:
            job.future.set_result(Saved(job.unit, job.slot, len(data)))
        if job.on_done is not None:
            # Called here, not via add_done_callback: Future logs and drops callback errors.
            try:
                job.on_done(job.future)
            except Exception as exc:
                self._failures.append((job.unit, job.slot, exc))
