"""Seeding a new epoch's changelogs from a committed snapshot (recovery, replay).

A task of the new epoch builds its grouping state from its changelog partition, as in
any epoch; the seed makes that state the snapshot's. The caller bumps the epoch in
ZooKeeper only after `restore_epoch` returned, with the snapshot's offsets as the start.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException

from framework.core.graph import Graph, Kind
from framework.core.ops import key_hash
from framework.errors import (
    ConfigError,
    KafkaClientError,
    SnapshotMissing,
)
from framework.kafka.admin import ensure_topics, partition_count
from framework.kafka.clients import authentic_message, read_to_end
from framework.kafka.topics import changelog_topic_spec
from framework.kafka.transactions import TransactionalProducer
from framework.snapshots.backends.base import StateBackend
from framework.snapshots.units import (
    changelog_records,
    decode_unit,
    parse_unit,
    unit_label,
    unit_name,
)
from framework.wire.changelog import bucket_record, read_record
from framework.wire.records import OutRecord
from framework.wire.topics import Topics
from framework.wire.znodes import SnapshotRecord

__all__ = ["Restored", "restore_epoch"]

"""Changelog topic configs, as the Spark runner creates them (a bucket is one record)."""

_TIMEOUT_S = 60.0  # a seed may be large: one transaction of every bucket of the snapshot
_PRODUCER = {
    "linger.ms": 20,
    "message.max.bytes": 16 * 1024 * 1024,
    "queue.buffering.max.messages": 1_000_000,
    "transaction.timeout.ms": 300_000,
}


@dataclass(frozen=True, slots=True)
class Restored:
    """What `restore_epoch` wrote: changelog partitions, buckets, and stale keys deleted."""

    units: int
    buckets: int
    deleted: int


def restore_epoch(
    bootstrap: str,
    graph: Graph,
    record: SnapshotRecord,
    backend: StateBackend,
    new_epoch: int,
    *,
    units: int | None = None,
    empty: frozenset[str] = frozenset(),
) -> Restored:
    """Seed the changelogs of ``new_epoch`` with the state of snapshot ``record``.

    1. Check the record: a unit ``<node>/0 .. <node>/<n-1>`` for every grouping node but
       those in ``empty`` (new in an upgrade: they start empty, in ``units`` partitions),
       and, as each is read, the window of the node.
    2. Create each node's changelog in ``new_epoch`` with ``units`` partitions (None: the
       snapshot's ``n``; compacted, 16 MB records); an existing one must have exactly that.
    3. Start one transactional producer (its ``transactional.id`` names the app and
       epoch, so it aborts whatever an earlier, crashed attempt left open).
    4. Read every unit's snapshot from the backend and turn it into changelog records
       (`changelog_records`: the format stage tasks write), each bucket in the partition
       its key routes to among ``units`` (``key_hash(key) % units``, as stage tasks route
       items: a rescale moves keys between units). A key an earlier attempt committed and
       the snapshot lacks gets a deletion record.
    5. Write everything in one transaction: a crash before its commit leaves nothing
       visible, and running it again gives the same result.
    """
    if new_epoch <= record.epoch:
        raise ConfigError(f"new epoch {new_epoch} must be after the snapshot's {record.epoch}")
    if units is not None and units < 1:
        raise ConfigError(f"units={units} must be >= 1")
    if empty and units is None:
        raise ConfigError("groupings that start empty need units= (the parallelism)")
    topics = Topics(graph.name, new_epoch)
    # Step 1
    groups = graph.by_kind(Kind.GROUP)
    saved = {n.id: 0 if n.id in empty else _partitions(record, n.id) for n in groups}
    windows = {node.id: node.window for node in graph.by_kind(Kind.GROUP)}
    target = {node: units or count for node, count in saved.items()}
    # Step 2
    specs = [changelog_topic_spec(topics.state(n), count) for n, count in target.items()]
    ensure_topics(bootstrap, specs)
    for spec in specs:
        actual = partition_count(bootstrap, spec.name)
        if actual != spec.partitions:
            raise ConfigError(
                f"{spec.name} has {actual} partitions, the restore needs {spec.partitions}: "
                "delete the topic or restore into another epoch"
            )
    # Step 3
    txn = TransactionalProducer(
        bootstrap, f"{graph.name}.e{new_epoch}.restore", _PRODUCER, timeout_s=_TIMEOUT_S
    )
    txn.start()
    try:
        txn.begin()
        buckets = deleted = 0
        for node, count in saved.items():
            topic, into = topics.state(node), target[node]
            # Step 4
            stale = _committed_keys(bootstrap, topic, into)
            for p in range(count):
                unit = unit_name(node, p)
                state = decode_unit(
                    backend.get(unit, record.slot),
                    unit_label(graph.name, unit, record.slot),
                    f"snapshot {unit}@{record.slot}",
                )
                if state["window"] != windows[node]:
                    raise ConfigError(
                        f"snapshot {unit}@{record.slot} has window {state['window']}, the "
                        f"pipeline's {node} {windows[node]}: restore needs the same pipeline"
                    )
                for key, (kafka_key, value) in zip(
                    (b[0] for b in state["buckets"]), changelog_records(state), strict=True
                ):
                    q = p if into == count else key_hash(key) % into
                    txn.produce(OutRecord(topic, q, kafka_key, value))
                    stale[q].pop(kafka_key, None)
                    buckets += 1
            for q in range(into):
                for original in stale[q].values():
                    kafka_key, value = bucket_record(original, None)
                    txn.produce(OutRecord(topic, q, kafka_key, value))
                    deleted += 1
        # Step 5
        txn.commit()
    except (KafkaException, BufferError) as exc:
        txn.abort()
        raise KafkaClientError(f"restore: cannot seed epoch {new_epoch}: {exc!r}") from exc
    except BaseException:
        txn.abort()
        raise
    finally:
        txn.close()
    return Restored(sum(target.values()), buckets, deleted)


def _partitions(record: SnapshotRecord, node: str) -> int:
    units = record.units.get(node)
    if not units:
        raise SnapshotMissing(f"snapshot at slot {record.slot} has no units of grouping {node!r}")
    found = sorted(parse_unit(u)[1] for u in units if parse_unit(u)[0] == node)
    if found != list(range(len(units))):
        raise SnapshotMissing(
            f"snapshot at slot {record.slot}: units of {node!r} are {list(units)}, "
            f"not {node}/0..{node}/{len(units) - 1}"
        )
    return len(units)


def _committed_keys(bootstrap: str, topic: str, partitions: int) -> list[dict[bytes, object]]:
    """Per partition, the keys (bytes -> key) with a committed record in ``topic`` now."""
    keys: list[dict[bytes, object]] = [{} for _ in range(partitions)]
    for msg in read_to_end(bootstrap, topic, partitions):
        value = msg.value()
        if value is not None and authentic_message("snapshot restore", msg):
            _, key, _ = read_record(msg.key(), value)
            keys[msg.partition() or 0][bytes(msg.key() or b"")] = key
    return keys
