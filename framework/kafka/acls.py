"""The Kafka ACLs a pipeline needs, and nothing more (docs/security.md, "Kafka ACLs").

With the broker's authorizer on, the principal a pipeline runs as needs:

* topic, prefix ``<app>.``: ALL (its internal topics: shuffles, acks, changelogs, dead
  letters..., made by itself);
* each source topic: READ, DESCRIBE, DESCRIBE_CONFIGS;
* each sink topic and its bundle topic (``<sink>.bundles``): WRITE, READ, DESCRIBE,
  DESCRIBE_CONFIGS, CREATE (the barrier reads its last bundle header back at start);
* groups, prefixes ``<app>.`` (task commit markers, barrier positions), ``flamepipe-``
  (readers that never commit: acker, changelogs) and ``spark-kafka-source-`` (Spark's
  Kafka source): READ;
* transactional ids, prefix ``<app>.`` (task, barrier and restore transactions): WRITE,
  DESCRIBE;
* the cluster: IDEMPOTENT_WRITE (idempotent producers on brokers older than 2.8).

Everyone else needs nothing of the pipeline; consumers of the output need READ on the sink
(and on its bundle topic to verify bundles) and on their own group.
`flamepipe acls jobs:p --principal User:NAME` prints the ``kafka-acls.sh`` commands (or,
with ``--apply``, creates them as the caller).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# Public in confluent_kafka.admin, whose __init__ does not re-export them for type checkers.
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from framework.errors import KafkaClientError
from framework.kafka.admin import admin_client
from framework.wire.bundles import bundles_topic

_TOPIC, _GROUP, _TXN, _CLUSTER = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.BROKER,
)
_PREFIXED, _LITERAL = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
_O = AclOperation


def _allow(
    principal: str,
    kind: ResourceType,
    name: str,
    pattern: ResourcePatternType,
    operations: Iterable[AclOperation],
) -> list[AclBinding]:
    return [
        AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)
        for op in operations
    ]


def pipeline_acls(
    app: str, principal: str, sources: Sequence[str], sinks: Sequence[str]
) -> list[AclBinding]:
    """The ACL bindings of the module docstring's table for ``principal``."""
    bindings = _allow(principal, _TOPIC, f"{app}.", _PREFIXED, [_O.ALL])
    for topic in sources:
        bindings += _allow(
            principal, _TOPIC, topic, _LITERAL, [_O.READ, _O.DESCRIBE, _O.DESCRIBE_CONFIGS]
        )
    for topic in sinks:
        ops = [_O.WRITE, _O.READ, _O.DESCRIBE, _O.DESCRIBE_CONFIGS, _O.CREATE]
        bindings += _allow(principal, _TOPIC, topic, _LITERAL, ops)
        bindings += _allow(principal, _TOPIC, bundles_topic(topic), _LITERAL, ops)
    for prefix in (f"{app}.", "flamepipe-", "spark-kafka-source-"):
        bindings += _allow(principal, _GROUP, prefix, _PREFIXED, [_O.READ])
    bindings += _allow(principal, _TXN, f"{app}.", _PREFIXED, [_O.WRITE, _O.DESCRIBE])
    bindings += _allow(principal, _CLUSTER, "kafka-cluster", _LITERAL, [_O.IDEMPOTENT_WRITE])
    return bindings


def acl_commands(bindings: Iterable[AclBinding], bootstrap: str) -> list[str]:
    """The ``kafka-acls.sh`` command line of each binding (the recipe, for people)."""
    flags = {
        _TOPIC: "--topic",
        _GROUP: "--group",
        _TXN: "--transactional-id",
        _CLUSTER: "--cluster",
    }
    lines = []
    for b in bindings:
        kind = ResourceType(b.restype)
        target = flags[kind] + ("" if kind == _CLUSTER else f" '{b.name}'")
        prefixed = b.resource_pattern_type == _PREFIXED
        pattern = " --resource-pattern-type prefixed" if prefixed else ""
        name = AclOperation(b.operation).name  # IDEMPOTENT_WRITE -> IdempotentWrite
        operation = "".join(word.title() for word in name.split("_"))
        lines.append(
            f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal "
            f"'{b.principal}' --operation {operation} {target}{pattern}"
        )
    return lines


def grant(bootstrap: str, bindings: Sequence[AclBinding], timeout_s: float = 30.0) -> None:
    """Create ``bindings`` on the cluster (the caller needs ALTER on the cluster)."""
    futures = admin_client(bootstrap).create_acls(list(bindings), request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result(timeout_s)
        except Exception as exc:  # KafkaException; the message says which ACL and why
            raise KafkaClientError(f"cannot create the ACL {binding}: {exc}") from exc
