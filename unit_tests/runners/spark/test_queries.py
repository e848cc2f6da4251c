"""A stage's running totals: `framework.runners.spark.queries.StageStats`."""

from __future__ import annotations

from typing import Any

from framework.runners.spark.queries import StageStats


def _row(
    partition: int, worker: str, size: int = 0, ms: float = 0.0, *, source: bool = False
) -> dict[str, Any]:
    return {
        "source_row": source,
        "partition": partition,
        "records_in": 1,
        "items_in": 1,
        "items_out": 1,
        "dead_letters": 0,
        "tombstones": 0,
        "replayed": 0,
        "lifted": 0,
        "skipped": False,
        "max_timestamp_ms": 5,
        "worker": worker,
        "catchup_records": 1 if size else 0,
        "catchup_bytes": size,
        "catchup_ms": ms,
    }


def test_a_partition_on_another_worker_counts_as_a_move_with_its_catch_up() -> None:
    stats = StageStats()
    stats.add([_row(0, "h:1", 1000, 2.0), _row(1, "h:2", 500, 1.0)])  # first placement
    stats.add([_row(0, "h:1"), _row(1, "h:2")])  # stayed
    stats.add([_row(0, "h:2", 4000, 8.0), _row(1, "h:2")])  # partition 0 moved
    assert stats.moves == 1
    assert (stats.move_catchup_bytes, stats.move_catchup_ms) == (4000, 8.0)
    assert (stats.catchup_bytes, stats.catchup_ms) == (5500, 11.0)
    assert stats.workers == {0: "h:2", 1: "h:2"}


def test_a_fused_querys_source_rows_give_timestamps_and_its_unit_rows_placement() -> None:
    stats = StageStats(fused=True)
    unit = {**_row(0, "h:1"), "max_timestamp_ms": 99}
    stats.add([_row(0, "map-worker", source=True), unit])
    assert stats.last_timestamp_ms == {0: 5}  # the source partition's, not unit 0's
    assert stats.workers == {0: "h:1"}  # unit 0 ran there; the map side places nothing
    assert stats.records_in == 2


def test_the_summary_type_is_the_summary_schema() -> None:
    """Built once in Python, it must say what the DDL string says (the tasks' rows)."""
    from framework.runners.spark.queries import summary_type
    from framework.runners.spark.tasks import SUMMARY_SCHEMA

    spark_names = {"bigint": "LONG", "boolean": "BOOLEAN", "double": "DOUBLE", "string": "STRING"}
    built = [(f.name, spark_names[f.dataType.simpleString()]) for f in summary_type().fields]
    assert built == [tuple(part.strip().split(" ")) for part in SUMMARY_SCHEMA.split(",")]
