"""Watching a running pipeline: one set of figures, three ways to see them.

`figures` reads a pipeline's counters into a frozen `Figures` (per stage, per barrier, the
acker, min time); `metrics` exposes them to Prometheus; `server` serves them as a live
web page with the metrics beside it; `console` draws them in the terminal.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
