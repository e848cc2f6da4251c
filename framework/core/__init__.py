"""The pure FlameStream core: imports neither Spark, Kafka nor ZooKeeper."""

from framework.core.acker.local import LocalAcker
from framework.core.acker.sharded import AckerShard, MinTimeListener, ShardedAcker, ShardRouter
from framework.core.acker.tracker import Acker
from framework.core.barrier import Barrier, Bundle
from framework.core.graph import Graph, Kind, Node, Port, Segments, Sink, Source
from framework.core.grouping import Grouping
from framework.core.messages import (
    Ack,
    BundleHeader,
    Heartbeat,
    MinTimeNotification,
    NodeTime,
)
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash, op_id_of
from framework.core.time import DEFAULT_DELTA_MS, GlobalTime, front_id, slot_of
from framework.core.windows import (
    Aggregation,
    Count,
    KeyValue,
    Sliding,
    Tumbling,
    WindowAggregator,
    WindowResult,
)

__all__ = ["DEFAULT_DELTA_MS", "GlobalTime", "Meta", "Record", "front_id", "slot_of"]
__all__ += [
    "Aggregation",
    "Count",
    "Graph",
    "Grouping",
    "KeyValue",
    "Keyed",
    "Kind",
    "Node",
    "Port",
    "Segments",
    "Sink",
    "Sliding",
    "Source",
    "Tumbling",
    "WindowAggregator",
    "WindowResult",
    "key_hash",
    "op_id_of",
]
__all__ += [
    "Ack",
    "Acker",
    "AckerShard",
    "Barrier",
    "Bundle",
    "BundleHeader",
    "Heartbeat",
    "LocalAcker",
    "MinTimeListener",
    "MinTimeNotification",
    "NodeTime",
    "ShardRouter",
    "ShardedAcker",
]
