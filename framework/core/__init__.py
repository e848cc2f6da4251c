"""The pure FlameStream core: imports neither Spark, Kafka nor ZooKeeper."""

from framework.core.meta import Meta, Record
from framework.core.time import DEFAULT_DELTA_MS, GlobalTime, front_id, slot_of

__all__ = ["DEFAULT_DELTA_MS", "GlobalTime", "Meta", "Record", "front_id", "slot_of"]
