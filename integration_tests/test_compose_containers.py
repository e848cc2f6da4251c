"""docker-compose.yml in real containers: exactly once through kill -9 of every component.

The images are built from this checkout alone (`integration_tests.harness.podman`: a
Debian base from its archive, a wheelhouse, the jars flamepipe fetched), the topology is
brought up with docker-compose against Podman (ZooKeeper and Kafka from the project's
`stack` image, `integration_tests/containers/compose.test.yml`), and lines flow into
``lines`` from this host while the pipeline driver, the acker, the barrier, the Spark
worker and the Kafka broker are each killed with SIGKILL from this host and restarted by
their restart policy. Then `flamepipe consume counts --verify`, run here as a user would,
must check every bundle, and its items must be the running word count's oracle: every
word's counts 1..n once, nothing lost, nothing twice. ``down -v`` must leave nothing.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from framework.demos.text import generate_lines
from framework.kafka.clients import read_to_end
from integration_tests.harness import podman
from integration_tests.harness.runs import assert_running_counts, read_output, word_counts

_log = logging.getLogger(__name__)

BOOTSTRAP = "127.0.0.1:9092"  # docker-compose.yml publishes Kafka's HOST listener here
PORTS = (9092, 2181, 7077, 8080)
VICTIMS = ("pipeline", "acker", "barrier", "spark-worker", "kafka")
RATE = 40  # lines a second while the components are killed
_PROGRESS_S = 240.0  # a restarted component's output must move within this


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[podman.Compose]:
    podman.require_tools()
    busy = [port for port in PORTS if not _free(port)]
    assert not busy, f"ports {busy} of 127.0.0.1 are taken: docker-compose.yml publishes them"
    where = tmp_path_factory.mktemp("containers")
    log = where / "build.log"
    began = time.monotonic()
    podman.base_image(log)
    podman.build_context(log)
    podman.build_images(log)
    _log.info("images built in %.1f s (log: %s)", time.monotonic() - began, log)
    with (
        podman.ApiSocket(where, log) as api,
        podman.Compose(f"fp{uuid.uuid4().hex[:8]}", api, where / "compose.log") as compose,
    ):
        compose.up()
        yield compose


class _Lines(threading.Thread):
    """Lines into ``lines`` at `RATE` a second until stopped; ``sent`` holds what went."""

    def __init__(self) -> None:
        super().__init__(name="lines", daemon=True)
        self.pool = generate_lines(20_000, seed=40)
        self.sent: list[str] = []
        self.stop = threading.Event()
        self.failed: list[str] = []

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "acks": "all"})

        def delivered(err: object, _msg: object) -> None:
            if err is not None:
                self.failed.append(str(err))

        while not self.stop.wait(1 / RATE) and len(self.sent) < len(self.pool):
            line = self.pool[len(self.sent)]
            producer.produce("lines", line.encode(), on_delivery=delivered)
            self.sent.append(line)
            producer.poll(0)
        assert producer.flush(120) == 0, "lines not delivered in 120 s"


def _outputs() -> int:
    try:
        return len(read_output(BOOTSTRAP, "counts"))
    except Exception:  # the broker may be down (killed) right now
        return -1


def _await_progress(after: int, what: str) -> int:
    """Wait for more than ``after`` outputs; their count."""
    deadline = time.monotonic() + _PROGRESS_S
    while (now := _outputs()) <= after:
        assert time.monotonic() < deadline, f"no new output {_PROGRESS_S:.0f} s after {what}"
        time.sleep(1)
    return now


def test_compose_is_exactly_once_through_kill_9_of_every_component(
    deployed: podman.Compose,
) -> None:
    lines = _Lines()
    lines.start()
    try:
        seen = _await_progress(0, "the start")
        for victim in VICTIMS:
            # Recovered = an output of a line sent after the kill: more outputs than the
            # words of every line sent before it (each word's count is one output).
            before = sum(len(line.split()) for line in lines.sent[: len(lines.sent)])
            killed = time.monotonic()
            took = deployed.kill9(victim)
            seen = _await_progress(max(seen, before), f"kill -9 of {victim}")
            _log.info(
                "%s killed: restarted in %.1f s, output of later lines %.1f s after the kill",
                victim,
                took,
                time.monotonic() - killed,
            )
    finally:
        lines.stop.set()
        lines.join(180)
    assert not lines.failed, lines.failed[:3]
    # The oracle is the input as Kafka stored it: the test's producer is not idempotent,
    # so a batch it retried over the broker's kill -9 may be stored twice. Exactly once is
    # the pipeline's promise for what was stored; nothing sent may be missing.
    stored = [m.value().decode() for m in read_to_end(BOOTSTRAP, "lines")]
    missing = Counter(lines.sent) - Counter(stored)
    foreign = set(stored) - set(lines.sent)
    assert not missing and not foreign, (sorted(missing)[:3], sorted(foreign)[:3])
    if len(stored) > len(lines.sent):
        _log.info(
            "%d line(s) stored twice by the producer's retries", len(stored) - len(lines.sent)
        )
    total = sum(word_counts(stored).values())
    deadline = time.monotonic() + _PROGRESS_S
    while _outputs() < total:
        assert time.monotonic() < deadline, f"{_outputs()} of {total} outputs"
        time.sleep(1)
    # What a user runs: the output read with read_committed, every bundle verified.
    flamepipe = str(Path(sys.executable).parent / "flamepipe")
    verify = [flamepipe, "consume", "counts", "--verify", "--bootstrap", BOOTSTRAP, "--idle", "5"]
    proc = subprocess.run(verify, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    items = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    assert_running_counts(items, stored)
    assert "verified" in proc.stdout + proc.stderr
