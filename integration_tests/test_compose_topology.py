"""docker-compose.yml, run without Docker: each flamepipe service as a native process.

No Docker engine exists here, so the compose file is proven another way: this test reads
it (and the ``ENV`` lines of the ``Dockerfile`` the services are built from) and starts
every flamepipe service (Spark master, Spark worker, acker, barrier, pipeline driver) with
its own entrypoint, command and environment, against the embedded Kafka and ZooKeeper in
place of the ``kafka`` and ``zookeeper`` services. The only changes are those a container
network makes implicitly (`_Network`): a service's host name becomes 127.0.0.1, a
container port becomes a free port of this host, a volume path becomes a directory of the
test's, ``python3`` becomes this interpreter. So the file and the code cannot drift: a
renamed command, setting, pipeline or flag fails here.

Then lines go to the ``lines`` topic and the running word count on ``counts`` must equal
its oracle (every word's counts 1..n), read by an independent read_committed reader.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from framework.config import Settings
from framework.demos.text import generate_lines
from framework.errors import KafkaClientError
from framework.kafka.admin import ensure_topics, input_topic_spec
from framework.kafka.cache import ProcessCache
from framework.local.provision import free_port
from framework.local.servers import spark_worker_registered, tcp_ready
from framework.local.stack import LocalStack
from integration_tests.harness.processes import Component
from integration_tests.harness.runs import produce_lines, read_output

ROOT = Path(__file__).resolve().parents[1]
FLAMEPIPE_SERVICES = ("spark-master", "spark-worker", "acker", "barrier", "pipeline")
LINES = 300
_TIMEOUT_S = 240.0


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _image_env() -> dict[str, str]:
    """The ``ENV`` lines of the Dockerfile: every container of the image has them. Not
    ``PATH`` (the image's virtualenv first: here this interpreter's, `_entrypoint`) nor
    the build's ``DEBIAN_FRONTEND``."""
    env: dict[str, str] = {}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("ENV "):
            key, _, value = line[4:].strip().partition("=")
            if key not in ("PATH", "DEBIAN_FRONTEND"):
                env[key] = value
    return env


def _interpolated(value: str) -> str:
    """``${NAME:-default}`` as compose fills it in from the environment it runs in."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m[1]) or m[2], value)


@dataclass(frozen=True)
class _Network:
    """What Docker's network and volumes do, done by hand on one host.

    ``hosts`` maps a service's name to the address it is reached at here, ``ports`` a
    ``service:port`` to the host port serving it, ``paths`` a container path to a host
    directory.
    """

    hosts: dict[str, str]
    ports: dict[str, str]
    paths: dict[str, str]

    def value(self, text: str, host: bool = True) -> str:
        """``text`` as seen on this host; ``host``: a bare service name is a host name
        (an environment value, ``--host``'s argument), not a word like ``barrier``."""
        for container, here in {**self.ports, **self.paths}.items():
            text = text.replace(container, here)
        if host and text in self.hosts:
            return self.hosts[text]
        # A bare "0.0.0.0" binds every interface of a container; here, the loopback only.
        return "127.0.0.1" if text == "0.0.0.0" else text

    def argv(self, args: list[str], flag_ports: dict[str, dict[str, str]]) -> list[str]:
        out: list[str] = []
        for arg in args:
            # A port given as a flag's value (``--port 7077``) is a container port too.
            if out and out[-1] in flag_ports and arg in flag_ports[out[-1]]:
                out.append(flag_ports[out[-1]][arg])
            else:
                out.append(self.value(str(arg), host=bool(out) and out[-1] == "--host"))
        return out


def _entrypoint(service: dict[str, Any]) -> list[str]:
    """The service's entrypoint (the image's ``flamepipe`` unless it names one) as a path
    in this interpreter's environment, where pip put the same scripts as in the image."""
    entry = [str(a) for a in service.get("entrypoint", ["flamepipe"])]
    found = shutil.which(entry[0], path=str(Path(sys.executable).parent))
    assert found is not None, f"{entry[0]} (an entrypoint) is not beside {sys.executable}"
    return [found, *entry[1:]]


@pytest.fixture(scope="module")
def kafka_and_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The embedded Kafka and ZooKeeper, in place of compose's ``kafka`` and ``zookeeper``."""
    settings = Settings(
        kafka_port=free_port(),
        controller_port=free_port(),
        zookeeper_port=free_port(),
        state_dir=tmp_path_factory.mktemp("compose-stack"),
    )
    stack = LocalStack(settings, quiet=True)
    try:
        stack.up()
        yield settings
    finally:
        ProcessCache.clear_all()  # cached clients of this broker would retry it forever
        stack.down()


def _components(stack: Settings, volumes: Path, logs: Path) -> tuple[dict[str, Component], str]:
    compose = _compose()
    services = compose["services"]
    master_port, master_ui = str(free_port()), str(free_port())
    network = _Network(
        hosts={name: "127.0.0.1" for name in services},
        ports={
            f"kafka:{_internal_kafka_port(services)}": stack.kafka_bootstrap,
            "zookeeper:2181": f"127.0.0.1:{stack.zookeeper_port}",
            "spark-master:7077": f"127.0.0.1:{master_port}",
        },
        paths={
            "/var/lib/flamepipe": str(volumes / "flamepipe-state"),
            "/opt/flamepipe/cache": str(stack.cache_dir),
        },
    )
    flag_ports = {"--port": {"7077": master_port}, "--webui-port": {"8080": master_ui}}
    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FLAMEPIPE_", "SPARK_", "PYSPARK_")) and k != "PYTHONPATH"
    }
    # Inside a container every process binds its own network namespace; on one host the
    # Spark daemons must be told to use the loopback address (SPARK_LOCAL_IP).
    base_env["SPARK_LOCAL_IP"] = "127.0.0.1"
    image_env = {k: network.value(v) for k, v in _image_env().items()}
    image_env["PYSPARK_PYTHON"] = sys.executable  # "python3" of the image is this one
    components = {}
    for name in FLAMEPIPE_SERVICES:
        service = services[name]
        env = {k: network.value(_interpolated(str(v))) for k, v in service["environment"].items()}
        argv = _entrypoint(service) + network.argv(
            [str(a) for a in service.get("command", [])], flag_ports
        )
        log = logs / f"{name}.log"
        components[name] = Component(
            name, argv, {**base_env, **image_env, **env}, log, ready=lambda: True
        )
    return components, f"spark://127.0.0.1:{master_port}"


def _internal_kafka_port(services: dict[str, Any]) -> str:
    listeners = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    found = re.search(r"INTERNAL://kafka:(\d+)", listeners)
    assert found, listeners
    return found.group(1)


def _wait(condition: Any, what: str, components: dict[str, Component]) -> None:
    deadline = time.monotonic() + _TIMEOUT_S
    while not condition():
        for c in components.values():
            assert c.exited() is None, f"{c.name} exited: {c.last_line()}\n{c.tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def _expected(lines: list[str]) -> Counter[str]:
    """The running word count's output: ``[word, k]`` for k = 1..(occurrences of word)."""
    totals = Counter(word for line in lines for word in line.split())
    return Counter(json.dumps([word, k]) for word, n in totals.items() for k in range(1, n + 1))


def test_the_compose_services_run_as_native_processes(
    kafka_and_zookeeper: Settings, tmp_path: Path
) -> None:
    stack = kafka_and_zookeeper
    volumes, logs = tmp_path / "volumes", tmp_path / "logs"
    volumes.mkdir()
    logs.mkdir()
    components, master_url = _components(stack, volumes, logs)
    bootstrap = stack.kafka_bootstrap
    lines = generate_lines(LINES, seed=23)
    started: list[Component] = []
    try:
        # Step 1: the Spark master, then the worker once the master listens.
        master_port = int(master_url.rsplit(":", 1)[1])
        components["spark-master"].start()
        started.append(components["spark-master"])
        _wait(lambda: tcp_ready(master_port), "the Spark master", components)
        components["spark-worker"].start()
        started.append(components["spark-worker"])
        _wait(
            lambda: spark_worker_registered(components["spark-worker"].log),
            "the worker to register with the master",
            components,
        )
        # Step 2: acker, barrier, then the driver (compose's depends_on order).
        for name in ("acker", "barrier", "pipeline"):
            components[name].start()
            started.append(components[name])
        # Step 3: input to the deployed pipeline's topic (created with the source's spec
        # if the driver has not yet), then the output, read by an independent reader.
        ensure_topics(bootstrap, [input_topic_spec("lines", 2)])
        produce_lines(bootstrap, "lines", lines, 2)
        expected = _expected(lines)
        seen: Counter[str] = Counter()

        def caught_up() -> bool:
            nonlocal seen
            try:
                seen = Counter(json.dumps(v) for v in read_output(bootstrap, "counts"))
            except KafkaClientError:  # the driver has not created its output topic yet
                return False
            return sum(seen.values()) >= sum(expected.values())

        _wait(caught_up, "the word counts", components)
        time.sleep(3)  # anything beyond the expected output would show by now
        caught_up()
    finally:
        for component in reversed(started):
            component.stop()
    assert seen == expected, (
        f"{sum(seen.values())} counts read, {sum(expected.values())} expected; missing "
        f"{sum((expected - seen).values())}, extra {sum((seen - expected).values())}"
    )
    # The worker ran the executors, in the shared volume's work directory.
    executors = list((volumes / "flamepipe-state").rglob("stderr"))
    assert executors, "no executor ran on the compose worker"
