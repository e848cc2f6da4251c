"""A continuous stage's input positions as records of its own transactions.

A continuous task commits whenever it has something to commit, up to ~50 transactions a
second. Committing its input position to a consumer group with each one
(``send_offsets_to_transaction``) takes two more requests per transaction (AddOffsetsToTxn
to the transaction coordinator, TxnOffsetCommit to the group's) and a commit marker in
``__consumer_offsets``: ~10 ms of every commit on a loaded two-core machine, against ~9 ms
for the rest of it (docs/latency.md, "Where the rest goes"). A record in a topic the
transaction writes anyway costs only its place in the produce batch.

So each commit of a continuous task writes one *position record* to the stage's positions
topic (``<prefix>.<stage>.positions``, compacted, `framework.wire.topics.Topics.positions`)
and commits it with the outputs it covers, all or nothing:

- key: the input partition, as decimal text; the record goes to partition
  ``partition % count`` of the positions topic (one each, unless the input grew);
- value: JSON ``[group, topic, partition, offset, text]``, ``text`` being the position's
  metadata (the task's counts) signed for the stage's consumer group (`signed_positions`):
  a position moves where a task resumes, so it is authenticated like any record.

Protocol of `read_positions` (a restarting task, the driver's counts and trimming):

1. For each positions partition, read its last ``window`` records with read_committed (a
   writer's open transaction is not read, an aborted one never is).
2. Keep each wanted key's latest record; if a wanted key has none and the window did not
   start at the partition's first offset, widen the window fourfold and read again.
3. Verify each kept record: that it names the input partition of its key, and its MAC for
   the group it names (`verified_metadata`; `ProtocolViolation` for one this pipeline did
   not write). One of another group (an earlier run of the stage, whose group was its
   own) is no position of this one, as that group's committed offsets would not be.

Example::

    >>> from framework.wire.auth import Keyring, install
    >>> install(Keyring((b"an example key of 32 bytes or more",)))
    >>> record = position_record(
    ...     "wc.group.positions", 2, group="g", source="wc.group", partition=3, offset=120, text=""
    ... )
    >>> record.topic, record.partition, record.key
    ('wc.group.positions', 1, b'3')
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from confluent_kafka import Consumer, TopicPartition

from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import ProtocolViolation
from framework.kafka.admin import partitions_if_exists
from framework.kafka.clients import (
    QUICK_END,
    close_quietly,
    is_eof,
    is_record,
    kafka_retry,
    new_consumer,
    signed_positions,
    verified_metadata,
)
from framework.wire.records import OutRecord

_log = logging.getLogger(__name__)

Position = tuple[int, str]
"""A committed position: the next offset to read and its verified metadata."""

# Step 1's first window: each commit adds a record and a commit marker, so a partition with
# one writer has its last record two offsets before the end.
_WINDOW = 64


def position_record(
    topic: str, count: int, *, group: str, source: str, partition: int, offset: int, text: str
) -> OutRecord:
    """The record that commits ``offset`` (and ``text``) for ``source[partition]`` of
    ``group`` in ``topic``, which has ``count`` partitions."""
    (signed,) = signed_positions(group, [TopicPartition(source, partition, offset, metadata=text)])
    value = json.dumps([group, source, partition, offset, signed.metadata]).encode()
    return OutRecord(topic, partition % count, str(partition).encode(), value)


def read_positions(
    bootstrap: str,
    topic: str,
    *,
    group: str,
    source: str,
    partitions: Iterable[int],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[int, Position]:
    """Steps 1-3: the committed position of each of ``partitions`` of ``source`` that has
    one (input partition -> position)."""
    wanted = set(partitions)
    count = partitions_if_exists(bootstrap, topic)
    if not count:
        return {}
    consumer = new_consumer(bootstrap, config=QUICK_END)
    try:
        deadline = Deadline(timeout_s, f"reading the positions in {topic}")
        found: dict[int, bytes] = {}
        for part in range(count):
            keys = {p for p in wanted if p % count == part}
            if keys:
                found.update(_latest(consumer, topic, part, keys, deadline))
    finally:
        close_quietly(consumer)
    # Step 3
    out: dict[int, Position] = {}
    for partition, value in found.items():
        position = _verified(value, group, source, partition, topic)
        if position is not None:
            out[partition] = position
    return out


def _latest(
    consumer: Consumer, topic: str, part: int, keys: set[int], deadline: Deadline
) -> dict[int, bytes]:
    """Steps 1-2 for one positions partition: each of ``keys``' latest committed value."""
    tp = TopicPartition(topic, part)
    low, high = kafka_retry(
        f"cannot read the offsets of {topic}[{part}]",
        lambda: consumer.get_watermark_offsets(tp, timeout=DEFAULT_TIMEOUT_S),
    )
    window = _WINDOW
    while True:
        start = max(low, high - window)
        latest = _read(consumer, topic, part, start, deadline)
        found = {k: v for k, v in latest.items() if k in keys}
        if len(found) == len(keys) or start <= low:
            return found
        window *= 4  # Step 2


def _read(
    consumer: Consumer, topic: str, part: int, start: int, deadline: Deadline
) -> dict[int, bytes]:
    """Each key's last committed value from ``start`` to the partition's end."""
    consumer.assign([TopicPartition(topic, part, start)])
    latest: dict[int, bytes] = {}
    while True:
        deadline.check()
        for msg in consumer.consume(1000, deadline.remaining(0.1)):
            if is_eof(msg):
                return latest
            if is_record(msg, topic):
                key, value = _key(msg.key()), msg.value()
                if key is not None and value is not None:
                    latest[key] = value


def _key(raw: bytes | None) -> int | None:
    try:
        return int((raw or b"").decode())
    except (UnicodeDecodeError, ValueError):
        return None  # no key a task writes: nothing this reader wants


def _verified(value: bytes, group: str, source: str, partition: int, topic: str) -> Position | None:
    """Step 3: the position ``value`` holds, None if signed for another group."""
    where = f"{topic}: the position of {source}[{partition}]"
    try:
        owner, named, part, offset, text = json.loads(value)
        tp = TopicPartition(str(named), int(part), int(offset), metadata=str(text))
    except (ValueError, TypeError) as exc:
        raise ProtocolViolation(f"{where} is no position record: {exc}") from exc
    if (tp.topic, tp.partition) != (source, partition):
        raise ProtocolViolation(f"{where} names {tp.topic}[{tp.partition}] instead")
    metadata = verified_metadata(str(owner), tp)  # ProtocolViolation unless ours
    if owner != group:
        _log.info("%s: the latest is another run's (group %r), not %r", where, owner, group)
        return None
    return tp.offset, metadata
