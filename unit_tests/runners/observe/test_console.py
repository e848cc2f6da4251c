"""The live table keeps every figure whole in 80 columns; long names are shortened."""

from __future__ import annotations

from framework.runners.observe.console import render_text
from framework.runners.observe.figures import BarrierFigures, Figures, StageFigures


def figures(at_ms: int, scale: int) -> Figures:
    stages = (
        StageFigures(
            "source-crashb4ac35-lines-with-a-long-name",
            items_in=12_000 * scale,
            items_out=66_438 * scale,
            dead_letters=1_234,
            input_lag_ms=87_714,
            batch_p50_s=3.24,
            batch_p99_s=15.85,
        ),
        StageFigures("aggregate", items_in=18_432 * scale, items_out=13_512, input_lag_ms=7_166),
    )
    barriers = (
        BarrierFigures(
            "sink-crashb4ac35-out",
            bundles=4_321,
            items_in=52_666 * scale,
            items_released=52_600 * scale,
            latency_p50_s=0.63,
            latency_p99_s=0.76,
        ),
    )
    return Figures("crashb4ac35", at_ms, 1_900, stages=stages, barriers=barriers)


def test_figures_are_never_cut_and_lines_fit_80_columns() -> None:
    text = render_text(figures(12_000, 1_000), figures(2_000, 10))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    for number in ("12.0M", "66.4M", "87.7 s", "1,234", "3.2/15.8 s", "4,321 bundles", "13,512"):
        assert number in text, f"{number} cut:\n{text}"
    assert "1.2M/s" in text and "7,166 ms" in text and "630/760 ms" in text, text
    assert "stage source-" in text and "…" in text  # the long name, shortened
    assert "barrier sink-crashb4ac35-out" in text or "barrier sink-" in text
