"""Engine-independent stage planning: a graph cut into stages, and what one task runs.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
