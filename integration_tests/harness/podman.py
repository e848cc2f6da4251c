"""docker-compose.yml in real containers, with Podman, where no image registry is reachable.

1. The base image: Debian bookworm from its archive (``mmdebstrap``), imported once as
   ``localhost/debian:bookworm`` and kept in Podman's store.
2. The build context: a wheelhouse of flamepipe and its dependencies at this checkout's
   versions (``docker/wheels``) and the jars flamepipe already fetched
   (``docker/cache/jars``), so the Dockerfile builds offline.
3. The images: ``--target stack`` (ZooKeeper and Kafka, `docker/stack_entry.py`) and the
   default target, tagged as docker-compose.yml names it; Podman's layer cache makes a
   rebuild take seconds.
4. An API socket (``podman system service``) for docker-compose, and a thread running the
   containers' health checks (Podman runs them from systemd timers, which this machine
   lacks; ``depends_on: condition: service_healthy`` waits for them).
5. The project up (`Compose.up`), and down with its volumes (`Compose.down`), which
   checks that nothing of it is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

from framework.config import Settings
from framework.local.jars import flamepipe_jar, jar_bundle

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/debian:bookworm"
STACK_IMAGE = "localhost/flamepipe-stack:test"
MIRROR = "http://deb.debian.org/debian"
TOOLS = ("podman", "docker-compose", "mmdebstrap")
OVERRIDE = ROOT / "integration_tests" / "containers" / "compose.test.yml"


def require_tools() -> None:
    """Fail with the fix when a tool is missing (``make bootstrap`` installs them as root)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    assert not missing, (
        f"{', '.join(missing)} not installed: run `make bootstrap` as root (it installs "
        "podman, docker-compose and mmdebstrap from Debian's archive)"
    )


def run(argv: list[str], log: Path, timeout_s: float = 600, **kw: object) -> str:
    """Run ``argv``, its output appended to ``log``; its stdout, or an error with the tail."""
    began = time.monotonic()
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        **kw,  # type: ignore[call-overload]
    )
    with log.open("a") as out:
        out.write(
            f"$ {' '.join(argv)}  # {time.monotonic() - began:.1f} s, exit {proc.returncode}\n"
        )
        out.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise AssertionError(f"{' '.join(argv[:3])} ... failed (exit {proc.returncode}):\n{tail}")
    return str(proc.stdout)


def base_image(log: Path) -> None:
    """Step 1."""
    if subprocess.run(["podman", "image", "exists", BASE_IMAGE], check=False).returncode == 0:
        return
    with tempfile.TemporaryDirectory(prefix="flamepipe-base-") as tmp:
        tar = Path(tmp) / "base.tar"
        run(["mmdebstrap", "--variant=minbase", "--format=tar", "bookworm", str(tar), MIRROR], log)
        run(["podman", "import", str(tar), BASE_IMAGE], log)


def build_context(log: Path) -> None:
    """Step 2: the dependencies and the build backend as wheels (not flamepipe itself: the
    image builds it from the checkout, so the dependencies' layer stays cached)."""
    wheels = ROOT / "docker" / "wheels"
    frozen = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], log)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        constraints.write(frozen)
        constraints.flush()
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels),
             "-c", constraints.name, f"{ROOT}[rocksdb]", "setuptools", "wheel"],
            log,
        )  # fmt: skip
    for own in wheels.glob("flamepipe-*.whl"):
        own.unlink()
    cache = Settings.load().cache_dir
    jars = ROOT / "docker" / "cache" / "jars"
    shutil.rmtree(jars, ignore_errors=True)
    bundles = [
        jar_bundle(name, cache, quiet=True)[0].parent for name in ("spark-kafka", "kafka-broker")
    ]
    for source in [*bundles, flamepipe_jar(cache).parent]:
        shutil.copytree(source, jars / source.name)


def compose_image() -> str:
    """The image docker-compose.yml runs flamepipe from."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return str(compose["x-flamepipe"]["image"])


def build_images(log: Path) -> None:
    """Step 3."""
    base = ["podman", "build", "--build-arg", f"BASE={BASE_IMAGE}"]
    run([*base, "--target", "stack", "-t", STACK_IMAGE, str(ROOT)], log, timeout_s=900)
    run([*base, "-t", compose_image(), str(ROOT)], log, timeout_s=900)


class ApiSocket:
    """Step 4: ``podman system service`` on a socket of its own, for docker-compose."""

    def __init__(self, where: Path, log: Path) -> None:
        self.path = where / "podman.sock"
        self.url = f"unix://{self.path}"
        self._out = log.open("a")
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ApiSocket:
        self._proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", self.url],
            stdout=self._out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not self.path.exists():
            assert self._proc.poll() is None, "podman system service exited"
            assert time.monotonic() < deadline, "podman's API socket did not appear in 30 s"
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._out.close()


class Compose:
    """A compose project of docker-compose.yml and the test override (step 5), with a
    thread running its health checks (step 4)."""

    def __init__(self, project: str, socket: ApiSocket, log: Path) -> None:
        self.project = project
        self.log = log
        self.env = {**os.environ, "DOCKER_HOST": socket.url, "COMPOSE_PROJECT_NAME": project}
        self._stop = threading.Event()
        self._health = threading.Thread(target=self._checks, name="health-checks", daemon=True)

    def _compose(self, *args: str, timeout_s: float = 600) -> str:
        files = ["-f", str(ROOT / "docker-compose.yml"), "-f", str(OVERRIDE)]
        return run(
            ["docker-compose", "-p", self.project, *files, *args], self.log, timeout_s, env=self.env
        )

    def __enter__(self) -> Compose:
        self._health.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.down()
        finally:
            self._stop.set()
            self._health.join(10)

    def up(self) -> None:
        """Every service started, in the order its health checks gate."""
        self._compose("up", "-d", "--no-build")

    def down(self) -> None:
        """Stop and remove the containers, network and volumes; nothing of them may stay."""
        self._compose("down", "-v", "--timeout", "10")
        left = self.containers(everything=True)
        assert not left, f"left running after down: {left}"

    def containers(self, everything: bool = False) -> list[str]:
        argv = ["podman", "ps", "--format", "{{.Names}}", "--filter",
                f"label=com.docker.compose.project={self.project}"]  # fmt: skip
        out = subprocess.run(
            [*argv, *(["-a"] if everything else [])], capture_output=True, text=True, check=False
        )
        return out.stdout.split()

    def _checks(self) -> None:
        while not self._stop.wait(2.0):
            for name in self.containers():
                subprocess.run(
                    ["podman", "healthcheck", "run", name], capture_output=True, check=False
                )

    def name(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def state(self, service: str) -> dict[str, object]:
        out = subprocess.run(
            ["podman", "inspect", "--format", "json", self.name(service)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        info = json.loads(out.stdout)[0]
        return {"pid": info["State"]["Pid"], "running": info["State"]["Running"],
                "restarts": info["RestartCount"]}  # fmt: skip

    def kill9(self, service: str, timeout_s: float = 60) -> float:
        """kill -9 the service's main process from this host; return once its restart
        policy started it again (the seconds it took)."""
        before = self.state(service)
        assert before["running"] and before["pid"], f"{service} is not running: {before}"
        os.kill(int(str(before["pid"])), signal.SIGKILL)
        began = time.monotonic()
        while True:
            now = self.state(service)
            if now["running"] and int(str(now["restarts"])) > int(str(before["restarts"])):
                return time.monotonic() - began
            assert time.monotonic() - began < timeout_s, f"{service} not restarted: {now}"
            time.sleep(0.2)

    def logs(self, service: str) -> str:
        out = subprocess.run(
            ["podman", "logs", self.name(service)], capture_output=True, text=True, check=False
        )
        return out.stdout + out.stderr
