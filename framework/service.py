"""A service loop: run by a thread (`start` / `stop`, a ``with`` block) or by the caller."""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from typing import Self

from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import DeadlineExceeded, FlamepipeError, PipelineError, ServiceFailed


class Service(ABC):
    """A loop run by a thread (`start` / `stop`, a context manager) or by the caller.

    The loop opens its resources (`_open`), repeats `_step` until stopped, and always
    closes them (`_close`). A failure stops the loop; `stop`, `check` and `run_forever`
    raise it as a flamepipe error.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: FlamepipeError | None = None

    @property
    def error(self) -> FlamepipeError | None:
        """Why the loop stopped, if it failed."""
        return self._error

    @property
    def running(self) -> bool:
        """Whether the loop thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Self:
        """Run the loop in a daemon thread; returns self."""
        if self._thread is not None:
            raise PipelineError(f"{self.name} was started already")
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until the loop has opened its resources; raise if it failed or timed out."""
        if not self._ready.wait(timeout):
            raise DeadlineExceeded(f"{self.name} did not get ready in {timeout} s")
        self.check()

    def stop(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Stop the loop and wait for it; raise its failure if it had one."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise DeadlineExceeded(f"{self.name} did not stop within {timeout} s")
        self.check()

    def stop_quietly(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """`stop`, for cleanup after another failure: this loop's own error is dropped."""
        with contextlib.suppress(FlamepipeError):
            self.stop(timeout)

    def check(self) -> None:
        """Raise the loop's failure, if any."""
        if self._error is not None:
            raise self._error

    def run_forever(self) -> None:
        """Run the loop in this thread until `stop` (or Ctrl-C); raise its failure."""
        with contextlib.suppress(KeyboardInterrupt):
            self._main()
        self.check()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, _kind: object, exc: BaseException | None, _tb: object) -> None:
        if exc is None:
            self.stop()
        else:  # the block's own exception matters more than ours
            with contextlib.suppress(FlamepipeError):
                self.stop()

    @property
    def stopping(self) -> bool:
        """Whether `stop` was asked for."""
        return self._stopping.is_set()

    def _main(self) -> None:
        try:
            self._open()
            self._ready.set()
            while not self._stopping.is_set():
                self._step()
        except FlamepipeError as exc:
            self._error = exc
        except Exception as exc:  # a loop must report, not die silently
            self._error = ServiceFailed(f"{self.name} failed: {type(exc).__name__}: {exc}")
            self._error.__cause__ = exc
        finally:
            self._ready.set()
            self._close()

    @abstractmethod
    def _open(self) -> None:
        """Open clients and restore state (runs in the loop's thread)."""

    @abstractmethod
    def _step(self) -> None:
        """One round of the loop; must return within a fraction of a second."""

    @abstractmethod
    def _close(self) -> None:
        """Release everything `_open` took, also after a failure."""
