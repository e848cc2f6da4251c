"""flamepipe: exactly-once stream pipelines on Kafka, with operators on Spark."""

from framework.core import GlobalTime, Meta, Record
from framework.errors import FlamepipeError

__all__ = ["FlamepipeError", "GlobalTime", "Meta", "Record"]
__version__ = "0.1.0"
