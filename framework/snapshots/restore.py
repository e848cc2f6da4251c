"""Seeding a new epoch's changelogs from a committed snapshot (recovery, replay).

A task of the new epoch builds its grouping or aggregate state from its changelog
partition, as in any epoch; the seed makes that state the snapshot's. The caller bumps the epoch in
ZooKeeper only after `restore_epoch` returned, with the snapshot's offsets as the start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from framework.core.graph import BUCKETED, KEYED_STATE, Graph, Kind, Node
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
    aggregate_records,
    decode_unit,
    keyed_records,
    parse_unit,
    state_shape,
    unit_label,
    unit_name,
)
from framework.wire.changelog import BUCKET, bucket_record, read_record
from framework.wire.records import OutRecord
from framework.wire.topics import Topics
from framework.wire.znodes import SnapshotRecord

_TIMEOUT_S = 60.0  # a seed may be large: one transaction of every bucket of the snapshot
_PRODUCER = {
    "linger.ms": 20,
    "message.max.bytes": 16 * 1024 * 1024,
    "queue.buffering.max.messages": 1_000_000,
    "transaction.timeout.ms": 300_000,
}


@dataclass(frozen=True, slots=True)
class Restored:
    """What `restore_epoch` wrote: changelog partitions, records (an aggregate's buckets, a
    grouping's items), and stale records deleted."""

    units: int
    records: int
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

    1. Check the record: a unit ``<node>/0 .. <node>/<n-1>`` for every grouping and
       aggregate node but those in ``empty`` (new in an upgrade: they start empty, in
       ``units`` partitions), and, as each is read, the grouping's window or the
       aggregate's shape (`aggregate_shape`).
    2. Create each node's changelog in ``new_epoch`` with ``units`` partitions (None: the
       snapshot's ``n``; compacted, 16 MB records); an existing one must have exactly that.
    3. Start one transactional producer (its ``transactional.id`` names the app and
       epoch, so it aborts whatever an earlier, crashed attempt left open).
    4. Read every unit's snapshot from the backend and turn it into changelog records
       (the format stage tasks write), each bucket in the partition its key routes to
       among ``units`` (``key_hash(key) % units``, as stage tasks route items: a rescale
       moves keys between units). An aggregate's partitions first get the snapshot's slot
       as their floor and its unit's min time (rescaled: the least of its units'). A key
       an earlier attempt committed and the snapshot lacks gets a deletion record.
    5. Write everything in one transaction: a crash before its commit leaves nothing
       visible, and running it again gives the same result.
    """
    if new_epoch <= record.epoch:
        raise ConfigError(f"new epoch {new_epoch} must be after the snapshot's {record.epoch}")
    if units is not None and units < 1:
        raise ConfigError(f"units={units} must be >= 1")
    if empty and units is None:
        raise ConfigError("stateful operators that start empty need units= (the parallelism)")
    topics = Topics(graph.name, new_epoch)
    # Step 1
    nodes = {n.id: n for n in graph.nodes if n.kind in KEYED_STATE}
    saved = {n: 0 if n in empty else _partitions(record, n) for n in nodes}
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
        written = deleted = 0
        for node_id, count in saved.items():
            # Step 4
            seed = _Seed(
                bootstrap,
                graph,
                record,
                backend,
                topic=topics.state(node_id),
                into=target[node_id],
                grouping=nodes[node_id].kind is Kind.GROUP,
            )
            written += seed.write(txn, nodes[node_id], count)
            deleted += seed.delete_stale(txn)
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
    return Restored(sum(target.values()), written, deleted)


class _Seed:
    """Step 4 for one node: its units' records in the new epoch's changelog ``topic``."""

    def __init__(
        self,
        bootstrap: str,
        graph: Graph,
        record: SnapshotRecord,
        backend: StateBackend,
        *,
        topic: str,
        into: int,
        grouping: bool,
    ) -> None:
        self.graph, self.record, self.backend = graph, record, backend
        self.topic, self.into = topic, into
        self.stale = _committed_keys(bootstrap, topic, into, grouping=grouping)

    def write(self, txn: TransactionalProducer, node: Node, count: int) -> int:
        """Produce the records of the node's ``count`` units; how many."""
        states = [self._unit(node, p) for p in range(count)]
        if node.kind in BUCKETED and states:
            self._aggregate_heads(txn, [int(s["min_time"]) for s in states])
        written = 0
        for p, state in enumerate(states):
            for key, (kafka_key, value) in keyed_records(state, aggregate=node.kind in BUCKETED):
                q = p if self.into == count else key_hash(key) % self.into
                txn.produce(OutRecord(self.topic, q, kafka_key, value))
                self.stale[q].pop(kafka_key, None)
                written += 1
        return written

    def _aggregate_heads(self, txn: TransactionalProducer, min_times: list[int]) -> None:
        """Every partition's floor (the snapshot's slot) and min time: its unit's, or,
        when keys move between units, the least (a window re-emitted below the floor is
        not emitted again, `WindowAggregator.put_floor`)."""
        for q in range(self.into):
            min_time = min_times[q] if len(min_times) == self.into else min(min_times)
            for kafka_key, value in aggregate_records([], min_time, self.record.slot):
                txn.produce(OutRecord(self.topic, q, kafka_key, value))

    def _unit(self, node: Node, p: int) -> dict[str, Any]:
        unit, slot = unit_name(node.id, p), self.record.slot
        where = f"snapshot {unit}@{slot}"
        state = decode_unit(
            self.backend.get(unit, slot), unit_label(self.graph.name, unit, slot), where
        )
        shape = state_shape(node, self.graph.delta_ms)
        if shape is not None:
            if state.get("aggregate") != shape:
                raise ConfigError(
                    f"{where} is of a {state.get('aggregate', 'grouping')!r}, the pipeline's "
                    f"{node.kind} {node.id} {shape!r}: restore needs the same pipeline"
                )
        elif state.get("window") != node.window:
            raise ConfigError(
                f"{where} has window {state.get('window', 'none (an aggregate)')}, the "
                f"pipeline's {node.id} {node.window}: restore needs the same pipeline"
            )
        return state

    def delete_stale(self, txn: TransactionalProducer) -> int:
        """Deletion records of the keys an earlier attempt committed that the snapshot lacks."""
        deleted = 0
        for q in range(self.into):
            for kafka_key, value in self.stale[q].values():
                txn.produce(OutRecord(self.topic, q, kafka_key, value))
                deleted += 1
        return deleted


def _partitions(record: SnapshotRecord, node: str) -> int:
    units = record.units.get(node)
    if not units:
        raise SnapshotMissing(f"snapshot at slot {record.slot} has no units of {node!r}")
    found = sorted(parse_unit(u)[1] for u in units if parse_unit(u)[0] == node)
    if found != list(range(len(units))):
        raise SnapshotMissing(
            f"snapshot at slot {record.slot}: units of {node!r} are {list(units)}, "
            f"not {node}/0..{node}/{len(units) - 1}"
        )
    return len(units)


def _committed_keys(
    bootstrap: str, topic: str, partitions: int, *, grouping: bool
) -> list[dict[bytes, tuple[bytes, bytes | None]]]:
    """Per partition, the Kafka keys with a committed record in ``topic`` now, each with
    the record that deletes it: a grouping's, whatever they hold, a Kafka tombstone (its
    records are items; anything else goes, compacted away in time, and nothing is
    decoded); an aggregate's bucket, its record of None."""
    keys: list[dict[bytes, tuple[bytes, bytes | None]]] = [{} for _ in range(partitions)]
    for msg in read_to_end(bootstrap, topic, partitions):
        kafka_key, value = bytes(msg.key() or b""), msg.value()
        if not authentic_message("snapshot restore", msg):
            continue
        found = keys[msg.partition() or 0]
        if value is None:
            found.pop(kafka_key, None)  # already deleted
        elif grouping:
            found[kafka_key] = (kafka_key, None)
        else:
            kind, key, _ = read_record(kafka_key, value)
            if kind == BUCKET:
                found[kafka_key] = bucket_record(key, None)
    return keys
