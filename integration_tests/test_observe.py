"""Watching a run (issue: operability): the Prometheus endpoint is scraped during a run and
its values move; the live page is loaded by a real headless browser (Chromium) during a
run, its figures change, and its screenshot is a picture, not a blank page."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.config import Settings
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.runners.spark.runner import PipelineRun
from integration_tests.harness.runs import new_app, produce_lines, running
from integration_tests.harness.watch import scrape, total

_BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def busy_run(stack: Settings, spark: Any) -> Iterator[PipelineRun]:
    """Word pairs on Spark with lines produced in the background (about 200/s)."""
    app, source, sink = new_app("watch", "pairs")
    settings = stack.with_(parallelism=2)
    stop = threading.Event()

    def feed() -> None:
        seed = 0
        while not stop.is_set():
            produce_lines(settings.kafka_bootstrap, source, generate_lines(40, seed=seed), 2)
            seed += 1
            stop.wait(0.2)

    with running(settings, spark, word_pairs(app, source, sink)) as run:
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        try:
            yield run
        finally:
            stop.set()
            feeder.join(30)


def _until(check: Any, timeout_s: float = 90.0, what: str = "figures") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} did not move in time"
        time.sleep(0.5)


def test_prometheus_metrics_move_during_a_run(busy_run: PipelineRun) -> None:
    assert busy_run.watch is not None
    url = busy_run.watch.url
    _until(lambda: total(scrape(url), "flamepipe_barrier_items_released_total") > 0)
    first = scrape(url)
    _until(
        lambda: (
            total(scrape(url), "flamepipe_barrier_items_released_total")
            > total(first, "flamepipe_barrier_items_released_total")
        )
    )
    # Each counter moves while input flows (a continuous stage's counts are read from
    # what its tasks committed, up to a second late).
    for counter in (
        "flamepipe_stage_items_in_total",
        "flamepipe_stage_batches_total",
        "flamepipe_barrier_bundles_total",
        "flamepipe_acker_batches_total",
    ):
        _until(lambda c=counter: total(scrape(url), c) > total(first, c), 30, counter)
    second = scrape(url)
    app = busy_run.graph.name
    assert 0 <= second[f"flamepipe_min_time_lag_seconds|app={app}"] < 60
    latency = [k for k in second if k.startswith("flamepipe_end_to_end_latency_seconds")]
    assert latency and all(0 < second[k] < 60 for k in latency)
    assert total(second, "flamepipe_stage_dead_letters_total") == 0
    lags = [k for k in second if k.startswith("flamepipe_stage_input_lag_seconds")]
    assert lags


def _browser() -> str:
    for name in _BROWSERS:
        found = shutil.which(name)
        if found is not None:
            return found
    pytest.fail(
        "no headless Chromium: `make bootstrap` installs chromium-headless-shell (Debian) when "
        "run as root; install it (or chromium) to run the page test"
    )


def _chromium(browser: str, url: str, *args: str) -> str:
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--virtual-time-budget=4000", *args, url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _released(dom: str) -> int:
    found = re.search(r'id="released-total">([\d,]+)<', dom)
    assert found is not None, dom[:2000]
    return int(found.group(1).replace(",", ""))


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the filtered scanlines of a PNG (enough to tell blank from not)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_the_live_page_in_a_real_browser_shows_figures_that_change(
    busy_run: PipelineRun, tmp_path: Path
) -> None:
    browser = _browser()
    assert busy_run.watch is not None
    url = busy_run.watch.url
    _until(lambda: total(scrape(url), "flamepipe_barrier_items_released_total") > 0)
    first = _released(_chromium(browser, url, "--dump-dom"))
    assert first > 0
    _until(lambda: total(scrape(url), "flamepipe_barrier_items_released_total") > first)
    dom = _chromium(browser, url, "--dump-dom")
    assert _released(dom) > first
    assert busy_run.graph.name in dom  # the title names the pipeline
    assert "barrier →" in dom and "stage " in dom  # the graph is drawn
    shot = tmp_path / "page.png"
    _chromium(browser, url, f"--screenshot={shot}", "--window-size=1280,900")
    width, height, pixels = _png_pixels(shot)
    assert (width, height) == (1280, 900)
    # A blank page is one colour: its scanlines hold a handful of distinct bytes.
    assert len(set(pixels)) > 50, "the screenshot looks blank"
    assert shot.stat().st_size > 20_000
    if artifacts := os.environ.get("FLAMEPIPE_TEST_ARTIFACTS"):  # to look at it by eye
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / "live-page.png")
