"""Taking a savepoint of a running pipeline, and starting a (changed) pipeline from one.

`take_savepoint` waits for the next snapshot the running pipeline commits (or, with
``latest``, uses the committed one) and copies it out of the state backend
(`framework.snapshots.savepoint_store`). `start_from_savepoint` is a replay
(`framework.operations.replay`) whose state and start offsets are the savepoint's, for the
graph as it is now: matching operators keep their state, new groupings start empty,
removed operators are reported, an incompatible change is refused before anything changes.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from framework.config import Settings
from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.core.graph import Graph
from framework.deadline import Deadline
from framework.errors import ConfigError, SnapshotMissing
from framework.operations.replay import Offsets, ReplayStart, resolve_start, start_replay
from framework.runners.keys import install_keys
from framework.snapshots.backends.factory import open_backend
from framework.snapshots.restore import restore_epoch
from framework.snapshots.savepoint_store import (
    Savepoint,
    check_savable,
    load_savepoint,
    save_savepoint,
)
from framework.snapshots.upgrades import SavepointBackend, Upgrade, plan_upgrade
from framework.wire.znodes import EpochRecord, SnapshotRecord

log = logging.getLogger(__name__)

_POLL_S = 0.2
_COPY_ATTEMPTS = 3  # a copy races the coordinator's collection only if it takes 2 intervals


def savepoint_root(settings: Settings, app: str, directory: Path | None = None) -> Path:
    """Where ``app``'s savepoints live: ``directory``, or ``<snapshot_path>/savepoints/<app>``."""
    return directory if directory is not None else settings.snapshot_path / "savepoints" / app


def take_savepoint(
    settings: Settings,
    graph: Graph,
    name: str,
    *,
    directory: Path | None = None,
    wait_s: float = 30.0,
    latest: bool = False,
) -> Savepoint:
    """Savepoint ``name`` of ``graph``: the first snapshot committed after this call (the
    pipeline must be running), or with ``latest`` the committed one.

    `ConfigError` with the fix if there is nothing to save: no snapshot in ``wait_s``
    (not running, or snapshots off), or none at all.
    """
    check_savable(graph, name)  # before anything is reached
    install_keys(settings)
    root = savepoint_root(settings, graph.name, directory)
    registry = SnapshotRegistry(settings.zookeeper, graph.name)
    try:
        record = registry.latest() if latest else _next_snapshot(registry, graph.name, wait_s)
        if record is None:
            raise ConfigError(
                f"{graph.name!r} has no committed snapshot: run it (snapshots every "
                f"FLAMEPIPE_SNAPSHOT_INTERVAL_MS) before taking a savepoint"
            )
        backend = open_backend(settings, graph.name)
        try:
            for attempt in range(_COPY_ATTEMPTS):
                try:
                    return save_savepoint(root, name, graph, record, backend)
                except SnapshotMissing:
                    newer = registry.latest()
                    if attempt + 1 == _COPY_ATTEMPTS or newer is None or newer == record:
                        raise
                    log.info(
                        "%s: snapshot %d was collected during the copy; copying %d",
                        graph.name,
                        record.slot,
                        newer.slot,
                    )
                    record = newer
        finally:
            backend.close()
    finally:
        registry.close()
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _next_snapshot(registry: SnapshotRegistry, app: str, wait_s: float) -> SnapshotRecord:
    before = registry.latest()
    deadline = Deadline(wait_s, f"a snapshot of {app!r} after slot {before and before.slot}")
    while not deadline.expired:
        now = registry.latest()
        if now is not None and (before is None or now.slot > before.slot):
            return now
        time.sleep(deadline.remaining(_POLL_S))
    raise ConfigError(
        f"{app!r} committed no snapshot in {wait_s:g} s: run the pipeline while taking a "
        "savepoint, or save the committed snapshot (--latest)"
    )


def start_from_savepoint(
    settings: Settings,
    graph: Graph,
    name: str,
    *,
    directory: Path | None = None,
    renames: dict[str, str] | None = None,
) -> tuple[EpochRecord, Upgrade]:
    """Start ``graph``'s next epoch from savepoint ``name``; the epoch and what was kept.

    1. Load and verify the savepoint, and plan the upgrade (`plan_upgrade`): refused
       here, nothing has changed.
    2. Start offsets: the savepoint's for its sources, the first ones for new sources.
    3. A replay from them whose restore step seeds the new epoch's changelogs from the
       savepoint (kept groupings) and empty (new ones), in ``settings.parallelism`` units.
    """
    install_keys(settings)
    # Step 1
    savepoint = load_savepoint(savepoint_root(settings, graph.name, directory), name)
    upgrade = plan_upgrade(savepoint, graph, renames)
    # Step 2
    given = {t: dict(ps) for t, ps in savepoint.offsets.items() if t not in upgrade.removed_sources}
    offsets = resolve_start(settings.kafka_bootstrap, graph, offsets=given)
    backend = SavepointBackend(savepoint, upgrade)

    # Step 3
    def restore(_asked: Offsets, new_epoch: int) -> ReplayStart:
        restore_epoch(
            settings.kafka_bootstrap,
            graph,
            backend.record(new_epoch - 1),
            backend,
            new_epoch,
            units=settings.parallelism,
            empty=frozenset(upgrade.new),
        )
        return ReplayStart(offsets, savepoint.slot)

    reason = f"savepoint {name}"
    return start_replay(settings, graph, offsets, reason=reason, restore=restore), upgrade
