"""Failpoints kill the process at the armed pass, and only there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from framework import failpoints
from framework.errors import ConfigError

_SCRIPT = """
from framework import failpoints
for i in range(1, 6):
    failpoints.hit("other")
    print(i, flush=True)
    failpoints.hit("point", before=lambda: print("before", flush=True))
"""


def _run(armed: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, failpoints.ENV: armed}
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_armed_pass_kills_with_sigkill_after_before() -> None:
    done = _run("point=3")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["1", "2", "3", "before"]


def test_unarmed_points_do_nothing() -> None:
    done = _run("")
    assert done.returncode == 0
    assert done.stdout.split() == ["1", "2", "3", "4", "5"]


@pytest.mark.parametrize("text", ["point", "point=0", "point=x", "=3"])
def test_malformed_settings_name_the_format(text: str) -> None:
    with pytest.raises(ConfigError, match="name=count"):
        failpoints.parse(text)


def test_parse_several() -> None:
    assert failpoints.parse("a=1, b=20") == {"a": 1, "b": 20}
