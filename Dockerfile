# One image for every flamepipe role in docker-compose.yml: pipeline driver, acker, barrier,
# and the Spark master/worker (pyspark's own spark-class, so Spark matches the driver exactly).
#
#   docker build -t flamepipe:0.1.0 .                       # from the public Python image
#   podman build --build-arg BASE=localhost/debian:bookworm \
#       -t flamepipe:0.1.0 .                                # from a local Debian base, offline
#
# BASE is any Debian 12 (bookworm) image: its archive has openjdk-17-jre-headless, newer
# releases do not, and pyspark 4.3 needs Java 17 or 21. A base without Python gets
# bookworm's python3 (3.11). Offline builds: wheels in docker/wheels/ (flamepipe's
# dependencies and its build backend) and jars in docker/cache/jars/ (the bundles flamepipe fetches with
# Maven, and its own jar) are used instead of PyPI and Maven Central
# (`integration_tests/containers` fills both from the host; docs/deploy.md).
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && { command -v python3 >/dev/null \
         || apt-get install -y --no-install-recommends python3 python3-venv; } \
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/opt/flamepipe/venv/bin:$PATH
ENV FLAMEPIPE_CACHE_DIR=/opt/flamepipe/cache
ENV PYSPARK_PYTHON=/opt/flamepipe/venv/bin/python
WORKDIR /opt/flamepipe

# The dependencies in a virtualenv (a Debian base's Python is "externally managed"), from
# the wheelhouse when there is one: a layer that changes only when they do.
FROM runtime AS deps
RUN python3 -m venv /opt/flamepipe/venv
COPY docker/wheels/ /tmp/wheels/
COPY pyproject.toml /tmp/
RUN python3 -c "import tomllib; p = tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['rocksdb']))" > /tmp/requirements.txt \
    && if ls /tmp/wheels/*.whl >/dev/null 2>&1; then \
        pip install --no-cache-dir --no-index --find-links /tmp/wheels -r /tmp/requirements.txt; \
    else \
        pip install --no-cache-dir -r /tmp/requirements.txt; \
    fi \
    && rm -rf /tmp/wheels

# flamepipe itself, built in a stage of its own so the sources and wheels stay out of the
# image.
FROM deps AS install
COPY docker/wheels/ /tmp/wheels/
COPY pyproject.toml README.md /tmp/src/
COPY framework /tmp/src/framework
COPY connectors /tmp/src/connectors
COPY schemas /tmp/src/schemas
RUN if ls /tmp/wheels/*.whl >/dev/null 2>&1; then \
        pip install --no-cache-dir --no-index --find-links /tmp/wheels "/tmp/src[rocksdb]"; \
    else \
        pip install --no-cache-dir "/tmp/src[rocksdb]"; \
    fi

# The jars: the Kafka connector of Spark, the broker's (for the test stack image) and
# flamepipe's own, compiled from framework/local/java. Built in a stage of their own, so the
# JDK and Maven stay out of the image.
FROM deps AS jars
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven \
    && rm -rf /var/lib/apt/lists/*
COPY docker/cache/ /opt/flamepipe/cache/
COPY framework /tmp/src/framework
RUN PYTHONPATH=/tmp/src python -c "from pathlib import Path; \
from framework.local.jars import flamepipe_jar, jar_bundle; \
cache = Path('/opt/flamepipe/cache'); \
[jar_bundle(b, cache) for b in ('spark-kafka', 'kafka-broker')]; flamepipe_jar(cache)"

# ZooKeeper and Kafka from the same image (pyspark's bundled ZooKeeper, the broker's jars
# above), configured from the environment as the official images are: what the container
# tests run where no image registry is reachable (integration_tests/containers).
FROM runtime AS stack
# The dependencies only (pyspark's ZooKeeper, confluent-kafka for the health check): a
# change to flamepipe does not rebuild it.
COPY --from=deps /opt/flamepipe/venv /opt/flamepipe/venv
COPY --from=jars /opt/flamepipe/cache /opt/flamepipe/cache
COPY docker/stack_entry.py /opt/flamepipe/stack_entry.py
ENTRYPOINT ["python", "/opt/flamepipe/stack_entry.py"]
CMD ["kafka"]

# The default target: flamepipe itself.
FROM runtime AS flamepipe
COPY --from=install /opt/flamepipe/venv /opt/flamepipe/venv
COPY --from=jars /opt/flamepipe/cache /opt/flamepipe/cache
ENTRYPOINT ["flamepipe"]
CMD ["--help"]
