"""An embedded schema registry on 127.0.0.1: Apicurio Registry with its Confluent API.

Apicurio Registry 2.6 (Apache 2.0) serves the Confluent Schema Registry REST API under
``/apis/ccompat/v7``, which confluent-kafka's serializers (`connectors.schema_registry`) use as
they would Confluent's own server. Its Quarkus distribution comes from Maven Central once
(``mvn dependency:unpack``) into ``<cache>/registry/apicurio-<version>``, like the broker's
jars (`framework.local.jars`), and runs on the JDK 17 the stack already needs. Storage is
in memory: a restarted registry forgets its schemas, as a test wants. New subjects get
Confluent's default compatibility rule, BACKWARD.

>>> from pathlib import Path
>>> registry = SchemaRegistry(Path("/tmp/fp-state"), Path("/tmp/fp-cache"), port=18081)
>>> registry.url
'http://127.0.0.1:18081/apis/ccompat/v7'
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import urllib.request
from pathlib import Path

from framework.errors import StackError
from framework.local.process import Daemon, log_tail, port_free, wait_for
from framework.local.servers import local_jvm_flags
from framework.local.tools import java_executable, maven_executable

_log = logging.getLogger(__name__)

APICURIO_VERSION = "2.6.13.Final"
"""The newest Apicurio Registry whose distribution runs on Java 17 (3.x needs Java 21)."""
_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
_RUNNER = f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
_MARKER = ".complete"


def registry_dist(cache_dir: Path, quiet: bool = False) -> Path:
    """The registry's runner jar, unpacked from Maven Central on first use (~100 MB)."""
    target = cache_dir / "registry" / f"apicurio-{APICURIO_VERSION}"
    if not (target / _MARKER).exists():
        _unpack(target, quiet)
    return target / _RUNNER


def _unpack(target: Path, quiet: bool) -> None:
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if not quiet:
        _log.info("fetching Apicurio Registry %s with Maven (once) ...", APICURIO_VERSION)
    cmd = [
        maven_executable(), "-B", "-q",
        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:unpack",
        f"-Dartifact={_ARTIFACT}", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=staging)
    if proc.returncode != 0 or not (staging / _RUNNER).is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise StackError(
            f"fetching Apicurio Registry failed (mvn exit {proc.returncode}); check access to "
            f"Maven Central, or pre-fill {target}.\n{tail}"
        )
    (staging / _MARKER).write_text("ok\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


class SchemaRegistry:
    """One registry daemon of a state directory (start, wait for, stop)."""

    def __init__(self, state_dir: Path, cache_dir: Path, port: int, quiet: bool = False) -> None:
        self.state_dir = state_dir
        self.cache_dir = cache_dir
        self.port = port
        self.quiet = quiet
        self.daemon = Daemon("schema-registry", state_dir, f"{state_dir}#schema-registry")

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL (what `connectors.ConfluentAvro` takes)."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    def ready(self) -> bool:
        """True once the registry answers a subjects listing."""
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2.0) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def up(self, timeout_s: float = 90.0) -> str:
        """Start the registry unless it runs; its URL once it answers."""
        if self.daemon.alive():
            wait_for(self.ready, timeout_s, self.daemon.alive, self.daemon.name)
            return self.url
        if not port_free(self.port):
            raise StackError(
                f"port {self.port} on 127.0.0.1 is taken by another process: stop it, or "
                "choose another (--registry-port <free port> or FLAMEPIPE_REGISTRY_PORT)"
            )
        runner = registry_dist(self.cache_dir, self.quiet)
        if not self.quiet:
            _log.info("starting Apicurio Registry on 127.0.0.1:%d", self.port)
        self.daemon.start(self.argv(java_executable(), runner))
        try:
            wait_for(self.ready, timeout_s, self.daemon.alive, self.daemon.name)
        except StackError as exc:
            self.daemon.stop(timeout_s=5)
            raise StackError(
                f"{exc}; last lines of {self.daemon.log_file}:\n{log_tail(self.daemon.log_file)}"
            ) from None
        return self.url

    def argv(self, java: str, runner: Path) -> list[str]:
        """The command that runs the registry on 127.0.0.1 only."""
        return [
            java,
            "-Xmx384m",
            *local_jvm_flags(),
            f"-Dflamepipe.stack={self.daemon.marker}",
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.log.level=WARN",
            "-Dregistry.rules.global.compatibility=BACKWARD",
            "-jar",
            str(runner),
        ]

    def down(self) -> bool:
        """Stop it; True if it was running."""
        return self.daemon.stop()
