"""`flamepipe up && status && down`, twice, leaves no process and no listening port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from framework.local.process import port_free
from framework.local.provision import free_port


def _flamepipe(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "framework.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)


def _java_processes_with(marker: str) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                out.append(proc.name)
    return out


def test_up_status_down_twice_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ports = {"kafka": free_port(), "controller": free_port(), "zookeeper": free_port()}
    env = dict(os.environ)
    env.pop("FLAMEPIPE_BOOTSTRAP_SERVERS", None)
    env.pop("FLAMEPIPE_ZOOKEEPER_CONNECT", None)
    env.update(
        FLAMEPIPE_STATE_DIR=str(state),
        FLAMEPIPE_KAFKA_PORT=str(ports["kafka"]),
        FLAMEPIPE_CONTROLLER_PORT=str(ports["controller"]),
        FLAMEPIPE_ZOOKEEPER_PORT=str(ports["zookeeper"]),
    )
    for _round in range(2):
        up = _flamepipe(["up"], env)
        assert up.returncode == 0, up.stderr
        assert f"bootstrap.servers=127.0.0.1:{ports['kafka']}" in up.stdout
        again = _flamepipe(["up"], env)
        assert again.returncode == 0 and "already running" in again.stderr
        status = _flamepipe(["status"], env)
        assert status.returncode == 0, status.stdout
        assert status.stdout.count(" ready ") == 2
        down = _flamepipe(["down"], env)
        assert down.returncode == 0, down.stderr
        assert all(port_free(p) for p in ports.values()), ports
        assert _java_processes_with(str(state.resolve())) == []
        stopped = _flamepipe(["status"], env)
        assert stopped.returncode == 1 and stopped.stdout.count(" stopped ") == 2
