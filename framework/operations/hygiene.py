"""Topic hygiene: internal topics hold what their readers may still need, nothing more.

Two kinds of garbage, two collectors:

* **Below the readers** (`TopicJanitor`, a service of the driver): every
  ``interval_s``, each internal topic of the current epoch is trimmed (Kafka's
  DeleteRecords) below the first offset its reader may read again:

  - ``<app>.acks``: the offset of the acker's latest checkpoint of that shard (a
    restarted acker resumes there; the acks before it are folded into the checkpoint);
  - a shuffle topic: the end offset of its stage query's last completed micro-batch
    (Spark re-runs at most the batch after it, which starts there), or a continuous
    task's committed position (its latest position record);
  - ``<app>.<sink>.pre``: the barrier's committed ``P_rel`` (a restarted barrier reads from
    it), taken only from positions whose MAC verifies.

  Changelogs, min times, acker checkpoints and continuous stages' positions are compacted
  (bounded by their keys); the dead-letter topic is for people and keeps its retention.

* **Old epochs** (`old_epoch_topics`, run by a driver that starts in epoch ``e > 0``, and by
  ``flamepipe gc``): a replay or a recovery starts epoch ``e`` from a snapshot kept in the
  snapshot backend and the sources' offsets, so nothing reads the internal topics of
  epochs below ``e`` again. They are deleted by name, computed from the pipeline's graph
  (never by a prefix that could match a user's topic).

Example::

    >>> from connectors import KafkaSink, KafkaSource
    >>> from framework import Pipeline
    >>> p = Pipeline("wc")
    >>> _ = p.source(KafkaSource("in")).key_by(str).group(window=2).sink(KafkaSink("out"))
    >>> sorted(epoch_topics(p.graph(), 1))  # doctest: +NORMALIZE_WHITESPACE
    ['wc.e1.acker', 'wc.e1.acks', 'wc.e1.group', 'wc.e1.group.positions', 'wc.e1.group.state',
     'wc.e1.mintime', 'wc.e1.sink-out.pre', 'wc.e1.source-in.positions']
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import TopicPartition

from framework.acker.checkpoints import latest
from framework.core.graph import Graph
from framework.deadline import DEFAULT_TIMEOUT_S
from framework.errors import FlamepipeError, ProtocolViolation
from framework.kafka.admin import delete_records, delete_topics, list_topics, partitions_if_exists
from framework.kafka.clients import (
    close_quietly,
    kafka_retry,
    new_consumer,
    read_to_end,
    verified_metadata,
)
from framework.kafka.endpoints import kafka_sources, sink_nodes
from framework.plan.stages import plan_stages
from framework.service import Service
from framework.wire.topics import Topics

_log = logging.getLogger(__name__)

Needs = Mapping[tuple[str, int], int]
"""``(topic, partition) -> offset``: the first offset a reader may still read."""


def acker_needs(bootstrap: str, topics: Topics, shards: int) -> Needs:
    """Per acks partition, the offset of the acker's latest checkpoint of it (none before
    the acker's first checkpoint in this epoch)."""
    if topics.acker not in list_topics(bootstrap):
        return {}
    saved = latest(read_to_end(bootstrap, topics.acker, 1), range(shards))
    return {(topics.acks, shard): checkpoint[0] for shard, checkpoint in saved.items()}


def barrier_needs(bootstrap: str, topics: Topics, app: str, sinks: Iterable[str]) -> Needs:
    """Per pre-barrier partition, the barrier's committed ``P_rel`` (verified positions only)."""
    out: dict[tuple[str, int], int] = {}
    for sink in sinks:
        group, pre = f"{app}.{sink}.barrier", topics.pre(sink)
        asked = [TopicPartition(pre, p) for p in range(partitions_if_exists(bootstrap, pre))]
        if not asked:
            continue
        consumer = new_consumer(bootstrap, group)
        try:
            found = kafka_retry(
                f"cannot read the positions of {group!r}",
                lambda consumer=consumer, asked=asked: consumer.committed(  # type: ignore[misc]
                    asked, timeout=DEFAULT_TIMEOUT_S
                ),
            )
        finally:
            close_quietly(consumer)
        for tp in found:
            if tp.offset < 0:
                continue
            try:
                verified_metadata(group, tp)
            except ProtocolViolation:
                continue  # never trim by a position this pipeline did not commit
            out[(tp.topic, tp.partition)] = int(tp.offset)
    return out


class TopicJanitor(Service):
    """Trims internal topics below their readers' needs (see the module docstring).

    ``needs`` returns the current needs; a partition is trimmed when its need moved past
    what was trimmed before. ``trimmed`` counts the records deleted; a failed round is
    logged and tried again at the next one.
    """

    def __init__(
        self, bootstrap: str, needs: Callable[[], Needs], *, interval_s: float = 30.0
    ) -> None:
        super().__init__("flamepipe-topic-janitor")
        self.bootstrap = bootstrap
        self.needs = needs
        self.interval_s = interval_s
        self.trimmed = 0
        self.rounds = 0
        self._done: dict[tuple[str, int], int] = {}
        self._last = time.monotonic()

    def _open(self) -> None:
        self._last = time.monotonic()

    def _step(self) -> None:
        if self._stopping.wait(0.5) or time.monotonic() - self._last < self.interval_s:
            return
        self._last = time.monotonic()
        self.trim_once()

    def trim_once(self) -> None:
        """One round: trim every partition whose need moved."""
        try:
            wanted = {
                tp: offset for tp, offset in self.needs().items() if offset > self._done.get(tp, 0)
            }
            starts = delete_records(self.bootstrap, wanted)
        except FlamepipeError as exc:
            _log.warning(
                "topic janitor: this round failed, next in %.0f s: %s", self.interval_s, exc
            )
            return
        for tp, offset in wanted.items():
            self.trimmed += max(0, offset - self._done.get(tp, 0))
            self._done[tp] = max(offset, starts.get(tp, offset))
        self.rounds += 1
        if wanted:
            _log.debug("topic janitor: trimmed %s", sorted(wanted.items()))

    def _close(self) -> None:
        pass


def epoch_topics(graph: Graph, epoch: int) -> set[str]:
    """The internal topics ``graph`` makes in ``epoch`` (the dead-letter topic excepted)."""
    sources = {node: source.topic for node, source in kafka_sources(graph).items()}
    topics = Topics(graph.name, epoch)
    names = {topics.acks, topics.mintime, topics.acker}
    for stage in plan_stages(graph, sources, epoch):
        if not stage.is_source:
            names |= {stage.topic, topics.state(stage.id)}
        names.add(topics.positions(stage.id))  # made by continuous execution only
    names |= {topics.pre(sink) for sink in sink_nodes(graph)}
    return names


def old_epoch_topics(bootstrap: str, graph: Graph, current: int) -> list[str]:
    """The existing internal topics of ``graph``'s epochs below ``current``."""
    old = set().union(*(epoch_topics(graph, e) for e in range(current))) if current else set()
    users = {s.topic for s in kafka_sources(graph).values()}
    users |= {graph.node(n).endpoint.topic for n in sink_nodes(graph)}  # type: ignore[union-attr]
    return sorted((old - users) & set(list_topics(bootstrap)))


def remove_old_epochs(bootstrap: str, graph: Graph, current: int) -> list[str]:
    """Delete `old_epoch_topics`; returns what was deleted."""
    names = old_epoch_topics(bootstrap, graph, current)
    if names:
        delete_topics(bootstrap, names)
        _log.info("removed %d topics of %s's epochs below %d", len(names), graph.name, current)
    return names
