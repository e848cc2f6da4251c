"""Query ids: the checkpoint names a restarted driver reads back, typed."""

from __future__ import annotations

import doctest

import pytest

import framework.runners.spark.query_ids
from framework.runners.spark.query_ids import QueryId


@pytest.mark.parametrize(
    ("query", "name"),
    [
        (QueryId.split("group"), "group"),
        (QueryId.fused("source-lines", "group"), "source-lines+group"),
        (QueryId.continuous("group"), "group@continuous"),
    ],
)
def test_a_query_id_is_its_checkpoint_name_and_back(query: QueryId, name: str) -> None:
    assert str(query) == name
    assert QueryId.parse(name) == query


def test_queries_overlap_when_they_run_a_stage_in_common() -> None:
    fused = QueryId.fused("source-lines", "group")
    assert fused.overlaps(QueryId.continuous("group"))
    assert fused.overlaps(QueryId.split("source-lines"))
    assert not fused.overlaps(QueryId.split("aggregate"))


def test_the_module_example_runs() -> None:
    failed, tried = doctest.testmod(framework.runners.spark.query_ids)
    assert tried >= 3 and failed == 0
