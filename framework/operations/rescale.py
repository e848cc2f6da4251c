"""Rescaling: a keyed pipeline's parallelism changes only in a new epoch.

A keyed stage (a grouping or an aggregate) has ``parallelism`` hash units: the partitions
of its shuffle topic and of its changelog. An item goes to unit ``key_hash(key) %
parallelism``, and the unit's task holds the key's state. Running on in the same epoch with
another parallelism would send keys to units that do not hold their state, and nothing
would notice: `check_parallelism` refuses that before anything starts, and
`start_rescale` moves the state instead. Protocol of `start_rescale`:

1. Refuse what needs no rescale, with the fix: a pipeline without keyed stages (its
   parallelism takes effect at the next run), one that never ran in its epoch, one that
   already runs with the asked parallelism.
2. From the start (``from_start``): the next epoch reads every source from its first
   offset with empty state; any pipeline can do that.
3. Otherwise from the newest committed snapshot: each grouping's and aggregate's unit's
   buckets are re-hashed into the new parallelism's units, written into the new epoch's
   changelogs (`framework.snapshots.restore.restore_epoch` with ``units``), and the
   sources start at the snapshot's offsets.
4. Bump the epoch (reason ``"rescale to N"``); the next run with parallelism N uses it.

Why the output does not change: this is a replay (`framework.operations.replay`), and where a
key's state lives does not change what the key's items compute; every barrier drops what it
released before.
"""

from __future__ import annotations

import time

from framework.config import Settings
from framework.core.graph import KEYED_STATE, Graph
from framework.errors import ConfigError
from framework.kafka.admin import partitions_if_exists
from framework.operations.replay import resolve_start, start_replay
from framework.wire.topics import Topics
from framework.wire.znodes import EpochRecord

_FUTURE_MS = 3_600_000  # "the offsets an hour from now": every source partition's end


def keyed_nodes(graph: Graph) -> list[str]:
    """The ids of the nodes whose stages have hash units: groupings, aggregates, converges."""
    return [n.id for n in graph.nodes if n.kind in KEYED_STATE]


def refuse_unkeyed(graph: Graph) -> None:
    """`ConfigError` if ``graph`` has no keyed stage: there is no state to move."""
    if not keyed_nodes(graph):
        raise ConfigError(
            f"{graph.name!r} has no grouping, aggregate or converge: its parallelism needs "
            "no rescale, run it with the new one"
        )


def running_parallelism(bootstrap: str, graph: Graph, epoch: int) -> int | None:
    """The parallelism ``graph`` ran with in ``epoch`` (its changelogs' partition count),
    None if none of its keyed stages' topics exists there yet.

    `ConfigError` if the keyed stages disagree (topics made by hand, or by another
    flamepipe): say which.
    """
    topics = Topics(graph.name, epoch)
    found: dict[str, int] = {}
    for node in keyed_nodes(graph):
        for topic in (topics.shuffle(node), topics.state(node)):
            count = partitions_if_exists(bootstrap, topic)
            if count:
                found[topic] = count
    counts = set(found.values())
    if len(counts) > 1:
        raise ConfigError(
            f"{graph.name!r} epoch {epoch}: its keyed topics disagree on the parallelism "
            f"({found}): delete the ones not made by flamepipe, or rescale from the start"
        )
    return counts.pop() if counts else None


def check_parallelism(bootstrap: str, graph: Graph, epoch: int, parallelism: int) -> None:
    """`ConfigError` with the fix if ``graph`` ran in ``epoch`` with another parallelism."""
    ran = running_parallelism(bootstrap, graph, epoch)
    if ran is not None and ran != parallelism:
        raise ConfigError(
            f"{graph.name!r} runs with parallelism {ran} in epoch {epoch}, asked for "
            f"{parallelism}: its keys' state is in {ran} units; set FLAMEPIPE_PARALLELISM={ran}, "
            f"or move the state: flamepipe rescale <module:pipeline> --parallelism {parallelism}"
        )


def start_rescale(settings: Settings, graph: Graph, *, from_start: bool = False) -> EpochRecord:
    """Steps 1-4 for ``settings.parallelism``; returns the new epoch's record."""
    from framework.coordination.epochs import read_epoch
    from framework.runners.snapshots import restorer

    bootstrap, parallelism = settings.kafka_bootstrap, settings.parallelism
    # Step 1
    refuse_unkeyed(graph)
    current = read_epoch(settings.zookeeper, graph.name)
    epoch = 0 if current is None else current.epoch
    ran = running_parallelism(bootstrap, graph, epoch)
    if ran is None:
        raise ConfigError(
            f"{graph.name!r} has not run in epoch {epoch}: no state to move, run it with "
            f"parallelism {parallelism}"
        )
    if ran == parallelism:
        raise ConfigError(f"{graph.name!r} already runs with parallelism {parallelism}")
    reason = f"rescale {ran} to {parallelism}"
    # Step 2
    if from_start:
        return start_replay(settings, graph, resolve_start(bootstrap, graph), reason=reason)
    # Steps 3-4: at the sources' ends, `restorer` takes the newest committed snapshot.
    ends = resolve_start(bootstrap, graph, at_ms=time.time_ns() // 1_000_000 + _FUTURE_MS)
    restore = restorer(settings, graph, units=parallelism)
    return start_replay(settings, graph, ends, reason=reason, restore=restore)
