"""A live console for a running pipeline (``rich``): one table, refreshed every second.

Per stage records/s, items in and out, input lag and dead letters; per barrier bundles,
released items/s and end-to-end latency p50/p99; min time as a timestamp and its lag
behind the clock. On a terminal it redraws in place (log lines scroll above it); elsewhere
(CI, a pipe) it prints nothing until `stop`, which prints the final table once, so a log
stays short.

Example::

    >>> from framework.runners.observe.figures import Figures, StageFigures
    >>> f = Figures("demo", 2_000, 1_900, stages=(StageFigures("s0", items_in=10),))
    >>> "s0" in render_text(f, None)
    True
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from framework.runners.observe.figures import Figures


def _count(n: int) -> str:
    """A count in at most 7 characters: exact below a million, else 12.3M, 4.5G."""
    if n < 1_000_000:
        return f"{n:,}"
    if n < 1_000_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e9:.1f}G"


def _rate(now: int, before: int | None, seconds: float) -> str:
    if before is None or seconds <= 0:
        return "-"
    return f"{_count(round(max(0, now - before) / seconds))}/s"


def _duration(ms: float) -> str:
    return f"{ms:,.0f} ms" if ms < 10_000 else f"{ms / 1000:,.1f} s"


def _pair_ms(p50: float | None, p99: float | None) -> str:
    if p50 is None or p99 is None:
        return "-"
    if p99 < 10:
        return f"{p50 * 1000:.0f}/{p99 * 1000:.0f} ms"
    return f"{p50:.1f}/{p99:.1f} s"


_COLUMNS = ("", "rate", "in", "out", "lag", "dlq", "p50/p99")


def render(f: Figures, previous: Figures | None, width: int = 80) -> Group:
    """The table of ``f`` (rates against ``previous``) in ``width`` columns: every figure
    whole (counts of millions as 12.3M, seconds past 10 s as 12.3 s), the stage and sink
    names shortened with an ellipsis to what is left."""
    seconds = (f.at_ms - previous.at_ms) / 1000 if previous is not None else 0.0
    before_stage = {s.stage: s for s in previous.stages} if previous else {}
    before_sink = {b.sink: b for b in previous.barriers} if previous else {}
    rows: list[tuple[str, ...]] = []
    for s in f.stages:
        old = before_stage.get(s.stage)
        rows.append(
            (
                f"stage {s.stage}",
                _rate(s.items_in, old.items_in if old else None, seconds),
                _count(s.items_in),
                _count(s.items_out),
                "-" if s.input_lag_ms is None else _duration(s.input_lag_ms),
                _count(s.dead_letters),
                _pair_ms(s.batch_p50_s, s.batch_p99_s),
            )
        )
    for b in f.barriers:
        old_b = before_sink.get(b.sink)
        rows.append(
            (
                f"barrier {b.sink}",
                _rate(b.items_released, old_b.items_released if old_b else None, seconds),
                _count(b.items_in),
                _count(b.items_released),
                f"{_count(b.bundles)} bundles",
                "",
                _pair_ms(b.latency_p50_s, b.latency_p99_s),
            )
        )
    return Group(_head(f), _table(rows, width), Text(_FOOT, style="dim"))


_FOOT = "p50/p99: a barrier's append-to-output latency, a micro-batch stage's batch"
_NAME_MIN = 8


def _table(rows: list[tuple[str, ...]], width: int) -> Table:
    """Figures keep their width; the name column takes what is left, at least a few
    characters (a figure is never cut: a line may then wrap, a number never loses digits)."""
    figures = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS)][1:]
    names = max((len(r[0]) for r in rows), default=0)
    room = width - sum(w + 2 for w in figures) - 2  # padding: a space each side of a cell
    table = Table(title=None, expand=False, box=None, padding=(0, 1))
    table.add_column(
        "",
        justify="left",
        no_wrap=True,
        overflow="ellipsis",
        max_width=max(_NAME_MIN, min(names, room)),
    )
    for column, figure in zip(_COLUMNS[1:], figures, strict=True):
        table.add_column(column, justify="right", no_wrap=True, min_width=figure)
    for row in rows:
        table.add_row(*row)
    return table


def _head(f: Figures) -> Text:
    head = Text(f"flamepipe {f.app}  ", style="bold")
    if f.min_time_ms is not None:
        stamp = time.strftime("%H:%M:%S", time.gmtime(f.min_time_ms / 1000))
        head.append(f"min time {stamp}.{f.min_time_ms % 1000:03d} UTC, ")
        head.append(f"{f.min_time_lag_ms:,} ms behind the clock")
    else:
        head.append("min time: not yet")
    return head


def render_text(f: Figures, previous: Figures | None, width: int = 80) -> str:
    """`render` as plain text (a final summary, a log)."""
    console = Console(width=width, file=None, force_terminal=False, color_system=None)
    with console.capture() as capture:
        console.print(render(f, previous, width))
    return capture.get()


class LiveConsole:
    """Redraws ``figures()`` every ``refresh_s`` on stderr (see the module docstring)."""

    def __init__(self, figures: Callable[[], Figures], refresh_s: float = 1.0) -> None:
        self._figures = figures
        self._console = Console(file=sys.stderr)
        self._previous: Figures | None = None
        self._last: Figures | None = None
        self._live: Live | None = None
        self._refresh_s = refresh_s

    @property
    def interactive(self) -> bool:
        """Whether stderr is a terminal (redrawn in place) or not (final table only)."""
        return self._console.is_terminal

    def start(self) -> None:
        """Start redrawing (on a terminal)."""
        if not self.interactive:
            return
        self._live = Live(
            self._render(),
            console=self._console,
            refresh_per_second=1 / self._refresh_s,
            redirect_stderr=True,
            transient=True,
            get_renderable=self._render,
        )
        self._live.start()

    def _render(self) -> Group:
        try:
            now = self._figures()
        except Exception:  # a part stopping under the console: keep the last picture
            if self._last is None:
                return Group(Text("flamepipe: starting"))
            now = self._last
        if self._last is None or now.at_ms - self._last.at_ms >= 900:
            self._previous, self._last = self._last, now
        return render(now, self._previous, self._console.width)

    def stop(self) -> str:
        """Stop redrawing; returns the final table as text (for a summary)."""
        live, self._live = self._live, None
        if live is not None:
            live.stop()
        final: Figures | None
        try:
            final = self._figures()
        except Exception:  # stopped under us: the last picture is the final one
            final = self._last
        return "" if final is None else render_text(final, self._previous)
