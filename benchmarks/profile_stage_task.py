"""In-process cost of the word_pairs stage tasks, without Spark or Kafka.

Runs what one micro-batch of each stage does inside its Python worker: the Arrow rows to
`InRecord`s (`executor._records`), `StageProgram.run`, and for the grouping stage the
changelog catch-up a task would pay to read back what it wrote itself. Reported per stage:
items per CPU second (process time, so other load on the machine counts less); with
``--profile`` also cProfile's top functions.

``--windowed``: the peer benchmark's windowed count (`windowed_counts`: a combinable
``aggregate`` whose windows all complete at the end of the batch) instead of word_pairs.
``--columns``: with ``--windowed``, the same count on columns
(`windowed_counts_on_columns`: batch operators and the built-in ``Sum``).
``--results-per-item``: an aggregate's window results leave one by one, not on columns
(`framework.plan.columnar.emit_results`). ``--group-only``: profile the second stage only;
``--cumulative``, ``--callers``: how cProfile's table is sorted, and its callers.

Run: ``.venv/bin/python benchmarks/profile_stage_task.py [lines] [words-per-line] [--profile]
[--windowed]``
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

import pyarrow as pa

from framework.core.graph import Kind
from framework.demos.text import generate_lines
from framework.demos.wordcount import windowed_counts, windowed_counts_on_columns, word_pairs
from framework.plan.stage_spec import StageSpec, TaskResult
from framework.plan.stage_state import apply_changelog
from framework.plan.stages import plan_stages
from framework.plan.task import StageProgram
from framework.runners.spark.tasks import read_records
from framework.wire.auth import Keyring, install, signed
from framework.wire.records import InRecord, OutRecord
from framework.wire.topics import Topics

PARTITIONS = 2
_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("ts", pa.int64()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


def arrow_batch(records: list[InRecord]) -> pa.RecordBatch:
    """The rows Spark's Kafka source hands ``mapInArrow`` for ``records``."""
    return pa.RecordBatch.from_pydict(
        {
            "key": [r.key for r in records],
            "value": [r.value for r in records],
            "topic": [r.topic for r in records],
            "partition": [r.partition for r in records],
            "offset": [r.offset for r in records],
            "ts": [r.timestamp_ms for r in records],
            "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in records],
        },
        schema=_SCHEMA,
    )


def as_input(records: list[OutRecord], topic: str) -> dict[int, list[InRecord]]:
    """What the next stage reads of ``topic``, per partition, as Kafka would number it."""
    out: dict[int, list[InRecord]] = defaultdict(list)
    for r in records:
        if r.topic == topic:
            part = out[r.partition or 0]
            headers = signed(r.topic, r.key, r.value, r.headers)  # as the producer signs it
            part.append(InRecord(r.topic, r.partition or 0, len(part), 0, r.key, r.value, headers))
    return out


def timed(what: Callable[[], Any]) -> tuple[Any, float]:
    # CPU time of this process: others share the machine, and wall time would count them.
    start = time.process_time()
    result = what()
    return result, time.process_time() - start


def _programs(windowed: bool) -> tuple[Any, StageProgram, StageProgram, Any]:
    build = windowed_counts if windowed else word_pairs
    if windowed and "--columns" in sys.argv:
        build = windowed_counts_on_columns
    graph = build("prof", "lines", "out", partitions=PARTITIONS).graph()
    sources = {n.id: "lines" for n in graph.by_kind(Kind.SOURCE)}
    first, second = plan_stages(graph, sources)
    partitions = {e.topic: PARTITIONS for s in (first, second) for e in s.exits.values()}
    partitions["out"] = PARTITIONS  # the sink's topic
    source_decoder = graph.node(first.entry).endpoint
    one = StageProgram(StageSpec(graph, first, partitions, PARTITIONS, source_decoder))
    two = StageProgram(StageSpec(graph, second, partitions, PARTITIONS, None))
    return graph, one, two, second


def _lines(count: int, per_line: int, per_ms: int) -> list[InRecord]:
    texts = [f"{i} {t}" for i, t in enumerate(generate_lines(count, per_line))]
    return [
        InRecord("lines", 0, i, 1_700_000_000_000 + i // per_ms, None, t.encode())
        for i, t in enumerate(texts)
    ]


def main() -> None:
    gc.disable()  # as the executor runs a task
    install(Keyring((os.urandom(32),)))  # a stage task installs its pipeline's keyring
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    profile = "--profile" in sys.argv
    lines_n = int(args[0]) if args else 20_000
    per_line = int(args[1]) if len(args) > 1 else 10
    windowed = "--windowed" in sys.argv
    graph, one, two, second = _programs(windowed)
    if "--results-per-item" in sys.argv:  # the aggregate's results leave one by one
        two.results_chain = None
    topics = Topics("prof")
    per_ms = 10 if windowed else 50  # the peer benchmark's backlog: 10 000 lines/s
    lines = _lines(lines_n, per_line, per_ms)
    profiler = cProfile.Profile(time.process_time) if profile else None

    # Min time past every window: an aggregate emits all of them in the same call.
    done = (1_700_000_000_000 + lines_n) // graph.delta_ms + 100_000

    def run(program: StageProgram, rows: pa.RecordBatch, grouping: Any, topic: str) -> TaskResult:
        if profiler is not None:
            profiler.enable()
        try:
            records = read_records(iter([rows]), topic)
            return program.run(records, grouping, 1, 1, min_time=done, partition=0)
        finally:
            if profiler is not None:
                profiler.disable()

    words = lines_n * per_line
    only_group = "--group-only" in sys.argv
    profiling, profiler = profiler, (None if only_group else profiler)
    source, took = timed(lambda: run(one, arrow_batch(lines), None, "lines"))
    profiler = profiling
    print(f"source stage: {words} words in {took:.2f} s: {words / took:,.0f} words/s")
    shuffle = as_input(source.records, topics.shuffle(second.entry))
    print(f"  shuffle records: {sum(len(v) for v in shuffle.values())}")
    took_total = 0.0
    changelog_s = 0.0
    for part, records in sorted(shuffle.items()):
        grouping = two.new_state()
        rows = arrow_batch(records)
        result, took = timed(partial(run, two, rows, grouping, topics.shuffle(second.entry)))
        took_total += took
        changes = [
            (r.key, r.value) for r in result.records if r.topic == topics.state(second.entry)
        ]
        fresh = two.new_state()
        assert fresh is not None
        _, catch_up = timed(partial(apply_changelog, fresh, changes))
        changelog_s += catch_up
        pre = sum(len(r.value or b"") for r in result.records if r.topic.endswith(".pre"))
        print(
            f"  partition {part}: {len(records)} records in {took:.2f} s, {result.items_out} out "
            f"({pre / 1e6:.1f} MB), changelog {len(changes)} records "
            f"({sum(len(k or b'') + len(v or b'') for k, v in changes) / 1e6:.1f} MB) "
            f"replay {catch_up:.2f} s"
        )
    print(
        f"group stage: {words} words in {took_total:.2f} s: {words / took_total:,.0f} words/s "
        f"(+{changelog_s:.2f} s changelog replay)"
    )
    if profiler is not None:
        _report(profiler)


def _report(profiler: cProfile.Profile) -> None:
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative" if "--cumulative" in sys.argv else "tottime").print_stats(25)
    if "--callers" in sys.argv:
        stats.print_callers(12)


if __name__ == "__main__":
    main()
