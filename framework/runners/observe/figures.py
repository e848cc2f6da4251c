"""A pipeline's figures at one moment, read from the counters its parts keep.

Nothing here counts: stage queries (`StageStats`), barriers (`BarrierStats`), the acker and
the min-time view keep their counters, and `Figures` is a consistent-enough copy of them
taken when asked (a scrape, a console refresh, the page's poll), so watching costs the
data path nothing.

Example::

    >>> f = Figures(app="demo", at_ms=10_000, min_time_ms=9_500)
    >>> f.min_time_lag_ms
    500
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from framework.barrier.stats import quantiles

if TYPE_CHECKING:
    from framework.acker.service import AckerService
    from framework.barrier.service import BarrierService
    from framework.runners.assembly import ServiceSet
    from framework.runners.spark.queries import StageStats
    from framework.runners.spark.runner import PipelineRun


@dataclass(frozen=True, slots=True)
class StageFigures:
    """One stage: totals since start, its input lag and recent micro-batch durations."""

    stage: str
    batches: int = 0
    records_in: int = 0
    items_in: int = 0
    items_out: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    replayed: int = 0
    moves: int = 0
    input_lag_ms: int | None = None  # now - the latest input timestamp a batch read
    batch_p50_s: float | None = None
    batch_p99_s: float | None = None
    # Continuous source stages: the most any of its tasks' clocks runs ahead of the
    # broker's (None: not measured, as in micro-batches, whose driver heartbeats).
    clock_ahead_ms: int | None = None


@dataclass(frozen=True, slots=True)
class BarrierFigures:
    """One sink's barrier (instance): bundles, items, drops and recent timings; ``sink`` is
    the sink node, with ``.k`` for its instance k > 0."""

    sink: str
    bundles: int = 0
    commits: int = 0
    items_in: int = 0
    items_released: int = 0
    refused: int = 0
    replays_dropped: int = 0
    aborts: int = 0
    released_through_ms: int = 0
    release_p50_s: float | None = None
    release_p99_s: float | None = None
    write_p50_s: float | None = None
    write_p99_s: float | None = None
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None

    @property
    def mean_bundle_items(self) -> float:
        """Items per bundle since start."""
        return self.items_released / self.bundles if self.bundles else 0.0


@dataclass(frozen=True, slots=True)
class AckerFigures:
    """The acker: batches applied, min times published, what it refused, how far behind."""

    shards: int
    batches: int = 0
    published: int = 0
    checkpoints: int = 0
    refused_future: int = 0
    refused_replays: int = 0
    lag_records: int | None = None  # acks written but not yet read, over its shards


@dataclass(frozen=True, slots=True)
class Figures:
    """A pipeline's figures at ``at_ms`` (wall clock, ms)."""

    app: str
    at_ms: int
    min_time_ms: int | None = None  # the global min time as a wall-clock stamp
    stages: tuple[StageFigures, ...] = ()
    barriers: tuple[BarrierFigures, ...] = ()
    acker: AckerFigures | None = None
    snapshot_age_s: float | None = None
    edges: tuple[tuple[str, str], ...] = ()  # the stage graph: (from, to) of stages, sinks

    @property
    def min_time_lag_ms(self) -> int | None:
        """How far min time is behind the clock."""
        return None if self.min_time_ms is None else max(0, self.at_ms - self.min_time_ms)

    @property
    def dead_letters(self) -> int:
        """Dead letters over all stages."""
        return sum(s.dead_letters for s in self.stages)

    def as_json(self) -> dict[str, Any]:
        """The figures as JSON-ready data (the live page's feed)."""
        out = asdict(self)
        out["min_time_lag_ms"] = self.min_time_lag_ms
        out["dead_letters"] = self.dead_letters
        return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def stage_figures(stage: str, stats: StageStats, now_ms: int) -> StageFigures:
    """`StageFigures` from a stage's running totals."""
    latest = max(stats.last_timestamp_ms.values(), default=-1)
    batch = quantiles(list(stats.batch_s))
    return StageFigures(
        stage,
        batches=stats.batches,
        records_in=stats.records_in,
        items_in=stats.items_in,
        items_out=stats.items_out,
        dead_letters=stats.dead_letters,
        tombstones=stats.tombstones,
        replayed=stats.replayed,
        moves=stats.moves,
        input_lag_ms=max(0, now_ms - latest) if latest >= 0 else None,
        batch_p50_s=batch[0] if batch else None,
        batch_p99_s=batch[1] if batch else None,
        clock_ahead_ms=max(stats.clock_ahead_ms.values(), default=None),
    )


def barrier_figures(barrier: BarrierService) -> BarrierFigures:
    """`BarrierFigures` of a running barrier service."""
    stats = barrier.stats
    release, write, latency = (
        quantiles(list(values)) for values in (stats.release_s, stats.write_s, stats.latency_s)
    )
    # A sink's barrier instances are rows of their own: "<sink>", "<sink>.1", ...
    name = barrier.sink_node + (f".{barrier.instance}" if barrier.instance else "")
    return BarrierFigures(
        name,
        bundles=stats.bundles,
        commits=stats.commits,
        items_in=stats.items_in,
        items_released=stats.items_released,
        refused=stats.refused,
        replays_dropped=barrier.replays_dropped,
        aborts=stats.aborts,
        released_through_ms=barrier.released_through() * barrier.delta_ms,
        release_p50_s=release[0] if release else None,
        release_p99_s=release[1] if release else None,
        write_p50_s=write[0] if write else None,
        write_p99_s=write[1] if write else None,
        latency_p50_s=latency[0] if latency else None,
        latency_p99_s=latency[1] if latency else None,
    )


def acker_figures(acker: AckerService) -> AckerFigures:
    """`AckerFigures` of a running acker service."""
    return AckerFigures(
        len(acker.partitions),
        batches=acker.batches,
        published=acker.published,
        checkpoints=acker.checkpoints,
        refused_future=acker.refused_future,
        refused_replays=acker.refused_replays,
        lag_records=acker.lag(),
    )


def _edges(run: PipelineRun) -> tuple[tuple[str, str], ...]:
    edges: list[tuple[str, str]] = []
    for query in run.queries.values():
        keyed = getattr(query, "keyed", None)  # a fused query's keyed stage (FusedQuery)
        for spec in (query.spec, *([keyed] if keyed is not None else [])):
            for exit_ in spec.stage.exits.values():
                edges.append((spec.stage.id, exit_.target))
    return tuple(edges)


def run_figures(run: PipelineRun, now_ms: int | None = None) -> Figures:
    """The figures of a pipeline run on this driver (its embedded services included)."""
    now_ms = _now_ms() if now_ms is None else now_ms
    view = run.services.view
    delta = run.graph.delta_ms
    min_time = view.min_time() if view is not None else None
    acker = run.services.acker
    committed = run.committed_slot_now()
    return Figures(
        run.graph.name,
        now_ms,
        min_time_ms=min_time * delta if min_time is not None and min_time > 0 else None,
        stages=tuple(stage_figures(s, stats, now_ms) for s, stats in run.stats.items()),
        barriers=tuple(barrier_figures(b) for b in run.barriers()),
        acker=acker_figures(acker) if acker is not None else None,
        snapshot_age_s=(now_ms - committed * delta) / 1000 if committed else None,
        edges=_edges(run),
    )


def service_figures(app: str, services: ServiceSet | None, delta_ms: int) -> Figures:
    """The figures of a standalone acker or barrier process: its current services (None
    while it stands by or starts)."""
    if services is None:
        return Figures(app, _now_ms())
    view = services.view
    slot = view.min_time() if view is not None else 0
    return Figures(
        app,
        _now_ms(),
        min_time_ms=slot * delta_ms if slot > 0 else None,
        barriers=tuple(barrier_figures(b) for b in services.barriers),
        acker=acker_figures(services.acker) if services.acker is not None else None,
    )
