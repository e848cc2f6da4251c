"""Runnable demo jobs for the embedded stack (``flamepipe demo``)."""

__all__: list[str] = []
