"""Ack batches on ``<app>.acks``: what a sender's acks look like to the acker's shards.

A sender's batch is one ``AckBatch`` record (``schemas/ack_batch.avsc``) per acker shard,
on that shard's partition. It decodes to exactly what `AckerShard.receive` takes, in order:
acks, heartbeats, then the ``NodeTime`` that closes the batch. Every shard gets a record of
every batch, empty or not: a shard must see every node time of a sender (the tracker
paper's node-time vector), else it could not tell a slow sender from a silent one.
"""

from __future__ import annotations

from collections.abc import Iterable

from framework.core.acker.sharded import shard_of
from framework.core.messages import Ack, Heartbeat
from framework.wire.avro import encode_ack_batch


def shard_batches(
    node: int,
    node_time: int,
    acks: Iterable[Ack],
    shards: int,
    heartbeats: Iterable[Heartbeat] = (),
) -> list[tuple[int, bytes]]:
    """``(shard, AckBatch bytes)`` for every shard: each ack goes to the shard of its slot,
    every heartbeat to every shard, all closed by ``NodeTime(node, node_time)``."""
    by_shard: dict[int, list[Ack]] = {shard: [] for shard in range(shards)}
    for ack in acks:
        by_shard[shard_of(ack.slot, shards)].append(ack)
    beats = list(heartbeats)
    return [
        (shard, encode_ack_batch(node, node_time, batch, beats))
        for shard, batch in by_shard.items()
    ]
