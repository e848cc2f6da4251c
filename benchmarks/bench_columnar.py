"""A source stage's task on columns against item by item, without Spark or Kafka.

Runs what one micro-batch of a word count's source stage does inside its Python worker
(the Arrow rows to records, `StageProgram.run`), once item by item and once on columns
(`framework.plan.columnar`), alternating, and reports words per CPU second of each and
their ratio. Pipelines:

* ``windowed``: the peer benchmark's (``../shared/peers``): ``flat_map(word_ones)``,
  ``key_by(first)``, ``aggregate(Tumbling(1000), reduce=add_counts, combinable=True)``;
* ``upper``: the peer benchmark's stateless pipeline, ``map(str.upper)`` into a Kafka sink
  (every line leaves as the sink's output record);
* ``pairs``: ``framework.demos.wordcount.word_pairs``'s source stage (a shuffle exit: every
  word leaves with its meta).

Run: ``.venv/bin/python benchmarks/bench_columnar.py [lines] [words-per-line] [rounds]``
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from connectors import KafkaSink, KafkaSource
from framework import Pipeline, Tumbling
from framework.core.graph import Graph, Kind
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import plan_stages
from framework.plan.task import StageProgram
from framework.runners.spark.tasks import read_records
from framework.wire.auth import Keyring, install
from framework.wire.records import InRecord

sys.path.insert(0, os.path.dirname(__file__))
from profile_stage_task import arrow_batch

PARTITIONS = 2


def word_ones(line: str) -> list[tuple[str, int]]:
    return [(word, 1) for word in line.split()]


def first(pair: tuple[str, int]) -> str:
    return pair[0]


def add_counts(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    return (a[0], a[1] + b[1])


def windowed() -> Graph:
    p = Pipeline("bench")
    lines = p.source(KafkaSource("lines", partitions=2))
    (
        lines.flat_map(word_ones)
        .key_by(first)
        .aggregate(Tumbling(1000), reduce=add_counts, combinable=True)
        .sink(KafkaSink("out"))
    )
    return p.graph()


def upper() -> Graph:
    p = Pipeline("bench")
    p.source(KafkaSource("lines", partitions=2)).map(str.upper).sink(KafkaSink("out"))
    return p.graph()


GRAPHS: dict[str, Callable[[], Graph]] = {
    "upper": upper,
    "windowed": windowed,
    "pairs": lambda: word_pairs("bench", "lines", "out", partitions=PARTITIONS).graph(),
}


def program(graph: Graph, columnar: bool) -> StageProgram:
    sources = {n.id: "lines" for n in graph.by_kind(Kind.SOURCE)}
    stages = plan_stages(graph, sources)
    partitions = {e.topic: PARTITIONS for s in stages for e in s.exits.values()}
    partitions["out"] = PARTITIONS  # the sink's topic
    decoder = graph.node(stages[0].entry).endpoint
    return StageProgram(
        StageSpec(graph, stages[0], partitions, PARTITIONS, decoder, columnar=columnar)  # type: ignore[arg-type]
    )


def cpu(what: Callable[[], Any]) -> tuple[Any, float]:
    start = time.process_time()
    out = what()
    return out, time.process_time() - start


def main() -> None:
    gc.disable()  # as the executor runs a task
    install(Keyring((os.urandom(32),)))
    args = sys.argv[1:]
    lines_n = int(args[0]) if args else 20_000
    per_line = int(args[1]) if len(args) > 1 else 8
    rounds = int(args[2]) if len(args) > 2 else 3
    texts = generate_lines(lines_n, per_line)
    words = sum(len(t.split()) for t in texts)
    rows = arrow_batch(
        [
            InRecord("lines", 0, i, 1_700_000_000_000 + i // 2, None, t.encode())
            for i, t in enumerate(texts)
        ]
    )
    for name, make in GRAPHS.items():
        graph = make()
        took: dict[bool, list[float]] = {False: [], True: []}
        outs: dict[bool, int] = {}
        for _ in range(rounds):
            for columnar in (False, True):
                stage = program(graph, columnar)
                result, seconds = cpu(
                    lambda s=stage: s.run(read_records(iter([rows]), "lines"), None, 1, 1)
                )  # type: ignore[misc]
                assert result.columnar == columnar, name
                took[columnar].append(seconds)
                outs[columnar] = result.items_out
                gc.collect()
        assert outs[False] == outs[True], (name, outs)
        items, cols = statistics.median(took[False]), statistics.median(took[True])
        print(
            f"{name:9s} {words} words, {outs[True]} out: item by item {words / items:>10,.0f} "
            f"words/CPU-s, columns {words / cols:>10,.0f} words/CPU-s: x{items / cols:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
