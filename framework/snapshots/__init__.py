"""Snapshots of grouping state taken from the changelogs, and restoring a new epoch from one.

FlameStream's snapshotting, read from durable state instead of asked of the operations:
``docs/decisions/snapshots-from-changelogs.md``. `SnapshotCoordinator` takes and commits
snapshots; `restore_epoch` seeds a new epoch's changelogs from one; `replay_offsets` says
where sources start after a slot.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
