"""The output topic of a sink and its bundle topic: written by the barrier, verified by
consumers.

Wire format (FlameStream fault tolerance: output bundles). A bundle is written in one
Kafka transaction over two topics with the same partition count:

* on the output topic (``<topic>``), only the user's records: the bundle's items routed to
  each partition, in no particular order (the exactly-once barrier writes items into the
  bundle's transaction as they arrive, ahead of their release; `connectors.BundleConsumer`
  hands a bundle out in meta order): key and value from the `KafkaSink` (its key function
  and value serde), header ``fp.meta`` = Avro ``Meta``. A consumer that knows nothing of
  flamepipe (kcat, Kafka Connect, ksqlDB) sees the records it expects, keyed as the user
  keyed them, so the topic can be compacted;
* on the bundle topic (``<topic>.bundles``, `bundles_topic`), one record per partition:
  no key, value = Avro ``BundleHeader(seq, gt_last, item_count)`` where ``item_count``
  counts the bundle's items on that partition of the output topic.

Every bundle-topic partition gets a header for every bundle (possibly with
``item_count`` 0), so each output partition with its bundle partition is a complete
bundle sequence of its own: ``seq`` consecutive, ``gt_last`` strictly increasing, every
item after the previous ``gt_last`` and at or before its own. Bundles are transactions of
one producer, so an output partition holds bundle ``n``'s items before bundle ``n + 1``'s:
the first ``item_count`` items not yet in a bundle are the bundle's.

A sink may have several barrier instances (`connectors.KafkaSink` ``barriers``): instance
``k`` of ``n`` owns the output partitions ``p`` with ``p % n == k`` (`owned_partitions`),
reads the items of those partitions only (the last stage routes each to pre-barrier
partition ``k``, `barrier_instance`) and writes the headers of those partitions only,
with a ``seq`` of its own. Each partition is still one bundle sequence, as above.

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
from framework.wire.auth import MAC_HEADER, current
from framework.wire.avro import (
    decode_bundle_header,
    decode_meta,
    encode_bundle_header,
    encode_meta,
    encode_metas,
)
from framework.wire.records import OutRecord

META_HEADER = "fp.meta"
"""Header of an output item: its Avro ``Meta``."""
BUNDLES_SUFFIX = ".bundles"
"""The bundle topic of output topic ``t`` is ``t`` + this."""


def bundles_topic(topic: str) -> str:
    """The bundle topic of output topic ``topic`` (see the module docstring)."""
    return topic + BUNDLES_SUFFIX


_new = tuple.__new__  # an OutRecord without the Python-level NamedTuple __new__ call

Headers = Mapping[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]]
"""Record headers as confluent_kafka returns them."""


def output_partition(key: bytes | None, meta: Meta, partitions: int) -> int:
    """The output partition of an item (see the module docstring)."""
    if key is not None:
        return zlib.crc32(key) % partitions
    return meta.gt.front % partitions


def barrier_instance(key: bytes | None, meta: Meta, partitions: int, barriers: int) -> int:
    """The barrier instance (of ``barriers``) that writes an item: its output partition's
    owner (see the module docstring)."""
    return output_partition(key, meta, partitions) % barriers


def owned_partitions(partitions: int, barriers: int, instance: int) -> range:
    """The output partitions barrier ``instance`` of ``barriers`` writes."""
    return range(instance, partitions, barriers)


def signed_item(
    meta: Meta, key: bytes | None, value: bytes, topic: str
) -> tuple[bytes | None, bytes, bytes, bytes]:
    """What a last stage sends the barrier for an output item: ``(key, value, fp.meta,
    fp.mac)``, the record `item_record` writes, already signed.

    Made where the item is made, because a stage task scales with partitions and the
    barrier is one process per sink: the Avro meta and the HMAC were most of the
    barrier's CPU per item (docs/latency.md, "The barrier as a service"). A tombstone gets
    its item's fields, so the barrier, which cancels equal payloads, matches the two.
    """
    if meta.tombstone:
        meta = Meta(meta.gt, meta.child_ids, meta.trace, False)
    meta_bytes = encode_meta(meta)
    mac = current().sign(topic, key, value, ((META_HEADER, meta_bytes),))
    return key, value, meta_bytes, mac


def signed_items(
    metas: Sequence[Meta], keys: Sequence[bytes | None], values: Sequence[bytes], topic: str
) -> list[tuple[bytes | None, bytes, bytes, bytes]]:
    """`signed_item` of each item, the same records at under half the cost per item (one
    loop for the metas, one for the tags: 8.2 -> 3.5 us)."""
    plain = [Meta(m.gt, m.child_ids, m.trace, False) if m.tombstone else m for m in metas]
    meta_bytes = encode_metas(plain)
    macs = current().sign_many(topic, zip(keys, values, meta_bytes, strict=True), META_HEADER)
    return list(zip(keys, values, meta_bytes, macs, strict=True))


def item_record(record: Record, topic: str, partitions: int) -> tuple[int, OutRecord]:
    """The output partition and record of a released item (see the module docstring).

    Every payload is already an output record: ``(key, value, fp.meta, fp.mac)`` signed
    by the last stage (`signed_item`); anything else is a `ProtocolViolation`.
    """
    (out,) = item_records((record,), topic, [0] * partitions)
    assert out.partition is not None
    return out.partition, out


def item_records(records: Iterable[Record], topic: str, counts: list[int]) -> list[OutRecord]:
    """`item_record` of each of ``records`` (``len(counts)`` output partitions), counting
    them per partition into ``counts``: the barrier's loop over the items it writes."""
    partitions = len(counts)
    out: list[OutRecord] = []
    append = out.append
    for record in records:
        payload = record[1]
        if type(payload) is tuple and len(payload) == 4 and type(payload[1]) is bytes:
            key, value, meta_bytes, mac = payload  # made and signed by the last stage
            headers: tuple[tuple[str, bytes], ...] = (
                (META_HEADER, meta_bytes),
                (MAC_HEADER, mac),
            )
        else:
            raise ProtocolViolation(
                f"pre-barrier item at {record[0].gt} is not a signed output record (key, "
                "value, meta, mac) but a {type(payload).__name__}: the stage that wrote it "
                "runs another flamepipe version; run one version for the stages and the barrier"
            )
        p = output_partition(key, record[0], partitions)
        append(_new(OutRecord, (topic, p, key, value, headers)))
        counts[p] += 1
    return out


def header_records(
    seq: int,
    gt_last: GlobalTime,
    counts: Sequence[int],
    topic: str,
    owned: Sequence[int] | None = None,
) -> list[OutRecord]:
    """The records that close bundle ``seq`` of output ``topic``: one per partition of its
    bundle topic (``owned`` ones only, if given), ``counts`` the items on each output
    partition. `ProtocolViolation` if an item went to a partition not owned: a stage
    routed it for another barrier count, and committing it would break that partition's
    bundle sequence."""
    control = bundles_topic(topic)
    partitions = range(len(counts)) if owned is None else owned
    if owned is not None and sum(counts[p] for p in owned) != sum(counts):
        stray = [p for p, n in enumerate(counts) if n and p not in owned]
        raise ProtocolViolation(
            f"a bundle of {topic} has items for partitions {stray}, which another barrier "
            f"instance writes (this one writes {list(owned)}): run the stages and barriers "
            "with one KafkaSink barriers count"
        )
    return [
        OutRecord(control, p, None, encode_bundle_header(BundleHeader(seq, gt_last, counts[p])))
        for p in partitions
    ]


def bundle_records(
    bundle: Bundle, topic: str, partitions: int, owned: Sequence[int] | None = None
) -> list[OutRecord]:
    """The records of ``bundle`` on output ``topic``: items (`item_record`), then the headers
    on its bundle topic (``owned`` partitions only, if given)."""
    counts = [0] * partitions
    records = item_records(bundle.records, topic, counts)
    records.extend(header_records(bundle.seq, bundle.gt_last, counts, topic, owned))
    return records


def header_value(headers: Headers | None, name: str) -> bytes | None:
    """The value of the first header ``name``, None if absent."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for key, value in pairs:
        if key == name:
            return value.encode() if isinstance(value, str) else value or b""
    return None


def read_bundle_header(value: bytes | None) -> BundleHeader:
    """The header a bundle-topic record holds (`DecodeError` if garbled or empty)."""
    if value is None:
        raise DecodeError("a bundle-topic record without a value")
    return decode_bundle_header(value)


def read_meta(headers: Headers | None) -> Meta | None:
    """The meta of an output item, None if it has none (`DecodeError` if garbled)."""
    raw = header_value(headers, META_HEADER)
    return None if raw is None else decode_meta(raw)


class BundleVerifier:
    """Checks one output partition and its bundle partition against the bundle rules.

    Items (`item`) and headers (`header`) come from two topics, each in offset order; a
    header closes the first ``item_count`` items not yet in a bundle, and waits (returns
    None) until that many have arrived. Rules: bundle ``seq`` is consecutive;
    ``gt_last`` strictly increases; every item has a meta, is no tombstone, and is after
    the previous bundle's ``gt_last`` and at or before its own; a header whose items are
    not all there once the output partition is read to its end is a lost item
    (`check_complete`). A break raises `ProtocolViolation` naming the partition, offset
    and rule.
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
        """Items read and not yet in a bundle."""
        return len(self._metas)

    def item(self, headers: Headers | None, offset: int) -> Meta:
        """Check an item record; returns its meta."""
        at = f"{self.where}@{offset}"
        try:
            meta = read_meta(headers)
        except DecodeError as exc:
            raise ProtocolViolation(f"{at}: unreadable {META_HEADER} header: {exc}") from exc
        if meta is None:
            raise ProtocolViolation(f"{at}: an output record without {META_HEADER}")
        self.take_item(meta, offset)
        return meta

    def take_item(self, meta: Meta, offset: int) -> None:
        """Check the decoded meta of the item at ``offset``; it waits for its header."""
        if meta.tombstone:
            raise ProtocolViolation(f"{self.where}@{offset}: a tombstone left the barrier: {meta}")
        self._after_gt_last(meta, f"{self.where}@{offset}")
        self._metas.append(meta)

    def _after_gt_last(self, meta: Meta, at: str) -> None:
        if self.gt_last is not None and meta.gt <= self.gt_last:
            raise ProtocolViolation(
                f"{at}: item at {meta.gt} is not after the previous bundle's gt_last "
                f"{self.gt_last} (a duplicate or a replay leak)"
            )

    def header(self, header: BundleHeader, offset: int) -> int | None:
        """Close the bundle ``header`` (read at ``offset`` of the bundle topic): the number of
        pending items it takes, or None if fewer have arrived (call again after more)."""
        at = f"{self.where}@{offset}: bundle {header.seq}"
        if self.next_seq is not None and header.seq != self.next_seq:
            kind = "duplicate" if header.seq < self.next_seq else "gap"
            raise ProtocolViolation(f"{at}: expected bundle {self.next_seq} ({kind})")
        if self.gt_last is not None and header.gt_last <= self.gt_last:
            raise ProtocolViolation(
                f"{at}: gt_last {header.gt_last} does not increase past {self.gt_last}"
            )
        count = header.item_count
        if len(self._metas) < count:
            return None
        taken, self._metas = self._metas[:count], self._metas[count:]
        for meta in taken:
            self._after_gt_last(meta, at)
            if meta.gt > header.gt_last:
                raise ProtocolViolation(
                    f"{at}: item at {meta.gt} is after gt_last {header.gt_last}"
                )
        self.next_seq = header.seq + 1
        self.gt_last = header.gt_last
        return count

    def check_complete(self, header: BundleHeader, offset: int) -> None:
        """`ProtocolViolation` if ``header`` still waits for items once the output partition
        was read to its end: its items committed with it, so one is lost."""
        if len(self._metas) < header.item_count:
            raise ProtocolViolation(
                f"{self.where}@{offset}: bundle {header.seq}: header counts "
                f"{header.item_count} item(s), {len(self._metas)} arrived"
            )
