"""The pipeline builder: graph shape, validation through the builder, runners."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from framework.core.graph import Graph, Kind
from framework.errors import PipelineError
from framework.pipeline import Count, Pipeline, Tumbling
from framework.testing import InProcessRunner, ListSink, ListSource


def split(line: str) -> list[str]:
    return line.split()


def test_wordcount_shape_and_labels() -> None:
    p = Pipeline("wordcount")
    out = ListSink()
    result = (
        p.source(ListSource(["a b"]))
        .flat_map(split)
        .key_by(lambda w: w)
        .group(window=2)
        .map(len, name="size")
        .sink(out)
    )
    assert result is p
    graph = p.graph()
    assert [n.kind for n in graph.nodes] == [
        Kind.SOURCE,
        Kind.FLAT_MAP,
        Kind.KEY_BY,
        Kind.GROUP,
        Kind.MAP,
        Kind.SINK,
    ]
    assert [n.id for n in graph.nodes][:2] == ["source-input", "flat_map-split"]
    assert [n.label for n in graph.nodes] == ["input", "split", "<lambda>", "", "size", "output"]
    assert graph.node("group").window == 2


def test_run_without_runner_checks_the_endpoints_before_starting_anything() -> None:
    p = Pipeline("p")
    p.source(ListSource([1])).sink(ListSink())
    with pytest.raises(PipelineError, match="needs a KafkaSource"):
        p.run()


def test_run_hands_the_validated_graph_to_the_runner() -> None:
    seen: list[Graph] = []

    class Recorder:
        def run(self, graph: Graph) -> Any:
            seen.append(graph)
            return "done"

    p = Pipeline("p", delta_ms=5)
    p.source(ListSource([1])).sink(ListSink())
    assert p.run(Recorder()) == "done"
    assert seen[0].name == "p" and seen[0].delta_ms == 5


def test_same_pipeline_runs_twice_with_the_same_output() -> None:
    out = ListSink()
    p = Pipeline("twice")
    p.source(ListSource(range(5))).map(lambda v: v * 2).sink(out)
    first = p.run(InProcessRunner()).values()
    assert p.run(InProcessRunner()).values() == first == out.values == [0, 2, 4, 6, 8]


def test_broadcast_and_merge() -> None:
    out = ListSink()
    p = Pipeline("diamond")
    left, right = p.source(ListSource([1, 2])).broadcast(2)
    left.map(lambda v: v * 10).merge(right.filter(lambda v: v > 1)).sink(out)
    assert sorted(p.run(InProcessRunner()).values()) == [2, 10, 20]  # type: ignore[type-var]


def test_keyed_merge_joins_two_sources() -> None:
    out = ListSink()
    p = Pipeline("join")
    a = p.source(ListSource.timed([(0, ("k", "a"))], topic="a")).key_by(lambda r: r[0])
    b = p.source(ListSource.timed([(20, ("k", "b"))], topic="b")).key_by(lambda r: r[0])
    a.merge(b).group(window=2).sink(out)
    assert p.run(InProcessRunner()).values()[-1] == (("k", "a"), ("k", "b"))


def test_aggregate_counts_words_per_window() -> None:
    out = ListSink()
    p = Pipeline("wc")
    (
        p.source(ListSource(["a b", "a", "b b"], step_ms=30))
        .flat_map(split)
        .key_by(lambda w: w)
        .aggregate(Tumbling(50), fold=lambda n, _: n + 1, initial=0)
        .map(lambda r: (r.key, r.start_ms, r.value))
        .sink(out)
    )
    p.run(InProcessRunner())
    assert sorted(out.values) == [("a", 0, 2), ("b", 0, 1), ("b", 50, 2)]  # type: ignore[type-var]


def test_builder_errors() -> None:
    with pytest.raises(PipelineError, match="non-empty name"):
        Pipeline("")
    p, q = Pipeline("p"), Pipeline("q")
    with pytest.raises(PipelineError, match="different pipelines"):
        p.source(ListSource([1])).merge(q.source(ListSource([1])))
    with pytest.raises(PipelineError, match="at least one other"):
        p.source(ListSource([1])).merge()
    with pytest.raises(PipelineError, match="needs a Source"):
        p.source("topic")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="needs a Sink"):
        p.source(ListSource([1])).sink([])  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="Tumbling, Sliding, Count or Session"):
        p.source(ListSource([1])).key_by(str).aggregate(5)  # type: ignore[arg-type]


def test_stream_used_twice_needs_broadcast() -> None:
    p = Pipeline("p")
    s = p.source(ListSource([1]))
    s.map(str).sink(ListSink("a"))
    s.map(repr).sink(ListSink("b"))
    with pytest.raises(PipelineError, match="use broadcast"):
        p.graph()


def test_count_window_via_builder() -> None:
    out = ListSink()
    p = Pipeline("count")
    p.source(ListSource(range(5))).key_by(lambda v: 0).aggregate(Count(2)).sink(out)
    assert [r.value for r in p.run(InProcessRunner()).values()] == [(0, 1), (2, 3)]  # type: ignore[attr-defined]


def test_builder_and_harness_import_no_cluster_client() -> None:
    code = (
        "import sys, framework.pipeline, framework.testing, framework.core.windows;"
        "print(sorted(m for m in ('pyspark', 'confluent_kafka', 'kazoo') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_readme_batch_operator_examples_run() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    examples = [b for b in blocks if "InProcessRunner()" in b and "flat_map_batches" in b]
    assert len(examples) == 2  # the batch operators, then the windowed count on columns
    scope: dict[str, object] = {}
    for example in examples:  # in order, as a reader runs them: the second uses the first's
        exec(compile("from framework import Pipeline\n" + example, "README.md", "exec"), scope)
