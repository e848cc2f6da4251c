"""Jars for the embedded stack and the Spark session, fetched or built once and cached.

Each bundle is a POM shipped inside the package. Its jars are copied with
``mvn dependency:copy-dependencies`` into ``<cache>/jars/<bundle>-<digest of the POM>``;
a ``.complete`` marker written last makes a half-finished download invisible, and a cached
bundle is used without calling Maven at all, so the second start needs no network.

`flamepipe_jar` is flamepipe's own Java code (``framework/local/java``), compiled with
``javac`` against pyspark's Hadoop jars into ``<cache>/jars/flamepipe-<digest of the
sources>/flamepipe.jar`` the same way: built once, used from the cache after.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from framework.errors import StackError
from framework.local.tools import maven_executable, pyspark_jars_dir

_log = logging.getLogger(__name__)

BUNDLES = {
    "kafka-broker": "kafka-broker.xml",
    "spark-kafka": "spark-kafka.xml",
    "hdfs-minicluster": "hdfs-minicluster.xml",  # the file sink's HDFS tests
}
_MARKER = ".complete"
NIO_LOCAL_FS = "io.flamepipe.hadoop.NioLocalFileSystem"
"""Hadoop's local file system with fork-free permissions (``framework/local/java``)."""


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


def flamepipe_jar(cache_dir: Path) -> Path:
    """flamepipe's own jar (see the module docstring), compiled on first use."""
    sources = sorted(
        (f.name, f.read_bytes())
        for f in resources.files("framework.local").joinpath("java").iterdir()
        if f.name.endswith(".java")
    )
    digest = hashlib.sha256(b"".join(name.encode() + body for name, body in sources))
    target = cache_dir / "jars" / f"flamepipe-{digest.hexdigest()[:12]}"
    if not (target / _MARKER).exists():
        _compile(sources, target)
    return target / "flamepipe.jar"


def _compile(sources: list[tuple[str, bytes]], target: Path) -> None:
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise StackError(
            "javac not found: install a JDK 17+ (e.g. `apt-get install openjdk-17-jdk-headless`)"
            " so flamepipe can build its Hadoop file system once"
        )
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "src").mkdir(parents=True)
    for name, body in sources:
        (staging / "src" / name).write_bytes(body)
    classpath = ":".join(str(j) for j in sorted(pyspark_jars_dir().glob("hadoop-client-api-*.jar")))
    steps = [
        [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(staging / "classes"),
         *(str(staging / "src" / name) for name, _ in sources)],
        [jar, "cf", str(staging / "flamepipe.jar"), "-C", str(staging / "classes"), "."],
    ]  # fmt: skip
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise StackError(
                f"building flamepipe's jar failed ({Path(cmd[0]).name} exit "
                f"{proc.returncode}):\n{(proc.stdout + proc.stderr).strip()[-2000:]}"
            )
    shutil.rmtree(staging / "src")
    shutil.rmtree(staging / "classes")
    (staging / _MARKER).write_text("ok\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
