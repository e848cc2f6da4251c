"""SIGHUP and SIGTERM stop a command the way Ctrl-C does: what it started is stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import sys, time
from framework.cli.signals import interrupt_on_signals
interrupt_on_signals()
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt as exc:
    time.sleep(0.5)  # stopping takes a while; a second signal must not cut it short
    open(sys.argv[1], "w").write(f"stopped by {exc}")
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_hangup_or_terminate_unwinds_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    marker = tmp_path / "stopped"
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(marker)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(sig)
    time.sleep(0.1)
    child.send_signal(sig)  # ignored while stopping
    assert child.wait(timeout=30) == 130
    assert marker.read_text() == f"stopped by {sig.name}"
