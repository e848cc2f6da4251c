"""The in-process runner: a whole pipeline in one process with the real acker and barrier,
in-memory sources and sinks, and delivery orders that provoke repairs (`framework.testing`
is its public face).

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
