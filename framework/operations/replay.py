"""Replay: start a pipeline's next epoch from chosen input offsets.

Input replay as FlameStream's fault tolerance describes it.

The output does not change: global times are recomputed from what Kafka stored, the
operations are deterministic, and every barrier drops what it released before (items at
or before its ``GT_last``). Protocol of `start_replay`:

1. Resolve where each source partition starts: given offsets, the first offset stamped at
   or after a time, or the first offset.
2. A pipeline with groupings or aggregates needs their state as it was at that point. From
   the first offsets the state is empty. Otherwise take the latest committed snapshot whose
   offsets are all at or before the asked ones (`SnapshotRegistry` in
   `framework.coordination.committed_snapshot`), seed the new epoch's changelogs from it
   and start from its offsets instead (earlier: the barriers drop the difference). No such
   snapshot: `ConfigError`, nothing changed.
3. Bump the epoch in ZooKeeper with the start offsets: the next `run` (and every
   ``flamepipe acker|barrier`` process, which follows epochs) uses the new epoch's topics.

Stop the running pipeline first: its queries would otherwise keep writing the old epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from framework.config import Settings
from framework.core.graph import KEYED_STATE, Graph
from framework.errors import ConfigError, ProtocolViolation
from framework.kafka.admin import offsets_at
from framework.kafka.endpoints import kafka_sources
from framework.runners.keys import install_keys
from framework.wire.znodes import EpochRecord

Offsets = dict[str, dict[int, int]]


@dataclass(frozen=True)
class ReplayStart:
    """Where a replay starts: per source topic and partition, and the snapshot it uses."""

    offsets: Offsets
    snapshot: int | None = None


def parse_offsets(text: str) -> Offsets:
    """``"topic:0=10,topic:1=20"`` -> ``{"topic": {0: 10, 1: 20}}``; `ConfigError` if bad."""
    offsets: Offsets = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        where, sep, offset = part.rpartition("=")
        topic, colon, partition = where.rpartition(":")
        # isdigit() alone accepts "²", which int() refuses: ASCII digits only.
        digits = all(s.isascii() and s.isdigit() for s in (partition, offset))
        if not sep or not colon or not topic or not digits:
            raise ConfigError(f"offsets {text!r}: write topic:partition=offset[,...], e.g. in:0=42")
        offsets.setdefault(topic, {})[int(partition)] = int(offset)
    if not offsets:
        raise ConfigError("no offsets given: write topic:partition=offset[,...]")
    return offsets


def resolve_start(
    bootstrap: str,
    graph: Graph,
    *,
    offsets: Mapping[str, Mapping[int, int]] | None = None,
    at_ms: int | None = None,
) -> Offsets:
    """Step 1: start offsets of every source partition (unnamed partitions: the first)."""
    resolved: Offsets = {}
    for source in kafka_sources(graph).values():
        first = offsets_at(bootstrap, source.topic, None)
        chosen = offsets_at(bootstrap, source.topic, at_ms) if at_ms is not None else first
        given = (offsets or {}).get(source.topic, {})
        unknown = set(given) - set(first)
        if unknown:
            raise ConfigError(f"{source.topic} has no partition {sorted(unknown)}")
        resolved[source.topic] = {p: max(first[p], given.get(p, chosen[p])) for p in first}
    extra = set(offsets or {}) - set(resolved)
    if extra:
        raise ConfigError(f"{sorted(extra)}: not a source topic of {graph.name!r}")
    return resolved


def _is_start(bootstrap: str, offsets: Offsets) -> bool:
    return all(offsets[t] == offsets_at(bootstrap, t, None) for t in offsets)


def start_replay(
    settings: Settings,
    graph: Graph,
    offsets: Offsets,
    *,
    reason: str = "replay",
    restore: Callable[[Offsets, int], ReplayStart | None] | None = None,
) -> EpochRecord:
    """Steps 2-3 for ``offsets`` (from `resolve_start`); returns the new epoch's record.

    ``restore(offsets, new_epoch)`` does step 2 for a stateful pipeline that does not
    start at the beginning: it seeds the new epoch's state from a snapshot and returns
    where that snapshot starts (`framework.runners.snapshots.restorer`).
    """
    install_keys(settings)
    from framework.coordination.epochs import Epochs

    bootstrap = settings.kafka_bootstrap
    start = ReplayStart(offsets)
    stateful = any(node.kind in KEYED_STATE for node in graph.nodes)
    epochs = Epochs(settings.zookeeper, graph.name)
    try:
        current = epochs.current()
        planned = 1 if current is None else current.epoch + 1
        # Step 2
        if stateful and not _is_start(bootstrap, offsets):
            found = restore(offsets, planned) if restore is not None else None
            if found is None:
                raise ConfigError(
                    f"{graph.name!r} has groupings or aggregates: a replay that does not start "
                    "at the first offsets needs a committed snapshot at or before them, and "
                    "there is none; replay from the start (--from-start) instead"
                )
            start = found
        # Step 3
        record = epochs.bump(reason, start.snapshot, start.offsets)
    finally:
        epochs.close()
    if record.epoch != planned:
        raise ProtocolViolation(
            f"{graph.name!r}: another replay started epoch {planned} meanwhile; this one got "
            f"{record.epoch}, whose state was not restored: replay again"
        )
    return record
