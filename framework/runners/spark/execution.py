"""The one interface the runner sees a stage through, however Spark runs it.

A stage runs as a micro-batch query (`framework.runners.spark.queries.StageQuery`), as a
source stage fused with its keyed stage in one query
(`framework.runners.spark.fused_query.FusedQuery`), or as long-running tasks
(`framework.runners.spark.continuous.ContinuousQuery`). The runner, the supervisor and the
figures ask each the same questions; what differs (who heartbeats the fronts, who ticks
the windows, what a topic's reader still needs) is answered by the execution itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from framework.plan.stage_spec import StageSpec
    from framework.runners.spark.fronts import FrontHeartbeats
    from framework.runners.spark.queries import StageStats
    from framework.runners.spark.ticks import Due


class StageExecution(Protocol):
    """How one stage (or a fused pair) runs on Spark."""

    spec: StageSpec
    """The (first) stage's spec."""
    query: Any
    """Spark's streaming query, None for long-running tasks."""

    @property
    def stats(self) -> StageStats:
        """Its counts so far."""
        ...

    def recount(self) -> None:
        """Read the counts anew on the next `stats` (those read back from Kafka are
        cached for a while)."""
        ...

    def start(self, spark: SparkSession) -> None:
        """Start running on ``spark``; returns at once."""
        ...

    def stop(self) -> None:
        """Stop, waiting for the work in flight to end or be cancelled."""
        ...

    def restart(self, spark: SparkSession) -> None:
        """Stop and start again from what was committed."""
        ...

    def failure(self) -> str | None:
        """Why it stopped running, or None while it runs."""
        ...

    def batch_age_s(self) -> float | None:
        """How long the batch in flight has run (None: none is)."""
        ...

    def attach_fronts(self, fronts: FrontHeartbeats) -> bool:
        """Let the driver's front heartbeats cover this stage's source partitions, if it
        needs them to; whether it does."""
        ...

    def window_ticks(self) -> Due | None:
        """What the driver's window ticks must tick, if anything."""
        ...

    def trim_needs(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition) of an internal topic it reads, the offset it may still
        read from (`framework.operations.hygiene`)."""
        ...
