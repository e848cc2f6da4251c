#!/usr/bin/env bash
# Make this checkout runnable from nothing: Java and Maven (apt, if missing and root),
# a virtualenv with flamepipe and its dev tools, and the Maven jars of the local stack.
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'bootstrap: %s\n' "$*" >&2; }

need_apt=()
# javac too: flamepipe builds its Hadoop file system class once (framework/local/java).
{ command -v java && command -v javac; } >/dev/null 2>&1 || [ -n "${JAVA_HOME:-}" ] \
  || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${need_apt[*]} with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    say "missing ${need_apt[*]}: install them (a JDK 17+ and Maven) and run again"; exit 1
  fi
fi
# Only the tests need a browser (they load the live page in headless Chromium).
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing chromium-headless-shell with apt-get (for the live page's test)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null
  else
    say "no headless Chromium: the live page's test will fail until chromium-headless-shell is installed"
  fi
fi

# Only the tests need PostgreSQL (the database sink's test starts a server of its own).
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing postgresql with apt-get (for the database sink's test)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    say "no PostgreSQL: the database sink's PostgreSQL test will fail until postgresql is installed"
  fi
fi

# Only the tests need containers (integration_tests/test_compose_containers.py runs
# docker-compose.yml on Podman; the images build from a Debian base made by mmdebstrap).
podman_pkgs=(podman runc netavark aardvark-dns slirp4netns uidmap catatonit fuse-overlayfs
  mmdebstrap docker-compose)
if ! { command -v podman && command -v docker-compose && command -v mmdebstrap; } >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing podman, docker-compose and mmdebstrap with apt-get (for the container tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${podman_pkgs[@]}" >/dev/null
  else
    say "no podman/docker-compose/mmdebstrap: the container tests will fail until ${podman_pkgs[*]} are installed"
  fi
fi
# Root Podman asks for more open files than some sandboxes allow, and crun refuses some
# cgroup layouts: runc and explicit limits work everywhere this was tried.
conf=/etc/containers/containers.conf
if [ "$(id -u)" = 0 ] && command -v podman >/dev/null 2>&1 && [ ! -e "$conf" ]; then
  say "writing $conf (runc, open-file and process limits for containers)"
  mkdir -p /etc/containers
  cat > "$conf" <<'CONF'
# Written by flamepipe's scripts/bootstrap.sh
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
CONF
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.flamepipe-installed
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing flamepipe and its dependencies into .venv (first time takes a minute)"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[dev]"
  echo "$want" > "$stamp"
fi

say "fetching the local stack's jars (cached after the first time)"
.venv/bin/python - <<'PY'
from framework.config import Settings
from framework.local.jars import flamepipe_jar, jar_bundle
from framework.local.apicurio import registry_dist
settings = Settings.load()
# hdfs-minicluster (~106 MB) only for the file sink's HDFS test, like PostgreSQL above.
for bundle in ("kafka-broker", "spark-kafka", "hdfs-minicluster"):
    jar_bundle(bundle, settings.cache_dir)
flamepipe_jar(settings.cache_dir)
# The schema registry the tests (and `flamepipe up --registry-port`) start.
registry_dist(settings.cache_dir)
PY

# Class archives of the embedded ZooKeeper and Kafka, Spark's driver and the embedded
# cluster's executors: built once (~2 min), every start of those JVMs after them faster.
.venv/bin/python -m framework.runners.spark.class_archive \
  || say "no class archive: Spark sessions start without one (slower, nothing else changes)"
