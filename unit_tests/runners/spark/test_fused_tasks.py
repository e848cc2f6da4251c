"""The map side of a fused query and its helpers, without Spark or Kafka (the reduce side
commits to Kafka: integration_tests/test_fused_stages.py)."""

from __future__ import annotations

import json

import pyarrow as pa

from framework.demos.wordcount import windowed_counts
from framework.plan.fusion import fuse
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import plan_stages
from framework.runners.spark import fused_tasks as ft
from framework.runners.spark.tasks import TaskContext
from framework.wire import auth
from framework.wire.frames import read_items


def test_partition_keys_give_each_unit_its_own_spark_partition() -> None:
    for units in (1, 2, 4, 7, 16):
        keys = ft.spark_partition_keys(units)
        assert len(set(keys)) == units
        assert [ft._murmur3_int(k) % units for k in keys] == list(range(units))
    # Spark's Murmur3_x86_32.hashInt(0, 42) and (1, 42), as Spark computes them.
    assert (ft._murmur3_int(0), ft._murmur3_int(1)) == (933211791, -559580957)


def test_headers_survive_the_shuffle_encoding() -> None:
    headers = (("fp.frame", b"1"), ("fp.mac", b"k1." + bytes(range(32))), ("empty", b""))
    assert ft._unpack_headers(ft._pack_headers(headers)) == headers
    assert ft._unpack_headers(None) == ()


def _context(units: int = 4) -> ft.FusedContext:
    graph = windowed_counts("wc", "lines", "out").graph()  # combinable: partials per pane
    (pair,) = fuse(plan_stages(graph, {graph.nodes[0].id: "lines"}))[1]
    partitions = {"lines": 2, pair.reduce.topic: units}
    source = graph.nodes[0].endpoint
    spec = StageSpec(graph, pair.map, partitions, 2, source, unacked_exit=pair.reduce.entry)
    keyed = StageSpec(graph, pair.reduce, partitions, 2, unacked_input=True)
    keyring = auth.Keyring((b"a-test-pipeline-key-0123456789abcdef",))
    return ft.FusedContext(
        TaskContext(spec, "kafka:9092", "r" * 32, 3, 0, keyring),
        TaskContext(keyed, "kafka:9092", "r" * 32, 3, 0, keyring),
        ft.spark_partition_keys(units),
    )


_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_KAFKA_ROWS = pa.schema(
    [
        ("topic", pa.string()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("ts", pa.int64()),
        ("headers", _HEADERS),
    ]
)


def _line(text: bytes, *, offset: int, ts: int) -> dict[str, object]:
    """A row of partition 1 of ``lines`` as the fused query reads it."""
    row = {"topic": "lines", "key": None, "value": text, "partition": 1, "offset": offset}
    return {**row, "ts": ts, "headers": None}


def test_the_map_side_sends_frames_to_units_acks_nothing_and_reports_its_partition() -> None:
    ctx = _context()
    auth.install(ctx.source.keyring)
    batch = pa.RecordBatch.from_pylist(
        [_line(b"a b c a", offset=7, ts=1_000_123), _line(b"d", offset=8, ts=1_000_456)],
        schema=_KAFKA_ROWS,
    )
    rows = ft._map(ctx, iter([batch]))
    frames = [r for r in rows if r["kind"] == ft._FRAME]
    (summary,) = [r for r in rows if r["kind"] == ft._SUMMARY]
    assert frames and all(r["topic"] == ctx.keyed.spec.stage.topic for r in frames)
    assert all(r["pkey"] == ctx.pkeys[r["unit"]] for r in rows)
    items = []
    for r in frames:
        headers = ft._unpack_headers(r["headers"])
        assert auth.authentic("test", r["topic"], r["key"], r["value"], headers, where="t")
        items += read_items(headers, r["value"], "t")
    # Combinable: one partial per word and pane, 4 words.
    assert sorted(payload.key for _, _, payload in items) == ["a", "b", "c", "d"]
    reported = json.loads(summary["value"])
    assert (summary["unit"], reported["partition"], reported["records_in"]) == (1, 1, 2)
    assert reported["source_row"] and reported["max_timestamp_ms"] == 1_000_456
