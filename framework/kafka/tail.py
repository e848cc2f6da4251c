"""The last bundle on an output topic: what a restarting barrier resumes from.

FlameStream's fault tolerance has the consumer hand the last bundle back to the barrier.

"The consumer returns the last bundle": here the output's bundle topic is the consumer's
memory (`framework.wire.bundles`). Every bundle writes a header on every partition of it
that its barrier instance owns, so the last committed header of a partition is its last
committed record; the search looks
further back past transaction markers and aborted records if need be.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Consumer, TopicPartition

from framework.core.messages import BundleHeader
from framework.deadline import DEFAULT_TIMEOUT_S, Deadline
from framework.errors import ConfigError, DeadlineExceeded
from framework.kafka.admin import partition_count
from framework.kafka.clients import (
    QUICK_END,
    authentic_message,
    close_quietly,
    is_eof,
    is_record,
    kafka_call,
    kafka_retry,
    new_consumer,
    where,
)
from framework.wire.bundles import bundles_topic, read_bundle_header

__all__ = ["last_bundle_header"]


def _read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int
) -> list[BundleHeader]:
    """The headers of the committed records of ``topic[partition]`` in ``[start, end)``."""
    kafka_call(
        f"cannot read {topic}", lambda: consumer.assign([TopicPartition(topic, partition, start)])
    )
    headers: list[BundleHeader] = []
    deadline = Deadline(DEFAULT_TIMEOUT_S)
    while not deadline.expired:
        for msg in consumer.consume(1000, 0.1):
            if is_eof(msg):
                return headers
            if not is_record(msg, topic):
                continue
            # A forged bundle header would set GT_last ahead and drop every later item.
            if authentic_message("output tail", msg):
                headers.append(read_bundle_header(msg.value()))
            if where(msg)[1] >= end - 1:
                return headers
    raise DeadlineExceeded(
        f"reading the tail of {topic}[{partition}] took over {DEFAULT_TIMEOUT_S} s"
    )


def _last_in_partition(consumer: Consumer, topic: str, partition: int) -> BundleHeader | None:
    tp = TopicPartition(topic, partition)
    low, end = kafka_retry(
        f"cannot read the offsets of {topic}",
        lambda: consumer.get_watermark_offsets(tp, timeout=DEFAULT_TIMEOUT_S, cached=False),
    )
    window = 64
    while True:  # the header is normally among the last records: look back further if not
        start = max(low, end - window)
        found = _read_range(consumer, topic, partition, start, end) if end > start else []
        header = found[-1] if found else None
        if header is not None or start == low:
            return header
        window *= 8


def last_bundle_header(
    bootstrap: str, topic: str, partitions: Sequence[int] | None = None, *, strict: bool = False
) -> BundleHeader | None:
    """The header of the last committed bundle of output ``topic`` (None: no bundle yet).

    Reads the tail of each partition of its bundle topic (``partitions`` only, if given:
    one barrier instance's) with read_committed and takes the highest ``seq``. An
    exactly-once barrier writes every partition it owns in one transaction per bundle, so
    their headers agree; ``strict``: `ConfigError` if they do not, which means other
    barrier instances wrote them (the sink's ``barriers`` changed), and resuming at the
    latest would drop the items of the partitions behind it. (At least once, a crash
    between two partitions' headers leaves them apart.)
    """
    control = bundles_topic(topic)
    consumer = new_consumer(bootstrap, config=QUICK_END)
    try:
        asked = range(partition_count(bootstrap, control)) if partitions is None else partitions
        found = {p: _last_in_partition(consumer, control, p) for p in asked}
    finally:
        close_quietly(consumer)
    headers = {p: header for p, header in found.items() if header is not None}
    marks = {(header.seq, header.gt_last) for header in headers.values()}
    if strict and len(marks) > 1:
        shown = ", ".join(f"[{p}] seq {h.seq}" for p, h in sorted(headers.items()))
        raise ConfigError(
            f"the last bundles of {control} differ ({shown}): other barrier instances wrote "
            "them; run the sink with the barriers count that wrote it"
        )
    return max(headers.values(), key=lambda header: header.seq) if headers else None
