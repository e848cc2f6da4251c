"""Client properties every Kafka client of flamepipe gets: security, and nothing else.

A secured cluster needs the same properties (``security.protocol``, SASL and SSL settings)
on every client: the driver's, the stage tasks' on executors, the acker's, the barrier's,
the command line's and Spark's own Kafka source. They are read once from settings
(`framework.config.kafka_properties`), installed per process (`install`), and merged by the
one client factory (`framework.kafka.clients`, `admin`, `transactions`, `changelog`);
flamepipe's own settings for a client (isolation level, transactional id...) win over
them. Spark's source is a Java client: `spark_options` translates librdkafka's names.
Values are never logged (`redacted`). Every client also gets flamepipe's client logger
(`framework.logs.CLIENT_LOGGER`), so librdkafka's lines go through Python logging (to the
log file; to the console only when verbose) instead of straight to stderr.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from framework.logs import CLIENT_LOGGER

_properties: dict[str, str] = {}
_SECRET_WORDS = ("password", "secret", "key", "jaas", "token")
_CLIENT_LOG = logging.getLogger(CLIENT_LOGGER)


def install(properties: Mapping[str, str]) -> None:
    """Make ``properties`` the ones every client of this process gets."""
    _properties.clear()
    _properties.update(properties)


def installed() -> dict[str, str]:
    """A copy of this process's client properties."""
    return dict(_properties)


def secured(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the installed properties and the client logger under it (``config``
    wins)."""
    return {"logger": _CLIENT_LOG, **_properties, **config}


def redacted(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with every value that may be a secret replaced by ``***``."""
    return {
        k: "***" if any(word in k.lower() for word in _SECRET_WORDS) else v
        for k, v in properties.items()
    }


def _jaas(mechanism: str, username: str, password: str) -> str:
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    quoted = password.replace("\\", "\\\\").replace('"', '\\"')
    return f'{module} required username="{username}" password="{quoted}";'


def spark_options(properties: Mapping[str, str] | None = None) -> dict[str, str]:
    """The installed properties as options of Spark's Kafka source (``kafka.`` prefix, Java
    client names): SASL user and password become a JAAS line, a CA file a PEM truststore."""
    props = dict(_properties if properties is None else properties)
    out: dict[str, str] = {}
    mechanism = props.pop("sasl.mechanisms", props.pop("sasl.mechanism", None))
    username, password = props.pop("sasl.username", None), props.pop("sasl.password", None)
    if mechanism is not None:
        out["sasl.mechanism"] = mechanism
        if username is not None and password is not None:
            out["sasl.jaas.config"] = _jaas(mechanism, username, password)
    ca = props.pop("ssl.ca.location", None)
    if ca is not None:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    for name in ("security.protocol", "ssl.endpoint.identification.algorithm"):
        if name in props:
            out[name] = props.pop(name)
    # Other librdkafka names rarely mean the same in Java: pass only those that exist there.
    for name, value in props.items():
        if name.startswith(("sasl.", "ssl.")) and name not in _LIBRDKAFKA_ONLY:
            out[name] = value
    return {f"kafka.{k}": v for k, v in out.items()}


_LIBRDKAFKA_ONLY = frozenset(
    {"ssl.certificate.location", "ssl.key.location", "ssl.key.password", "ssl.ca.pem"}
)
