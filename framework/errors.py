"""The one exception hierarchy of flamepipe: catch `FlamepipeError` to catch them all."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CoordinationError",
    "DecodeError",
    "Fenced",
    "FlamepipeError",
    "PipelineError",
    "ProtocolViolation",
    "SnapshotMissing",
    "StackError",
    "StateError",
    "ZooKeeperUnreachable",
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


class StateError(FlamepipeError):
    """A state backend could not save or load a snapshot (disk, database, lock)."""


class SnapshotMissing(StateError):  # noqa: N818 - a missing snapshot, named like KeyError
    """No snapshot is stored for the asked (unit, slot)."""


class CoordinationError(FlamepipeError):
    """ZooKeeper coordination failed: unreachable, unexpected data, or session lost."""


class ZooKeeperUnreachable(CoordinationError):  # noqa: N818 - a state of the world, not a bug
    """No ZooKeeper answered at the configured address within the timeout."""


class Fenced(CoordinationError):  # noqa: N818 - the caller was fenced off, not mistaken
    """A newer leader or committer took over: this one must stop its work."""
