"""Operator ids: pinned by name, derived from the function, unique, stable under edits."""

from __future__ import annotations

import doctest

import pytest

import framework.core.names
from framework import Pipeline
from framework.core.names import slug
from framework.errors import PipelineError
from framework.pipeline import Tumbling
from framework.testing import ListSink, ListSource


def parse(line: str) -> str:
    return line


def words(line: str) -> list[str]:
    return line.split()


def _ids(p: Pipeline) -> list[str]:
    return [node.id for node in p.graph().nodes]


def _pairs(p: Pipeline, extra: bool) -> Pipeline:
    stream = p.source(ListSource(["a b"], topic="in.lines")).map(parse)
    if extra:
        stream = stream.filter(bool, name="non-empty")
    stream.flat_map(words).key_by(str).group(window=2, name="pairs").sink(ListSink())
    return p


def test_ids_come_from_names_and_functions_not_positions() -> None:
    assert _ids(_pairs(Pipeline("p"), extra=False)) == [
        "source-in_lines",
        "map-parse",
        "flat_map-words",
        "key_by-str",
        "pairs",
        "sink-output",
    ]


def test_an_operator_added_upstream_moves_no_other_id() -> None:
    before = set(_ids(_pairs(Pipeline("p"), extra=False)))
    after = _ids(_pairs(Pipeline("p"), extra=True))
    assert set(after) - before == {"non-empty"}
    assert before <= set(after)


def test_derived_ids_repeat_with_a_suffix_and_lambdas_use_the_kind() -> None:
    p = Pipeline("p")
    (
        p.source(ListSource(["a"]))
        .map(parse)
        .map(parse)
        .map(lambda s: s)
        .map(lambda s: s)
        .key_by(str)
        .group(window=2)
        .key_by(str)
        .group(window=3)
        .sink(ListSink())
    )
    assert _ids(p)[1:9] == [
        "map-parse",
        "map-parse-2",
        "map",
        "map-2",
        "key_by-str",
        "group",
        "key_by-str-2",
        "group-2",
    ]


def test_a_name_used_twice_is_refused_with_the_fix() -> None:
    p = Pipeline("p")
    stream = p.source(ListSource(["a"])).map(parse, name="clean")
    with pytest.raises(PipelineError, match=r"id 'clean' .* unique name="):
        stream.map(parse, name="clean")
    with pytest.raises(PipelineError, match="cannot be an id"):
        stream.map(parse, name="...")


def test_two_unnamed_joins_coexist_and_a_named_one_pins_its_parts() -> None:
    p = Pipeline("p")
    a1, a2, a3 = p.source(ListSource(["a"], topic="a")).broadcast(3)
    b1, b2, b3 = p.source(ListSource(["b"], topic="b")).broadcast(3)
    a1.join_window(b1, Tumbling(1000), key=str).sink(ListSink("one"))
    a2.join_window(b2, Tumbling(1000), key=str).sink(ListSink("two"))
    a3.join_window(b3, Tumbling(1000), key=str, name="clicks").sink(ListSink("three"))
    ids = set(_ids(p))
    assert {"merge-join", "merge-join-2", "aggregate-join-window-2", "map-join-left-2"} <= ids
    assert {"clicks", "clicks-window", "clicks-pairs", "clicks-left", "clicks-right"} <= ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [("in.lines", "in_lines"), ("<lambda>", "lambda"), ("a/b c", "a_b_c"), ("x" * 80, "x" * 64)],
)
def test_slug_is_safe_in_topic_and_unit_names(text: str, expected: str) -> None:
    assert slug(text) == expected


def test_the_module_examples_run() -> None:
    assert doctest.testmod(framework.core.names).failed == 0
