"""Entry of the `stack` image (Dockerfile): ZooKeeper or a KRaft Kafka node, configured from
the environment as the official images are, so docker-compose.yml's settings for
``zookeeper:3.9`` and ``apache/kafka`` work unchanged on it.

    python stack_entry.py zookeeper   # ZOO_* variables, data in /data, port 2181
    python stack_entry.py kafka       # KAFKA_* variables: KAFKA_LOG_DIRS -> log.dirs

ZooKeeper runs from pyspark's bundled jars, Kafka from the broker bundle flamepipe fetches
(`framework.local.jars` puts it in ``jars/kafka-broker-<hash>`` of its cache), both with
the image's Java; flamepipe itself is not in this image. The process replaces this one
(``exec``), so a container's signals and exit code are the server's own.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from pathlib import Path

_ZOO_DEFAULTS = {
    "tickTime": "2000",
    "initLimit": "10",
    "syncLimit": "5",
    "dataDir": "/data",
    "clientPort": "2181",
    "maxClientCnxns": "0",
    "admin.enableServer": "false",
}


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def zookeeper() -> None:
    import pyspark

    conf = dict(_ZOO_DEFAULTS)
    if "ZOO_4LW_COMMANDS_WHITELIST" in os.environ:
        conf["4lw.commands.whitelist"] = os.environ["ZOO_4LW_COMMANDS_WHITELIST"]
    if os.environ.get("ZOO_ADMINSERVER_ENABLED", "false").lower() == "true":
        conf["admin.enableServer"] = "true"
    Path(conf["dataDir"]).mkdir(parents=True, exist_ok=True)
    cfg = Path("/tmp/zoo.cfg")
    cfg.write_text("".join(f"{key}={value}\n" for key, value in conf.items()))
    jars = Path(pyspark.__file__).parent / "jars"
    main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
    heap = os.environ.get("ZOO_HEAP_MB", "256")
    _exec([_java(), f"-Xmx{heap}m", "-cp", f"{jars}/*", main, str(cfg)])


def kafka_properties(env: dict[str, str]) -> dict[str, str]:
    """``KAFKA_FOO_BAR=x`` -> ``foo.bar=x``, as the apache/kafka image maps them."""
    skip = {"KAFKA_HEAP_OPTS", "KAFKA_JVM_OPTS"}
    return {
        key[len("KAFKA_") :].lower().replace("_", "."): value
        for key, value in env.items()
        if key.startswith("KAFKA_") and key not in skip
    }


def kafka() -> None:
    props = kafka_properties(dict(os.environ))
    log_dirs = props.setdefault("log.dirs", "/var/lib/kafka/data")
    path = Path("/tmp/server.properties")
    path.write_text("".join(f"{key}={value}\n" for key, value in sorted(props.items())))
    cache = Path(os.environ.get("FLAMEPIPE_CACHE_DIR", "/opt/flamepipe/cache"))
    # The bundle's directory as `framework.local.jars` lays it out (the image has one).
    [bundle] = (cache / "jars").glob("kafka-broker-*")
    classpath = ":".join(str(j) for j in sorted(bundle.glob("*.jar")))
    heap = os.environ.get("KAFKA_HEAP_OPTS", "-Xmx512m").split()
    jvm = [_java(), *heap, "-cp", classpath]
    first_dir = Path(log_dirs.split(",")[0])
    if not (first_dir / "meta.properties").exists():
        # One cluster id per compose project: the same on every start of this volume.
        cluster = os.environ.get("CLUSTER_ID") or _cluster_id(os.environ.get("HOSTNAME", "kafka"))
        subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster}", "-c", str(path)],
            check=True,
        )
    _exec([*jvm, "kafka.Kafka", str(path)])


def _cluster_id(seed: str) -> str:
    raw = hashlib.sha256(seed.encode()).digest()[:16]
    return "A" + base64.urlsafe_b64encode(raw).decode().rstrip("=")[1:]


def _exec(argv: list[str]) -> None:
    sys.stdout.flush()
    os.execvp(argv[0], argv)


def main() -> None:
    roles = {"zookeeper": zookeeper, "kafka": kafka}
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role not in roles:
        sys.exit(f"usage: stack_entry.py {{{'|'.join(roles)}}} (got {role!r})")
    roles[role]()


if __name__ == "__main__":
    main()
