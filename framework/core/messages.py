"""Messages of the tracker (the tracker paper) and of the barrier (FlameStream fault tolerance).

Plain frozen dataclasses: the acker's hot paths take bare ints and strings, these types
are for the boundaries (Kafka topics, ZooKeeper, subscribers) and for `framework.wire.avro`.

Ack values and traces are unsigned 64-bit ints (``0 <= v < 2**64``); slots, fronts,
offsets and node times are signed 64-bit (Avro ``long``).
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.core.time import GlobalTime


@dataclass(frozen=True, slots=True)
class Ack:
    """XOR ``value`` into the checksum of ``slot`` in ``segment``."""

    segment: str
    slot: int
    value: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Front ``front`` promises no more items with a slot below ``slot``."""

    front: int
    slot: int


@dataclass(frozen=True, slots=True)
class NodeTime:
    """Worker ``node`` has sent every ack of its first ``time`` batches (the tracker paper)."""

    node: int
    time: int


AckerInput = Ack | Heartbeat | NodeTime
"""What a worker or front sends to the acker (or to every shard of it)."""


@dataclass(frozen=True, slots=True)
class MinTimeNotification:
    """No item with a slot below ``slot`` is in flight in ``segment`` (None: anywhere).

    ``node_times`` is the sending shard's vector clock, sorted by node (empty for the
    single acker); ``snapshot`` asks groupings and the barrier to snapshot at ``slot``.
    """

    segment: str | None
    slot: int
    node_times: tuple[NodeTime, ...] = ()
    snapshot: bool = False
    shard: int = 0


@dataclass(frozen=True, slots=True)
class BundleHeader:
    """Header of an output bundle: sequence number, GT_last, size (FlameStream fault tolerance)."""

    seq: int
    gt_last: GlobalTime
    item_count: int
