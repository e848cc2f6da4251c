"""Recovery from lost acks: a min time that stops advancing starts a new epoch.

Acks that never arrive (or an ack that was never sent) leave a slot's XOR non-zero
forever: min time stops there and nothing behind it is released. FlameStream's fault
tolerance answers with replay. `StallWatch` runs beside the snapshot coordinator:

1. Watch the global min time of its epoch; remember when it last grew. Before the
   first min time (0: Spark's cold start, a replay catching up) there is nothing to
   stall: a new epoch takes as long as its first batches take.
2. When it has grown once and then not for ``stall_timeout_ms``, recover: start the next epoch from
   the committed snapshot (its offsets, its state; `framework.operations.replay`), or from
   the first offsets when there is none yet.
3. Stop: this epoch is over. The driver, the acker and the barriers follow the epoch
   (`SparkRunner.run`, ``flamepipe acker|barrier``) and start again on its topics.

A driver that is down also stops min time; if it stays down longer than the timeout its
restart simply begins in the new epoch. Keep the timeout well above the longest
micro-batch.
"""

from __future__ import annotations

import time

from framework.config import Settings
from framework.coordination.committed_snapshot import read_latest
from framework.core.graph import Graph
from framework.kafka.mintime import MinTimeView
from framework.operations.replay import resolve_start, start_replay
from framework.service import Service
from framework.wire.znodes import EpochRecord


class StallWatch(Service):
    """Recovers ``graph`` in ``epoch`` when its min time stalls (see the module docstring)."""

    def __init__(self, settings: Settings, graph: Graph, epoch: int, view: MinTimeView) -> None:
        super().__init__(f"flamepipe-stallwatch-{graph.name}")
        self.settings = settings
        self.graph = graph
        self.epoch = epoch
        self.view = view
        self.timeout_s = settings.stall_timeout_ms / 1000
        self.recovered: EpochRecord | None = None
        self._seen = -1
        self._since = 0.0

    def _open(self) -> None:
        self._since = time.monotonic()

    def _step(self) -> None:
        if self.recovered is not None:
            time.sleep(0.2)
            return
        # Step 1
        min_time = self.view.min_time()
        now = time.monotonic()
        if min_time != self._seen:
            self._seen, self._since = min_time, now
        elif min_time > 0 and now - self._since > self.timeout_s:
            # Step 2
            self.recovered = self._recover()
        time.sleep(0.1)

    def _recover(self) -> EpochRecord:
        # Imported here: the snapshots plan imports this package's siblings.
        from framework.runners.snapshots import restorer

        latest = read_latest(self.settings.zookeeper, self.graph.name)
        bootstrap = self.settings.kafka_bootstrap
        offsets = resolve_start(
            bootstrap, self.graph, offsets=None if latest is None else latest.offsets
        )
        # Step 3: the new epoch's record is all the others need to follow.
        return start_replay(
            self.settings,
            self.graph,
            offsets,
            reason=f"recovery: min time stalled at {self._seen} in epoch {self.epoch}",
            restore=restorer(self.settings, self.graph),
        )

    def _close(self) -> None:
        """Nothing of its own to release."""
