"""flamepipe: exactly-once stream pipelines on Kafka, with operators on Spark."""

from framework.core.context import Message
from framework.core.joins import Joined
from framework.core.meta import Meta, Record
from framework.core.reducers import Max, Mean, Min, Sum, Tally
from framework.core.time import GlobalTime
from framework.core.windows import KeyValue, WindowResult
from framework.errors import FlamepipeError, PipelineError
from framework.pipeline import (
    Count,
    KeyedStream,
    Loop,
    Pipeline,
    Session,
    Sink,
    Sliding,
    Source,
    Stream,
    Tumbling,
)

__all__ = ["FlamepipeError", "GlobalTime", "Meta", "Record"]
__all__ += [
    "Count",
    "Joined",
    "KeyValue",
    "KeyedStream",
    "Loop",
    "Max",
    "Mean",
    "Message",
    "Min",
    "Pipeline",
    "PipelineError",
    "Session",
    "Sink",
    "Sliding",
    "Source",
    "Stream",
    "Sum",
    "Tally",
    "Tumbling",
    "WindowResult",
]
__version__ = "0.1.0"
