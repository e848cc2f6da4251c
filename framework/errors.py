"""The one exception hierarchy of flamepipe: catch `FlamepipeError` to catch them all.

Which to expect where: `ConfigError` before anything starts; `PipelineError` while a graph
is built or planned; `UserFunctionError` from a user function in fail-fast mode;
`EncodeError` / `DecodeError` at the byte formats; `KafkaClientError` and
`DeadlineExceeded` from the Kafka layer; `RegistryError` from a schema registry;
`CoordinationError` from ZooKeeper; `SinkError` from an external sink; `StateError`
from a state backend; `ServiceFailed` when a running service or stage stops on an error;
`ProtocolViolation` when an exactly-once invariant breaks (never retried).
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CoordinationError",
    "DeadlineExceeded",
    "DecodeError",
    "EncodeError",
    "Fenced",
    "FlamepipeError",
    "KafkaClientError",
    "KafkaUnreachable",
    "LoopUnsettled",
    "PipelineError",
    "ProtocolViolation",
    "RegistryError",
    "ServiceFailed",
    "SinkError",
    "SnapshotMissing",
    "StackError",
    "StateError",
    "Unauthenticated",
    "UserFunctionError",
    "ZooKeeperUnreachable",
]


class FlamepipeError(Exception):
    """Root of every error flamepipe raises on purpose."""


class ConfigError(FlamepipeError):
    """Configuration is missing or invalid; the message says what to change."""


class DecodeError(FlamepipeError):
    """Bytes could not be decoded into a flamepipe message (Avro, header, key)."""


class Unauthenticated(DecodeError):  # noqa: N818 - a state of a record, like DecodeError
    """A record without a valid ``fp.mac`` (`framework.wire.auth`): it is never decoded."""


class PipelineError(FlamepipeError):
    """A pipeline graph is malformed or used wrongly (its nodes, endpoints or windows)."""


class UserFunctionError(FlamepipeError):
    """A user function (map, key, reduce, ...) raised, in fail-fast mode; the cause is chained."""


class LoopUnsettled(UserFunctionError):  # noqa: N818 - a state of an item, like the others
    """An item would go round its loop more than the loop's ``max_rounds``: it goes to the
    dead letters with this reason (or fails a fail-fast run) instead of going round."""


class EncodeError(FlamepipeError):
    """A value could not be encoded into bytes (a payload the serde cannot write, a field
    out of its wire range)."""


class KafkaClientError(FlamepipeError):
    """A Kafka client call failed in a way that does not pass by itself (broker, topic,
    transaction); the message names what was being done."""


class KafkaUnreachable(KafkaClientError):  # noqa: N818 - a state of the world, not a bug
    """No bootstrap server of Kafka accepted a connection: a broker down or restarting (a
    running pipeline waits for it and starts again), or a wrong address (the message says
    which setting names it)."""


class RegistryError(FlamepipeError):
    """A schema registry could not be reached, or refused a request that does not depend on
    one record (a schema it will not register): nothing is decoded or dead-lettered, the
    task fails and is retried."""


class DeadlineExceeded(FlamepipeError):  # noqa: N818 - a state of the world, like TimeoutError
    """Something flamepipe waits for did not happen within its time (`framework.deadline`)."""


class ServiceFailed(FlamepipeError):  # noqa: N818 - reports a failure, not a caller mistake
    """A service or stage of a running pipeline failed; the message names which and why."""


class ProtocolViolation(FlamepipeError):  # noqa: N818 - a violation, not an error of the caller
    """An exactly-once invariant was broken (bundle gap, duplicate, time going backwards)."""


class SinkError(FlamepipeError):
    """An external sink (a database, files) refused what a committed bundle holds; the
    bundle was not applied, so a restart after the fix loses nothing."""


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
