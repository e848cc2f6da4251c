"""Running ``flamepipe acker`` / ``flamepipe barrier`` as real processes in tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from framework.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def service_env(settings: Settings, names: Mapping[str, str], **extra: str) -> dict[str, str]:
    """The environment of a service process: the test stack's endpoints and ``names``, and
    the pipeline's key (every process of a pipeline needs the same one)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FLAMEPIPE_") or k == "FLAMEPIPE_SECRET"
    }
    env.update(
        FLAMEPIPE_BOOTSTRAP_SERVERS=settings.kafka_bootstrap,
        FLAMEPIPE_ZOOKEEPER_CONNECT=settings.zookeeper,
        FLAMEPIPE_ACKER_SHARDS=str(settings.acker_shards),
        **names,
        **extra,
    )
    return env


def run_cli(settings: Settings, names: Mapping[str, str], tmp: Path, *args: str) -> str:
    """``flamepipe <args>`` in a process of its own against the test stack (its snapshot
    directory too), as a person would run it; its stdout, the command having succeeded."""
    env = service_env(
        settings,
        names,
        FLAMEPIPE_STATE_DIR=str(tmp / "cli"),
        FLAMEPIPE_SNAPSHOT_DIR=str(settings.snapshot_path),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "framework.cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class ServiceProcess:
    """One ``flamepipe <command> <spec>`` process with its log in ``log``."""

    def __init__(
        self, command: str, spec: str, env: Mapping[str, str], log: Path, *args: str
    ) -> None:
        self.log = log
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "framework.cli", command, spec, *args],
            cwd=ROOT,
            env=dict(env),
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 120) -> None:
        """Until the process says it is ready; `AssertionError` with its log if it dies."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "ready (epoch" in self.log.read_text(errors="replace"):
                return
            assert self.proc.poll() is None, f"died:\n{self.tail()}"
            time.sleep(0.1)
        raise AssertionError(f"not ready in {timeout_s} s:\n{self.tail()}")

    def wait_exit(self, timeout_s: float) -> int:
        """The exit code (``-9``: killed by SIGKILL)."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout_s} s:\n{self.tail()}") from None

    def kill(self) -> None:
        """kill -9."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not stop."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._out.close()

    @property
    def page_url(self) -> str:
        """The URL of the process's live page and metrics, as it logged it."""
        for line in self.log.read_text(errors="replace").splitlines():
            if "pipeline page http" in line:
                return line.split("pipeline page ", 1)[1].split()[0]
        raise AssertionError(f"no page announced:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        """The end of the process's log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def services() -> Iterator[list[ServiceProcess]]:
    """A list to start service processes into; every one is stopped on exit."""
    started: list[ServiceProcess] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop()
