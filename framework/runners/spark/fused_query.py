"""Driver side of a fused query: a source stage and the keyed stage it alone feeds.

The query reads the source topic and the keyed stage's topic, which now carries only the
driver's window ticks, as one stream (a union of two Kafka sources), and runs
``mapInArrow(map side) -> repartition(units) -> mapInArrow(reduce side)`` per micro-batch
(`framework.runners.spark.fused_tasks`; the argument: docs/decisions/fused-stages.md).
Registered under the source stage's id, it is what the fronts heartbeat by: its source
rows carry the source partitions' timestamps.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from framework.config import Settings
from framework.core.graph import Kind
from framework.plan.stage_spec import StageSpec
from framework.runners.spark.fused_tasks import (
    MAP_SCHEMA,
    FusedContext,
    map_task,
    reduce_task,
    spark_partition_keys,
)
from framework.runners.spark.queries import StageQuery, summary_type
from framework.runners.spark.storage import read_or_create_run_id
from framework.runners.spark.ticks import Due

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# As a stage reads its topic (queries._COLUMNS), plus the topic: the union has two.
_COLUMNS = ("topic", "key", "value", "partition", "offset", "unix_millis(timestamp) AS ts")
_NO_HEADERS = "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers"


class FusedQuery(StageQuery):
    """The query of source stage ``spec`` fused with keyed stage ``keyed``.

    ``min_time`` is the keyed stage's (what completes its windows and prunes its
    groupings); the map side is stateless.
    """

    def __init__(  # noqa: PLR0917 - StageQuery's arguments and the keyed stage's spec
        self,
        spec: StageSpec,
        keyed: StageSpec,
        bootstrap: str,
        checkpoint: str,
        settings: Settings,
        min_time: Any,
        *,
        starting_offsets: str = "earliest",
    ) -> None:
        super().__init__(
            spec, bootstrap, checkpoint, settings, min_time, starting_offsets=starting_offsets
        )
        self.keyed = keyed
        self.pkeys = spark_partition_keys(keyed.partitions[keyed.stage.topic])
        self.stats.fused = True
        self.ticks = FusedTicks(self)

    @property
    def name(self) -> str:
        """Both stage ids."""
        return f"{self.spec.stage.id}+{self.keyed.stage.id}"

    def _units(self) -> int:
        return len(self.pkeys)

    def start(self, spark: SparkSession) -> None:
        """Start the query over the source topic and the tick topic."""
        self.run_id = read_or_create_run_id(spark, self.checkpoint)
        source_headers = self._headers()
        source = self._reader(
            spark, self.spec.stage.topic, self.starting_offsets, self.max_batch_records
        ).selectExpr(*_COLUMNS, "headers" if source_headers else _NO_HEADERS)
        # The tick topic is this epoch's: it starts at its beginning.
        ticks = self._reader(
            spark, self.keyed.stage.topic, "earliest", self.max_batch_records, headers=True
        ).selectExpr(*_COLUMNS, "headers")
        self._write(source.unionByName(ticks))

    def _run_batch(self, frame: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        ctx = FusedContext(
            self._context(self.spec, batch_id, 0),
            self._context(self.keyed, batch_id, self.min_time()),
            self.pkeys,
        )
        rows = (
            frame.mapInArrow(map_task(ctx), MAP_SCHEMA)
            .repartition(len(self.pkeys), "pkey")
            .mapInArrow(reduce_task(ctx), summary_type())
            .collect()
        )
        self._count(rows, started)

    def window_ticks(self) -> Due | None:
        """A keyed aggregate: ticks go to its topic, one partition per unit."""
        kind = self.keyed.graph.node(self.keyed.stage.entry).kind
        return self.ticks if kind is Kind.AGGREGATE else None

    def trim_needs(self) -> dict[tuple[str, int], int]:
        """The tick topic below the offsets the last completed batch read to."""
        topic = self.keyed.stage.topic
        return {(topic, p): o for p, o in self.completed_offsets(topic).items()}


class FusedTicks:
    """A fused query as `WindowTicks` sees an aggregate stage: ticks go to the keyed
    stage's topic, one partition per unit."""

    def __init__(self, query: FusedQuery) -> None:
        self.query = query

    @property
    def topic(self) -> str:
        """The keyed stage's topic (ticks only, when fused)."""
        return self.query.keyed.stage.topic

    def min_time(self) -> int:
        """The keyed stage's min time."""
        return int(self.query.min_time())

    def ticks_due(self, min_time: int, now: float, retry_s: float) -> list[int]:
        """Units whose next window ``min_time`` completes, without a recent tick."""
        return self.query.ticks_due(min_time, now, retry_s)
