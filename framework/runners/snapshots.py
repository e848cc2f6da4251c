"""The two readers of the committed snapshot the runtime needs: the prune bound of the
Spark driver (`CommittedSlot`) and the restore step of a replay (`restorer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from framework.config import Settings
from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.core.graph import Graph
from framework.operations.replay import Offsets, ReplayStart
from framework.snapshots.backends.factory import open_backend
from framework.snapshots.restore import restore_epoch


class CommittedSlot:
    """The slot of the committed snapshot (0 before the first), re-read at most every 0.5 s.

    Groupings prune only below it (docs/decisions/snapshots-from-changelogs.md): the
    state a later snapshot is cut from must still hold what that snapshot needs. Any
    epoch's snapshot counts: replays are deterministic, so a snapshot at slot T is the
    state after every item before T, whichever epoch computed it.
    """

    def __init__(self, zookeeper: str, app: str, every_s: float = 0.5) -> None:
        """``zookeeper``: the connect string (`Settings.zookeeper`)."""
        self._registry = SnapshotRegistry(zookeeper, app)
        self._every_s = every_s
        self._lock = threading.Lock()
        self._slot = 0
        self._read_at = -every_s

    def __call__(self) -> int:
        with self._lock:
            if time.monotonic() - self._read_at >= self._every_s:
                latest = self._registry.latest()
                self._slot = 0 if latest is None else latest.slot
                self._read_at = time.monotonic()
            return self._slot

    def close(self) -> None:
        """Close the ZooKeeper session."""
        self._registry.close()


def restorer(
    settings: Settings, graph: Graph, *, units: int | None = None
) -> Callable[[Offsets, int], ReplayStart | None]:
    """The ``restore`` step of `framework.operations.replay.start_replay` for ``graph``.

    Picks the newest kept snapshot whose offsets are all at or before the asked ones and
    seeds the new epoch's changelogs with its state, in ``units`` hash units per keyed node
    (None: as many as the snapshot has; `framework.operations.rescale`).
    """

    def restore(offsets: Offsets, new_epoch: int) -> ReplayStart | None:
        registry = SnapshotRegistry(settings.zookeeper, graph.name)
        try:
            for slot in sorted(registry.slots(), reverse=True):
                record = registry.at_or_below(slot)
                if record is None or record.slot != slot:
                    continue
                if all(
                    record.offsets.get(topic, {}).get(p, 0) <= offset
                    for topic, parts in offsets.items()
                    for p, offset in parts.items()
                ):
                    backend = open_backend(settings, graph.name)
                    try:
                        restore_epoch(
                            settings.kafka_bootstrap, graph, record, backend, new_epoch, units=units
                        )
                    finally:
                        backend.close()
                    start = {t: dict(parts) for t, parts in record.offsets.items()}
                    return ReplayStart(start, record.slot)
        finally:
            registry.close()
        return None

    return restore
