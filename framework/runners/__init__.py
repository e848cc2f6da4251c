"""Runners: where a pipeline's stages and services run, assembled once.

`assembly` builds the `ServiceSet` of a pipeline (view, acker, snapshots, stall watch,
barriers) for every runner and for the ``flamepipe acker|barrier`` commands; `spark` runs
the stages as Structured Streaming queries; `inprocess` runs the same graph in one process
with the real acker and barrier; `replay` and `recovery` start new epochs.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
