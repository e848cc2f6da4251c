"""Where a restarted acker resumes: the last readable checkpoint of each shard.

Format: `framework.wire.checkpoints`. A checkpoint that cannot be read is skipped with a
warning: the acker then replays its partition from the start, which is always correct,
only slower.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import Message

from framework.errors import DecodeError
from framework.kafka.clients import authentic_message
from framework.wire.checkpoints import Checkpoint, decode_checkpoint

_log = logging.getLogger(__name__)


def latest(records: Iterable[Message], shards: Iterable[int]) -> dict[int, Checkpoint]:
    """The last readable checkpoint of each of ``shards`` among ``records`` (oldest first)."""
    wanted = {str(shard).encode(): shard for shard in shards}
    found: dict[int, Checkpoint] = {}
    for msg in records:
        shard = wanted.get(msg.key() or b"")
        value = msg.value()
        if shard is None or value is None or not authentic_message("acker checkpoints", msg):
            continue
        try:
            found[shard] = decode_checkpoint(value)
        except DecodeError as exc:
            at = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
            _log.warning("acker: skipping checkpoint %s: %s", at, exc)
    return found
