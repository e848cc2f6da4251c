"""ZooKeeper coordination (kazoo): committed snapshots, epochs and leader election.

Adapters only: ``framework.core`` never imports this package. The znode layout is in
`framework.coordination.paths`; decisions in ``docs/decisions/snapshots-and-coordination.md``.
"""

from framework.coordination.client import zk_client
from framework.coordination.committed_snapshot import SnapshotRegistry, read_latest
from framework.coordination.election import LeaderElection, Leadership
from framework.coordination.epochs import Epochs, read_epoch
from framework.coordination.paths import app_root, leader_path
from framework.wire.znodes import EpochRecord, Offsets, SnapshotRecord

__all__ = [
    "EpochRecord",
    "Epochs",
    "LeaderElection",
    "Leadership",
    "Offsets",
    "SnapshotRecord",
    "SnapshotRegistry",
    "app_root",
    "leader_path",
    "read_epoch",
    "read_latest",
    "zk_client",
]
