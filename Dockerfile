# One image for every flamepipe role in docker-compose.yml: pipeline driver, acker, barrier,
# and the Spark master/worker (pyspark's own spark-class, so Spark matches the driver exactly).
# Pinned to Debian 12 (bookworm): its archive has openjdk-17-jre-headless, newer releases
# do not, and pyspark 4.3 needs Java 17 or 21.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/flamepipe/src
COPY pyproject.toml README.md ./
COPY framework framework
COPY connectors connectors
COPY schemas schemas
ENV FLAMEPIPE_CACHE_DIR=/opt/flamepipe/cache
RUN pip install --no-cache-dir ".[rocksdb]" \
    && python -c "from framework.local.jars import jar_bundle; from pathlib import Path; \
jar_bundle('spark-kafka', Path('/opt/flamepipe/cache'))"

ENV PYSPARK_PYTHON=python3
ENTRYPOINT ["flamepipe"]
CMD ["--help"]
