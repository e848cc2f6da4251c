"""State backends: durable snapshots of stateful operations' hash units.

Adapters only: ``framework.core`` produces and restores the state, this package stores it.
`StateBackend` is the interface; `MemoryBackend`, `FileBackend` and `RocksBackend` the
implementations; `open_backend` picks one from `Settings`; `SnapshotWriter` saves off the
processing thread. Decision and layout: ``docs/decisions/snapshots-and-coordination.md``.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
