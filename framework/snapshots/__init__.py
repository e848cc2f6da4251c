"""Snapshots of grouping state taken from the changelogs, and restoring a new epoch from one.

FlameStream's snapshotting, read from durable state instead of asked of the operations:
``docs/decisions/snapshots-from-changelogs.md``. `SnapshotCoordinator` takes and commits
snapshots; `restore_epoch` seeds a new epoch's changelogs from one; `replay_offsets` says
where sources start after a slot.
"""

from framework.snapshots.acceptance import BarrierMarks, accepted_slot, accepts, barrier_group
from framework.snapshots.coordinator import KEEP, SnapshotCoordinator, SnapshotStats
from framework.snapshots.copies import ChangelogCopies, UnitCopy
from framework.snapshots.offsets import replay_offsets
from framework.snapshots.restore import Restored, restore_epoch
from framework.snapshots.units import (
    UNIT_FORMAT,
    changelog_records,
    decode_unit,
    encode_unit,
    parse_unit,
    unit_name,
)

__all__ = [
    "KEEP",
    "UNIT_FORMAT",
    "BarrierMarks",
    "ChangelogCopies",
    "Restored",
    "SnapshotCoordinator",
    "SnapshotStats",
    "UnitCopy",
    "accepted_slot",
    "accepts",
    "barrier_group",
    "changelog_records",
    "decode_unit",
    "encode_unit",
    "parse_unit",
    "replay_offsets",
    "restore_epoch",
    "unit_name",
]
