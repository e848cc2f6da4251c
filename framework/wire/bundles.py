"""The output topic of a sink: bundles written by the barrier, verified by consumers.

Wire format (FlameStream fault tolerance: output bundles). A bundle is written in one
Kafka transaction; on every partition of the output topic it is:

* the bundle's items routed to that partition, in no particular order (the exactly-once
  barrier writes items into the bundle's transaction as they arrive, ahead of their
  release; `connectors.BundleConsumer` hands a bundle out in meta order): key and value
  from the `KafkaSink` (its key function and value serde), header ``fp.meta`` = Avro
  ``Meta``;
* then one header record: no key, no value, header ``fp.bundle`` = Avro
  ``BundleHeader(seq, gt_last, item_count)`` where ``item_count`` counts the items of that
  partition.

Every partition gets a header for every bundle (possibly with ``item_count`` 0), so each
partition is a complete bundle sequence of its own: ``seq`` consecutive, ``gt_last``
strictly increasing, every item after the previous ``gt_last`` and at or before its own.
A keyed item goes to ``crc32(key) % partitions`` (librdkafka's consistent partitioner), an
unkeyed one to ``gt.front % partitions``: both deterministic, so a replay writes the same
bytes to the same partitions. A bundle's order is no contract: its items become visible
together, and its header is the unit a reader acknowledges.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence

from framework.core.barrier import Bundle
from framework.core.messages import BundleHeader
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import DecodeError, ProtocolViolation
from framework.wire.avro import decode_bundle_header, decode_meta, encode_bundle_header, encode_meta
from framework.wire.records import OutRecord

__all__ = [
    "BUNDLE_HEADER",
    "META_HEADER",
    "BundleVerifier",
    "Headers",
    "bundle_records",
    "header_records",
    "header_value",
    "item_record",
    "last_header",
    "output_partition",
    "read_bundle_header",
    "read_meta",
]

META_HEADER = "fp.meta"
"""Header of an output item: its Avro ``Meta``."""
BUNDLE_HEADER = "fp.bundle"
"""Header of the record that closes a bundle on a partition: Avro ``BundleHeader``."""

_new = tuple.__new__  # an OutRecord without the Python-level NamedTuple __new__ call

Headers = Mapping[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]]
"""Record headers as confluent_kafka returns them."""


def output_partition(key: bytes | None, meta: Meta, partitions: int) -> int:
    """The output partition of an item (see the module docstring)."""
    if key is not None:
        return zlib.crc32(key) % partitions
    return meta.gt.front % partitions


def item_record(record: Record, topic: str, partitions: int) -> tuple[int, OutRecord]:
    """The output partition and record of a released item (see the module docstring).

    Every payload is already an output record, ``(key, value)`` bytes (the last stage
    encoded it with `KafkaSink.encode`); anything else is a `ProtocolViolation`.
    """
    meta = record.meta
    payload = record.value
    if type(payload) is not tuple or len(payload) != 2 or type(payload[1]) is not bytes:
        raise ProtocolViolation(
            f"pre-barrier item at {meta.gt} is {type(payload).__name__}, not the (key, "
            "value) bytes of an output record: the stage that wrote it runs an older "
            "flamepipe; run one version for the stages and the barrier"
        )
    key, value = payload
    partition = output_partition(key, meta, partitions)
    headers = ((META_HEADER, encode_meta(meta)),)
    return partition, _new(OutRecord, (topic, partition, key, value, headers))


def header_records(
    seq: int, gt_last: GlobalTime, counts: Sequence[int], topic: str
) -> list[OutRecord]:
    """The records that close bundle ``seq``: one per partition, ``counts`` its items."""
    records = []
    for partition, count in enumerate(counts):
        header = BundleHeader(seq, gt_last, count)
        headers = ((BUNDLE_HEADER, encode_bundle_header(header)),)
        records.append(OutRecord(topic, partition, None, None, headers))
    return records


def bundle_records(bundle: Bundle, topic: str, partitions: int) -> list[OutRecord]:
    """The records of ``bundle`` on ``topic``: items (`item_record`), then the headers."""
    counts = [0] * partitions
    records: list[OutRecord] = []
    for record in bundle.records:
        partition, out = item_record(record, topic, partitions)
        counts[partition] += 1
        records.append(out)
    records.extend(header_records(bundle.seq, bundle.gt_last, counts, topic))
    return records


def header_value(headers: Headers | None, name: str) -> bytes | None:
    """The value of the first header ``name``, None if absent."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for key, value in pairs:
        if key == name:
            return value.encode() if isinstance(value, str) else value or b""
    return None


def read_bundle_header(headers: Headers | None) -> BundleHeader | None:
    """The bundle header of a record, None if it is an item (`DecodeError` if garbled)."""
    raw = header_value(headers, BUNDLE_HEADER)
    return None if raw is None else decode_bundle_header(raw)


def read_meta(headers: Headers | None) -> Meta | None:
    """The meta of an output item, None if it has none (`DecodeError` if garbled)."""
    raw = header_value(headers, META_HEADER)
    return None if raw is None else decode_meta(raw)


def last_header(records: Iterable[Headers | None]) -> BundleHeader | None:
    """The last bundle header among the headers of ``records`` (oldest first)."""
    last: BundleHeader | None = None
    for headers in records:
        header = read_bundle_header(headers)
        if header is not None:
            last = header
    return last


class BundleVerifier:
    """Checks one partition's records against the bundle rules, one record at a time.

    Rules: bundle ``seq`` is consecutive; ``gt_last`` strictly increases; every item has a
    meta, is no tombstone, comes after the previous ``gt_last`` and at or before its own
    bundle's; ``item_count`` is the number of items. A break raises
    `ProtocolViolation` naming the partition, offset and rule.
    """

    def __init__(
        self, where: str, next_seq: int | None = 0, gt_last: GlobalTime | None = None
    ) -> None:
        """Verify ``where`` (``topic[partition]``) from bundle ``next_seq`` (None: any).

        ``gt_last`` is the previous bundle's; items must come after it.
        """
        self.where = where
        self.next_seq = next_seq
        self.gt_last = gt_last
        self._metas: list[Meta] = []

    @property
    def pending(self) -> int:
        """Items read since the last header."""
        return len(self._metas)

    def item(self, headers: Headers | None, offset: int) -> Meta:
        """Check an item record; returns its meta."""
        at = f"{self.where}@{offset}"
        try:
            meta = read_meta(headers)
        except DecodeError as exc:
            raise ProtocolViolation(f"{at}: unreadable {META_HEADER} header: {exc}") from exc
        if meta is None:
            raise ProtocolViolation(f"{at}: record has neither {META_HEADER} nor {BUNDLE_HEADER}")
        if meta.tombstone:
            raise ProtocolViolation(f"{at}: a tombstone left the barrier: {meta}")
        if self.gt_last is not None and meta.gt <= self.gt_last:
            raise ProtocolViolation(
                f"{at}: item at {meta.gt} is not after the previous bundle's gt_last "
                f"{self.gt_last} (a duplicate or a replay leak)"
            )
        self._metas.append(meta)
        return meta

    def header(self, header: BundleHeader, offset: int) -> None:
        """Check the header that closes the items read since the last one."""
        at = f"{self.where}@{offset}: bundle {header.seq}"
        if self.next_seq is not None and header.seq != self.next_seq:
            kind = "duplicate" if header.seq < self.next_seq else "gap"
            raise ProtocolViolation(f"{at}: expected bundle {self.next_seq} ({kind})")
        if self.gt_last is not None and header.gt_last <= self.gt_last:
            raise ProtocolViolation(
                f"{at}: gt_last {header.gt_last} does not increase past {self.gt_last}"
            )
        if header.item_count != len(self._metas):
            raise ProtocolViolation(
                f"{at}: header counts {header.item_count} item(s), {len(self._metas)} arrived"
            )
        late = [meta for meta in self._metas if meta.gt > header.gt_last]
        if late:
            raise ProtocolViolation(f"{at}: item at {late[0].gt} is after gt_last {header.gt_last}")
        self.next_seq = header.seq + 1
        self.gt_last = header.gt_last
        self._metas = []
