"""The one exception hierarchy of flamepipe: catch `FlamepipeError` to catch them all."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DecodeError",
    "FlamepipeError",
    "PipelineError",
    "ProtocolViolation",
    "StackError",
]


class FlamepipeError(Exception):
    """Root of every error flamepipe raises on purpose."""


class ConfigError(FlamepipeError):
    """Configuration is missing or invalid; the message says what to change."""


class DecodeError(FlamepipeError):
    """Bytes could not be decoded into a flamepipe message (Avro, header, key)."""


class PipelineError(FlamepipeError):
    """A pipeline graph is malformed, or a user function failed in fail-fast mode."""


class ProtocolViolation(FlamepipeError):  # noqa: N818 - a violation, not an error of the caller
    """An exactly-once invariant was broken (bundle gap, duplicate, time going backwards)."""


class StackError(FlamepipeError):
    """The embedded local stack (Kafka, ZooKeeper, Spark jars) could not be started or used."""
