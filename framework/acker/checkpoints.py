"""Acker checkpoints: a shard's state and the acks offset it reflects, on a compacted topic.

Topic ``<app>.acker`` (per epoch, compacted, one partition), key ``<shard>``, value a
pickle of ``(format, offset, ShardState)``: the state after applying every ack batch of
the shard's acks partition below ``offset``. Only flamepipe writes this topic, so pickle
(cheaper than a schema for nested maps of ints) is safe here, as on the other internal
topics. A checkpoint that cannot be read is skipped with a warning: the acker then
replays its partition from the start, which is always correct, only slower.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterable

from confluent_kafka import Message

from framework.core.acker.sharded import ShardState
from framework.kafka.admin import TopicSpec, compacted_spec
from framework.wire.topics import Topics

__all__ = ["Checkpoint", "acker_state_spec", "decode_checkpoint", "encode_checkpoint", "latest"]

_log = logging.getLogger(__name__)

_FORMAT = 1

Checkpoint = tuple[int, ShardState]
"""``(offset, state)``: replay the shard's acks partition from ``offset`` onto ``state``."""


def acker_state_spec(app: str, epoch: int = 0) -> TopicSpec:
    """``<app>.acker``: compacted by shard."""
    return compacted_spec(Topics(app, epoch).acker, 1)


def encode_checkpoint(offset: int, state: ShardState) -> bytes:
    """The value of a checkpoint record."""
    return pickle.dumps((_FORMAT, offset, state), protocol=pickle.HIGHEST_PROTOCOL)


def decode_checkpoint(value: bytes) -> Checkpoint:
    """``(offset, state)`` of a checkpoint record; `ValueError` if it is not one."""
    try:
        version, offset, state = pickle.loads(value)
    except Exception as exc:
        raise ValueError(f"not an acker checkpoint: {exc}") from exc
    if version != _FORMAT or not isinstance(state, ShardState) or not isinstance(offset, int):
        raise ValueError(f"unknown acker checkpoint format {version!r}")
    return offset, state


def latest(records: Iterable[Message], shards: Iterable[int]) -> dict[int, Checkpoint]:
    """The last readable checkpoint of each of ``shards`` among ``records`` (oldest first)."""
    wanted = {str(shard).encode(): shard for shard in shards}
    found: dict[int, Checkpoint] = {}
    for msg in records:
        shard = wanted.get(msg.key() or b"")
        value = msg.value()
        if shard is None or value is None:
            continue
        try:
            found[shard] = decode_checkpoint(value)
        except ValueError as exc:
            at = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
            _log.warning("acker: skipping checkpoint %s: %s", at, exc)
    return found
