"""What a process of a pipeline installs before it writes or reads a record: the keyring
that signs and verifies records, and the Kafka client properties of a secured cluster."""

from __future__ import annotations

import logging

from framework.config import Settings
from framework.config.kafka_properties import kafka_properties
from framework.config.secrets import pipeline_keys
from framework.kafka import security
from framework.wire.auth import Keyring, install

_log = logging.getLogger(__name__)


def install_keys(settings: Settings) -> Keyring:
    """Install the pipeline's keyring (`framework.wire.auth`) and Kafka client properties
    (`framework.kafka.security`) in this process; returns the keyring."""
    keyring = Keyring(pipeline_keys(settings))
    install(keyring)
    properties = kafka_properties(settings)
    if properties != security.installed():
        _log.info("Kafka client properties: %s", security.redacted(properties))
    security.install(properties)
    return keyring
