"""Figures, their Prometheus metrics, the console table and the watch server."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from framework.errors import ConfigError
from framework.runners.observe.console import LiveConsole, render_text
from framework.runners.observe.figures import (
    AckerFigures,
    BarrierFigures,
    Figures,
    StageFigures,
)
from framework.runners.observe.metrics import FiguresCollector
from framework.runners.observe.server import WatchServer


def _figures(n: int = 1) -> Figures:
    return Figures(
        "wc",
        at_ms=10_000 + 1_000 * n,
        min_time_ms=9_800 + 1_000 * n,
        stages=(
            StageFigures(
                "s0",
                batches=n,
                items_in=100 * n,
                items_out=90 * n,
                dead_letters=1,
                input_lag_ms=40,
                clock_ahead_ms=2_000,
                batch_p50_s=0.05,
                batch_p99_s=0.2,
            ),
        ),
        barriers=(
            BarrierFigures(
                "sink",
                bundles=10 * n,
                items_released=80 * n,
                latency_p50_s=0.3,
                latency_p99_s=0.9,
                release_p50_s=0.01,
                release_p99_s=0.02,
            ),
        ),
        acker=AckerFigures(2, batches=5 * n, published=7 * n, lag_records=3),
        snapshot_age_s=1.5,
        edges=(("s0", "sink"),),
    )


def _samples(figures: Figures) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(FiguresCollector(lambda: figures))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_follow_prometheus_conventions_and_carry_the_figures() -> None:
    samples = _samples(_figures(2))
    assert samples[("flamepipe_stage_items_in_total", (("app", "wc"), ("stage", "s0")))] == 200
    assert samples[("flamepipe_min_time_lag_seconds", (("app", "wc"),))] == pytest.approx(0.2)
    latency = (
        "flamepipe_end_to_end_latency_seconds",
        (("app", "wc"), ("quantile", "0.99"), ("sink", "sink")),
    )
    assert samples[latency] == pytest.approx(0.9)
    assert samples[("flamepipe_barrier_bundles_total", (("app", "wc"), ("sink", "sink")))] == 20
    assert samples[("flamepipe_acker_lag_records", (("app", "wc"),))] == 3
    ahead = ("flamepipe_stage_clock_ahead_seconds", (("app", "wc"), ("stage", "s0")))
    assert samples[ahead] == 2.0
    assert samples[("flamepipe_snapshot_age_seconds", (("app", "wc"),))] == 1.5
    counters = [name for name, _ in samples if name.endswith("_total")]
    assert counters and all(name.startswith("flamepipe_") for name, _ in samples)


def test_an_empty_process_reports_families_without_samples() -> None:
    samples = _samples(Figures("wc", at_ms=1))
    assert not any(name.startswith("flamepipe_stage") for name, _ in samples)


def test_console_table_shows_rates_lag_and_latency() -> None:
    text = render_text(_figures(2), _figures(1))
    assert "stage s0" in text and "barrier sink" in text
    assert "100/s" in text  # 200 - 100 items in over 1 s
    assert "200 ms behind the clock" in text
    assert "300/900 ms" in text and "20 bundles" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_live_console_off_a_terminal_draws_only_the_final_table() -> None:
    live = LiveConsole(lambda: _figures(3))
    assert not live.interactive  # pytest captures stderr
    live.start()
    assert "stage s0" in live.stop()


@pytest.fixture
def server() -> Iterator[WatchServer]:
    calls = iter(range(1, 10_000))
    watch = WatchServer(lambda: _figures(next(calls)), port=0)
    watch.start()
    yield watch
    watch.stop()


def _get(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.headers["Content-Type"], response.read()


def test_server_serves_the_page_the_feed_and_the_metrics(server: WatchServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    kind, page = _get(server.url)
    assert kind.startswith("text/html") and b'id="released-total"' in page
    kind, feed = _get(server.url + "figures")
    data = json.loads(feed)
    assert data["now"]["app"] == "wc" and data["now"]["min_time_lag_ms"] == 200
    kind, metrics = _get(server.url + "metrics")
    assert kind.startswith("text/plain") and b"flamepipe_stage_batches_total" in metrics
    with pytest.raises(urllib.error.HTTPError):
        _get(server.url + "nothing")


def test_a_taken_port_fails_in_one_line(server: WatchServer) -> None:
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    with pytest.raises(ConfigError, match="set ui_port"):
        WatchServer(_figures, port=port).start()
