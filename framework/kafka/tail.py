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

from confluent_kafka import Consumer, Message

from framework.core.messages import BundleHeader
from framework.errors import ConfigError
from framework.kafka.admin import partition_count
from framework.kafka.clients import (
    QUICK_END,
    authentic_message,
    close_quietly,
    new_consumer,
    read_back,
)
from framework.wire.bundles import bundles_topic, read_bundle_header


class _Headers:
    """`read_back`'s ``enough``: whether the records hold a bundle header, keeping them."""

    def __init__(self) -> None:
        self.found: list[BundleHeader] = []

    def __call__(self, records: list[Message]) -> bool:
        # A forged bundle header would set GT_last ahead and drop every later item.
        self.found = [
            read_bundle_header(msg.value())
            for msg in records
            if authentic_message("output tail", msg)
        ]
        return bool(self.found)


def _last_in_partition(consumer: Consumer, topic: str, partition: int) -> BundleHeader | None:
    # The header is normally among the last records: `read_back` looks further if not.
    headers = _Headers()
    read_back(consumer, topic, partition, headers)
    return headers.found[-1] if headers.found else None


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
