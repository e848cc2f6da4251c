"""Locating the external programs the embedded stack needs: Java and Maven."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from framework.errors import StackError


def java_executable() -> str:
    """Path of ``java``: ``$JAVA_HOME/bin/java`` if set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise StackError(
            "Java not found: install a JDK 17+ (e.g. `apt-get install openjdk-17-jdk-headless`) "
            "or set JAVA_HOME"
        )
    return found


def maven_executable() -> str:
    """Path of ``mvn``, needed once to download the broker and connector jars."""
    found = shutil.which("mvn")
    if found is None:
        raise StackError(
            "Maven not found: install it (e.g. `apt-get install maven`) so flamepipe can "
            "fetch the Kafka jars once, or pre-fill the jar cache (FLAMEPIPE_CACHE_DIR)"
        )
    return found


def pyspark_jars_dir() -> Path:
    """pyspark's bundled jars folder (it carries ZooKeeper 3.9 and log4j2)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StackError("pyspark is not installed: `pip install flamepipe` installs it")
    jars = Path(spec.origin).parent / "jars"
    if not jars.is_dir():
        raise StackError(f"pyspark has no jars folder at {jars}: reinstall pyspark")
    return jars
