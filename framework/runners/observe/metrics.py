"""Prometheus metrics of a pipeline process, read from its `Figures` at each scrape.

A collector, not counters in the data path: every scrape takes one `Figures` (driver,
acker or barrier process) and reports it. Names follow Prometheus conventions
(``flamepipe_`` prefix, base units, ``_total`` for counters); labels are ``app`` and
``stage`` or ``sink``. Quantiles are over the last 1 000 observations of their kind.

=====================================================  =======  ==============================
metric                                                 type     what
=====================================================  =======  ==============================
flamepipe_stage_batches_total                          counter  micro-batches run
flamepipe_stage_records_in_total                       counter  Kafka records read
flamepipe_stage_items_in_total / _items_out_total      counter  items in / out of the stage
flamepipe_stage_dead_letters_total                     counter  records sent to the DLQ
flamepipe_stage_tombstones_total                       counter  repairs (tombstones) emitted
flamepipe_stage_replayed_total                         counter  results released before restore
flamepipe_stage_state_moves_total                      counter  partitions that changed worker
flamepipe_stage_input_lag_seconds                      gauge    now - latest input timestamp
flamepipe_stage_clock_ahead_seconds                    gauge    task clock - broker clock
flamepipe_stage_batch_duration_seconds{quantile}       gauge    micro-batch duration
flamepipe_min_time_lag_seconds                         gauge    how far min time is behind
flamepipe_barrier_bundles_total / _commits_total       counter  bundles / transactions
flamepipe_barrier_items_released_total                 counter  items in committed bundles
flamepipe_barrier_refused_total                        counter  unauthenticated records
flamepipe_barrier_replays_dropped_total                counter  items at or before GT_last
flamepipe_barrier_bundle_items                         gauge    mean items per bundle
flamepipe_barrier_release_seconds{quantile}            gauge    min time seen -> bundle out
flamepipe_barrier_commit_seconds{quantile}             gauge    one write (transaction)
flamepipe_end_to_end_latency_seconds{quantile}         gauge    append -> committed output
flamepipe_acker_batches_total / _published_total       counter  ack batches / min times
flamepipe_acker_refused_total{reason}                  counter  future or replayed batches
flamepipe_acker_lag_records                            gauge    acks not yet applied
flamepipe_snapshot_age_seconds                         gauge    now - committed snapshot
flamepipe_records_refused_total{reader}                counter  records without a valid MAC
=====================================================  =======  ==============================

Example::

    >>> from prometheus_client import CollectorRegistry, generate_latest
    >>> registry = CollectorRegistry()
    >>> registry.register(FiguresCollector(lambda: Figures("demo", 1000, 900)))
    >>> b"flamepipe_min_time_lag_seconds" in generate_latest(registry)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from framework.runners.observe.figures import BarrierFigures, Figures, StageFigures
from framework.wire import auth


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class FiguresCollector(Collector):
    """Reports ``figures()`` at every scrape (see the module docstring)."""

    def __init__(self, figures: Callable[[], Figures]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        f = self._figures()
        yield from _stage_metrics(f)
        yield from _barrier_metrics(f)
        yield from _acker_metrics(f)
        lag = _gauge("flamepipe_min_time_lag_seconds", "How far min time is behind", ["app"])
        if f.min_time_lag_ms is not None:
            lag.add_metric([f.app], f.min_time_lag_ms / 1000)
        yield lag
        age = _gauge("flamepipe_snapshot_age_seconds", "Age of the committed snapshot", ["app"])
        if f.snapshot_age_s is not None:
            age.add_metric([f.app], f.snapshot_age_s)
        yield age
        refused = _counter(
            "flamepipe_records_refused", "Records without a valid MAC, never decoded", ["reader"]
        )
        for reader, count in sorted(auth.refused.items()):
            refused.add_metric([reader], count)
        yield refused


Row = TypeVar("Row", StageFigures, BarrierFigures)


def _counter_families(
    prefix: str,
    counters: dict[str, tuple[str, Callable[[Row], int]]],
    labels: list[str],
    app: str,
    rows: tuple[Row, ...],
) -> Iterator[Metric]:
    """One counter family per entry of ``counters``, a sample per row (labelled by its name)."""
    for name, (doc, value) in counters.items():
        family = _counter(f"{prefix}{name}", doc, labels)
        for row in rows:
            family.add_metric(
                [app, row.stage if isinstance(row, StageFigures) else row.sink], value(row)
            )
        yield family


def _stage_metrics(f: Figures) -> Iterator[Metric]:
    labels = ["app", "stage"]
    counters: dict[str, tuple[str, Callable[[StageFigures], int]]] = {
        "batches": (
            "Micro-batches run (continuous stages: transactions committed)",
            lambda s: s.batches,
        ),
        "records_in": ("Kafka records read", lambda s: s.records_in),
        "items_in": ("Items into the stage", lambda s: s.items_in),
        "items_out": ("Items out of the stage", lambda s: s.items_out),
        "dead_letters": ("Records sent to the dead-letter topic", lambda s: s.dead_letters),
        "tombstones": ("Tombstones emitted (repairs)", lambda s: s.tombstones),
        "replayed": (
            "Aggregate results an earlier epoch released, not emitted again after a restore",
            lambda s: s.replayed,
        ),
        "state_moves": ("Partitions whose task ran in another worker", lambda s: s.moves),
    }
    yield from _counter_families("flamepipe_stage_", counters, labels, f.app, f.stages)
    lag = _gauge("flamepipe_stage_input_lag_seconds", "Now - latest input timestamp", labels)
    ahead = _gauge(
        "flamepipe_stage_clock_ahead_seconds",
        "How far a continuous source task's clock runs ahead of the broker's",
        labels,
    )
    batch = _gauge(
        "flamepipe_stage_batch_duration_seconds", "Micro-batch duration", [*labels, "quantile"]
    )
    for stage in f.stages:
        if stage.input_lag_ms is not None:
            lag.add_metric([f.app, stage.stage], stage.input_lag_ms / 1000)
        if stage.clock_ahead_ms is not None:
            ahead.add_metric([f.app, stage.stage], stage.clock_ahead_ms / 1000)
        for q, seconds in (("0.5", stage.batch_p50_s), ("0.99", stage.batch_p99_s)):
            if seconds is not None:
                batch.add_metric([f.app, stage.stage, q], seconds)
    yield lag
    yield ahead
    yield batch


def _barrier_metrics(f: Figures) -> Iterator[Metric]:
    labels = ["app", "sink"]
    barrier_counters: dict[str, tuple[str, Callable[[BarrierFigures], int]]] = {
        "barrier_bundles": ("Bundles committed", lambda b: b.bundles),
        "barrier_commits": ("Transactions committed", lambda b: b.commits),
        "barrier_items_released": ("Items in committed bundles", lambda b: b.items_released),
        "barrier_refused": ("Pre-barrier records refused (no valid MAC)", lambda b: b.refused),
        "barrier_replays_dropped": (
            "Items dropped at or before GT_last",
            lambda b: b.replays_dropped,
        ),
        "barrier_aborts": ("Bundle transactions aborted", lambda b: b.aborts),
    }
    yield from _counter_families("flamepipe_", barrier_counters, labels, f.app, f.barriers)
    size = _gauge("flamepipe_barrier_bundle_items", "Mean items per bundle", labels)
    for b in f.barriers:
        size.add_metric([f.app, b.sink], b.mean_bundle_items)
    yield size
    timings = {
        "barrier_release_seconds": ("Min time seen -> bundle committed", "release"),
        "barrier_commit_seconds": ("One write (transaction) of the barrier", "write"),
        "end_to_end_latency_seconds": ("Append -> committed output", "latency"),
    }
    for name, (doc, field) in timings.items():
        timing = _gauge(f"flamepipe_{name}", doc, [*labels, "quantile"])
        for b in f.barriers:
            for q, suffix in (("0.5", "p50"), ("0.99", "p99")):
                seconds = getattr(b, f"{field}_{suffix}_s")
                if seconds is not None:
                    timing.add_metric([f.app, b.sink, q], seconds)
        yield timing


def _acker_metrics(f: Figures) -> Iterator[Metric]:
    a = f.acker
    batches = _counter("flamepipe_acker_batches", "Ack batches applied", ["app"])
    published = _counter("flamepipe_acker_published", "Min-time reports published", ["app"])
    refused = _counter("flamepipe_acker_refused", "Ack batches refused", ["app", "reason"])
    lag = _gauge("flamepipe_acker_lag_records", "Ack records not yet applied", ["app"])
    if a is not None:
        batches.add_metric([f.app], a.batches)
        published.add_metric([f.app], a.published)
        refused.add_metric([f.app, "future"], a.refused_future)
        refused.add_metric([f.app, "replayed"], a.refused_replays)
        if a.lag_records is not None:
            lag.add_metric([f.app], a.lag_records)
    yield from (batches, published, refused, lag)
