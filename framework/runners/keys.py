"""The pipeline's keyring, installed in a process before it writes or reads a record."""

from __future__ import annotations

from framework.config import Settings
from framework.config.secrets import pipeline_keys
from framework.wire.auth import Keyring, install

__all__ = ["install_keys"]


def install_keys(settings: Settings) -> Keyring:
    """Install the pipeline's keyring in this process (`framework.wire.auth`): every
    record it writes is signed, every one it reads verified, with these keys."""
    keyring = Keyring(pipeline_keys(settings))
    install(keyring)
    return keyring
