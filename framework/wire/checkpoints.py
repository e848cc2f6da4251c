"""Acker checkpoints: a shard's state and the acks offset it reflects.

Topic ``<app>.acker`` (per epoch, compacted, one partition), key ``<shard>``, value a
pickle of ``(format, offset, ShardState)``: the state after applying every ack batch of
the shard's acks partition below ``offset``. Only flamepipe writes this topic, so pickle
(cheaper than a schema for nested maps of ints) is used, as on the other internal topics.
"""

from __future__ import annotations

import pickle

from framework.core.acker.sharded import ShardState
from framework.errors import DecodeError

_FORMAT = 1

Checkpoint = tuple[int, ShardState]
"""``(offset, state)``: replay the shard's acks partition from ``offset`` onto ``state``."""


def encode_checkpoint(offset: int, state: ShardState) -> bytes:
    """The value of a checkpoint record."""
    return pickle.dumps((_FORMAT, offset, state), protocol=pickle.HIGHEST_PROTOCOL)


def decode_checkpoint(value: bytes) -> Checkpoint:
    """``(offset, state)`` of a checkpoint record; `DecodeError` if it is not one."""
    try:
        version, offset, state = pickle.loads(value)
    except Exception as exc:  # a bad pickle raises almost anything
        raise DecodeError(f"not an acker checkpoint: {exc}") from exc
    if version != _FORMAT or not isinstance(state, ShardState) or not isinstance(offset, int):
        raise DecodeError(f"unknown acker checkpoint format {version!r}")
    return offset, state
