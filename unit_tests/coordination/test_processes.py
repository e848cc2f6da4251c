"""Process identities of election candidates (`framework.coordination.processes`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from framework.coordination.processes import dead_on_this_host, process_age_s, process_identity


def test_a_running_process_is_not_dead() -> None:
    assert not dead_on_this_host(process_identity())
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        try:
            assert not dead_on_this_host(process_identity(child.pid))
        finally:
            child.kill()


def test_a_process_that_ended_is_dead() -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        identity = process_identity(child.pid)
        child.kill()
    assert dead_on_this_host(identity)


def test_a_reused_pid_does_not_keep_the_dead_alive() -> None:
    parent = process_identity(os.getppid()).rsplit(":", 1)[0]
    assert dead_on_this_host(f"{parent}:t1")


def test_nothing_is_proved_elsewhere_or_of_other_forms() -> None:
    host, _, namespace, started = process_identity().rsplit(":", 3)
    gone = 2**22 + 12345  # above pid_max: no such process here
    assert dead_on_this_host(f"{host}:{gone}:{namespace}:{started}")
    assert not dead_on_this_host(f"other-{host}:{gone}:{namespace}:{started}")
    assert not dead_on_this_host(f"{host}:{gone}:ns1:{started}")
    assert not dead_on_this_host(f"{host}:{gone}:{namespace}:t-")
    assert not dead_on_this_host(f"{socket.gethostname()}:{gone}")
    assert not dead_on_this_host("acker-a")


def test_a_process_knows_its_age() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)
        mine, its = process_age_s(), process_age_s(child.pid)
        assert mine is not None and its is not None and 0.3 < its < mine
    finally:
        child.kill()
        child.wait()
    assert process_age_s(child.pid) is None  # reaped: no such process
