"""The stack commands leave no process and no listening port: `up && status && down`, and a
demo stopped by its terminal closing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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


def _own_stack(state: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The environment of commands with an embedded stack of their own (free ports)."""
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
    return env, ports


def test_up_status_down_twice_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env, ports = _own_stack(state)
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


def test_a_demo_whose_terminal_closes_stops_the_stack_it_started(tmp_path: Path) -> None:
    """SIGHUP (the terminal closed) mid-run: the demo unwinds as for Ctrl-C, its embedded
    Kafka and ZooKeeper stop, nothing of it keeps running or listening."""
    state = tmp_path / "state"
    env, ports = _own_stack(state)
    env["FLAMEPIPE_UI"] = "false"
    cmd = [sys.executable, "-m", "framework.cli", "demo", "--lines", "500000", "--rate", "500"]
    demo = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    assert demo.stderr is not None
    seen = []
    for line in demo.stderr:  # until its pipeline runs: the stack is up, Spark too
        seen.append(line)
        if "starting pipeline" in line:
            break
    else:
        raise AssertionError("the demo never started its pipeline:\n" + "".join(seen))
    time.sleep(5)
    demo.send_signal(signal.SIGHUP)
    try:
        code = demo.wait(timeout=120)
    finally:
        demo.kill()
    assert code == 130, "".join(seen) + demo.stderr.read()
    assert all(port_free(p) for p in ports.values()), ports
    # Spark's JVM ends when its Python parent has gone, a moment after.
    deadline = time.monotonic() + 30
    while _java_processes_with(str(state.resolve())) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _java_processes_with(str(state.resolve())) == []
