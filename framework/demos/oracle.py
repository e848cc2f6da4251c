"""Oracles: what a failure-free, in-order run must output, computed from the input itself."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator

from confluent_kafka import Message

from framework.core.time import GlobalTime
from framework.kafka.clients import read_to_end
from framework.wire.lifts import Lift, LiftIndex


def pair_key(item: object) -> str:
    """A hashable, canonical form of one `word_pairs` output item."""
    return json.dumps(item, sort_keys=True)


def word_pairs_oracle(
    bootstrap: str, topic: str, delta_ms: int, lifts: Iterable[Lift] = ()
) -> Counter[str]:
    """In-order output of `word_pairs` for the input topic as Kafka stored it.

    Global times come from the stored records (timestamp, partition, offset) and the
    pipeline's ``lifts`` of the topic (`framework.kafka.lifts.read_lifts`), so this is the
    order flamepipe must reproduce whatever order the records were processed in.
    """
    occurrences: dict[str, list[tuple[GlobalTime, int, str]]] = {}
    for msg, gt in _stored(bootstrap, topic, delta_ms, lifts):
        line_id, *words = (msg.value() or b"").decode().split()
        for child, word in enumerate(words):
            occurrences.setdefault(word, []).append((gt, child, line_id))
    result: Counter[str] = Counter()
    for word, seen in occurrences.items():
        ids = [line_id for _, _, line_id in sorted(seen)]
        for i, line_id in enumerate(ids):
            result[pair_key([word, [*ids[max(0, i - 1) : i], line_id]])] += 1
    return result


def window_counts_oracle(bootstrap: str, topic: str, window_ms: int) -> Counter[tuple[str, int]]:
    """``(word, window start ms) -> count`` of the input topic as Kafka stored it (its
    records' LogAppendTime decides the window, as in flamepipe)."""
    counts: Counter[tuple[str, int]] = Counter()
    for msg in read_to_end(bootstrap, topic):
        _, stamp = msg.timestamp()
        start = stamp // window_ms * window_ms
        for word in (msg.value() or b"").decode().split():
            counts[(word, start)] += 1
    return counts


def stored_edges(
    bootstrap: str, topic: str, delta_ms: int, lifts: Iterable[Lift] = ()
) -> list[tuple[int, tuple[int, int]]]:
    """``(ms, (u, v))`` for every JSON edge of ``topic`` as Kafka stored it, ``ms`` the
    start of its global time's slot (lifts applied): what `components_oracle` reads."""
    edges: list[tuple[int, tuple[int, int]]] = []
    for msg, gt in _stored(bootstrap, topic, delta_ms, lifts):
        u, v = json.loads(msg.value() or b"null")
        edges.append((gt.slot * delta_ms, (int(u), int(v))))
    return edges


def _stored(
    bootstrap: str, topic: str, delta_ms: int, lifts: Iterable[Lift]
) -> Iterator[tuple[Message, GlobalTime]]:
    """Every record of ``topic`` as Kafka stored it, with the global time flamepipe gives
    it: its coordinates, its slot moved up by the pipeline's ``lifts`` of the topic."""
    index = LiftIndex(lifts)
    for msg in read_to_end(bootstrap, topic):
        _, stamp = msg.timestamp()
        partition, offset = msg.partition() or 0, msg.offset() or 0
        gt = GlobalTime.of_record(stamp, topic, partition, offset, delta_ms)
        for lift in index.of(partition):
            gt = GlobalTime(lift.slot_of(offset, gt.slot), gt.front, gt.offset)
        yield msg, gt
