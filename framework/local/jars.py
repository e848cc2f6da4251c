"""Maven jars for the embedded stack, fetched once and cached.

Each bundle is a POM shipped inside the package. Its jars are copied with
``mvn dependency:copy-dependencies`` into ``<cache>/jars/<bundle>-<digest of the POM>``;
a ``.complete`` marker written last makes a half-finished download invisible, and a cached
bundle is used without calling Maven at all, so the second start needs no network.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from framework.errors import StackError
from framework.local.tools import maven_executable

__all__ = ["BUNDLES", "jar_bundle"]

_log = logging.getLogger(__name__)

BUNDLES = {"kafka-broker": "kafka-broker.xml", "spark-kafka": "spark-kafka.xml"}
_MARKER = ".complete"


def jar_bundle(name: str, cache_dir: Path, quiet: bool = False) -> list[Path]:
    """The jars of bundle ``name``, downloading them on first use."""
    if name not in BUNDLES:
        raise StackError(f"unknown jar bundle {name!r}: one of {sorted(BUNDLES)}")
    pom = resources.files("framework.local").joinpath(BUNDLES[name]).read_bytes()
    target = cache_dir / "jars" / f"{name}-{hashlib.sha256(pom).hexdigest()[:12]}"
    if not (target / _MARKER).exists():
        _download(name, pom, target, quiet)
    return sorted(target.glob("*.jar"))


def _download(name: str, pom: bytes, target: Path, quiet: bool) -> None:
    mvn = maven_executable()
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "pom.xml").write_bytes(pom)
    if not quiet:
        _log.info("fetching %s jars with Maven (once) ...", name)
    cmd = [
        mvn, "-B", "-q", "-f", str(staging / "pom.xml"),
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not any(staging.glob("*.jar")):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise StackError(
            f"downloading the {name} jars failed (mvn exit {proc.returncode}); check access "
            f"to Maven Central, or pre-fill {target}.\n{tail}"
        )
    (staging / "pom.xml").unlink()
    (staging / _MARKER).write_text("ok\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
