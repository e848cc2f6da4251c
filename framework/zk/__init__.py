"""ZooKeeper coordination (kazoo): committed snapshots, epochs and leader election.

Adapters only: ``framework.core`` never imports this package. The znode layout is in
`framework.zk.paths`; decisions in ``docs/decisions/snapshots-and-coordination.md``.
"""

from framework.zk.client import zk_client
from framework.zk.election import LeaderElection, Leadership
from framework.zk.epochs import Epochs
from framework.zk.paths import app_root, leader_path
from framework.zk.records import EpochRecord, Offsets, SnapshotRecord
from framework.zk.registry import SnapshotRegistry

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
    "zk_client",
]
