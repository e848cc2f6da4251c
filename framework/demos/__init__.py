"""Runnable demo jobs for the embedded stack (``flamepipe demo``).

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
