"""Kafka client properties from a file: what a secured cluster asks of every client.

``kafka_config_file`` (``FLAMEPIPE_KAFKA_CONFIG_FILE``) holds librdkafka properties, one
``name=value`` per line (``#`` comments), the format of Kafka's ``client.properties``::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.username=pipeline
    sasl.password=${file:/run/secrets/kafka-password}
    ssl.ca.location=/etc/flamepipe/ca.pem

A value ``${env:NAME}`` is the environment variable ``NAME``, ``${file:PATH}`` the
content of a file (trailing newline dropped), so the secret itself need not sit in the
properties file. ``bootstrap.servers`` belongs in ``bootstrap_servers``, and client ids,
transactional ids, isolation levels and the like are flamepipe's own: they are refused
here. Errors name the file and line, never a value.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from framework.errors import ConfigError

if TYPE_CHECKING:
    from framework.config.settings import Settings

_REFERENCE = re.compile(r"^\$\{(env|file):(.+)\}$")
_OWN = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "transactional.id",
        "isolation.level",
        "enable.idempotence",
        "enable.auto.commit",
    }
)


def kafka_properties(settings: Settings) -> dict[str, str]:
    """The properties of ``settings.kafka_config_file`` (none without one)."""
    path = settings.kafka_config_file
    if path is None:
        return {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ConfigError(f"kafka_config_file {path} does not exist: fix the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read kafka_config_file {path}: {type(exc).__name__}") from None
    properties: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        where = f"{path}, line {number}"
        if not sep or not name:
            raise ConfigError(f"{where}: write name=value (e.g. security.protocol=SASL_SSL)")
        if name in _OWN:
            raise ConfigError(
                f"{where}: {name} is set by flamepipe"
                + (" (use bootstrap_servers)" if name == "bootstrap.servers" else "")
            )
        properties[name] = _resolve(value, where)
    return properties


def _resolve(value: str, where: str) -> str:
    found = _REFERENCE.match(value)
    if found is None:
        return value
    kind, target = found.groups()
    if kind == "env":
        if target not in os.environ:
            raise ConfigError(f"{where}: environment variable {target} is not set")
        return os.environ[target]
    try:
        return Path(target).read_text().rstrip("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read {target}: {type(exc).__name__}") from None
