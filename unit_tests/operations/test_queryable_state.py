"""Queryable state: what a grouping and a rolling aggregate answer, and the HTTP routes."""

from __future__ import annotations

import doctest
from operator import add
from typing import Any

import framework.operations.queryable_state
import framework.snapshots.queryable
from framework import Pipeline
from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.rolling import RollingAggregator
from framework.core.time import GlobalTime
from framework.errors import ConfigError, DeadlineExceeded
from framework.operations.queryable_state import StateServer, parse_key
from framework.pipeline import Tumbling
from framework.snapshots.queryable import StateValue, queryable_nodes
from framework.testing import ListSink, ListSource


def _item(slot: int, key: str, value: object, offset: int = 0) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset)), Keyed(key, key_hash(key), value))


def test_a_grouping_answers_its_last_window_minus_one_items_below_min_time() -> None:
    grouping = Grouping(1, 3)
    for slot, value in [(5, "a"), (1, "b"), (3, "c"), (8, "d")]:
        grouping.push(_item(slot, "k", value))
    assert grouping.kept_below("k", 6) == ["c", "a"]  # in global-time order, 2 = N - 1
    assert grouping.kept_below("k", 2) == ["b"]
    assert grouping.kept_below("k", 1) == []
    assert grouping.kept_below("other", 9) == []


def test_a_rolling_aggregate_answers_what_min_time_folded() -> None:
    p = Pipeline("r")
    p.source(ListSource([])).key_by(str).reduce(add, name="sum").sink(ListSink())
    node = p.graph().node("sum")
    assert node.aggregation is not None
    rolling = RollingAggregator(1, node.aggregation, 10)
    for slot, value in [(4, 10), (2, 1), (9, 100)]:
        rolling.push(_item(slot, "k", value))
    assert rolling.value_of("k") == (False, None)
    rolling.on_min_time(5)
    assert rolling.value_of("k") == (True, 11) and rolling.min_time == 5


def test_only_groupings_and_rolling_aggregates_are_queryable() -> None:
    p = Pipeline("q")
    a, b, c = p.source(ListSource([])).broadcast(3)
    a.key_by(str).group(window=2, name="g").sink(ListSink("one"))
    b.key_by(str).fold(0, lambda n, _: n + 1, name="f").sink(ListSink("two"))
    c.key_by(str).aggregate(Tumbling(100), name="w").sink(ListSink("three"))
    assert queryable_nodes(p.graph()) == {"g": "grouping", "f": "rolling"}


class _Reader:
    kinds = {"pairs": "grouping"}

    def get(self, node: str, key: object) -> StateValue:
        if node != "pairs":
            raise ConfigError(f"no queryable state at {node!r}")
        if key == "slow":
            raise DeadlineExceeded("not running")
        return StateValue(node, key, True, [key], 3, 30, 1, 0)


def test_http_routes_answer_and_refuse_with_the_right_status() -> None:
    server = StateServer(_Reader())
    assert server.answer("/state") == (200, {"pairs": "grouping"})
    status, body = server.answer("/state/pairs?key=%5B%22a%22%2C1%5D")
    assert status == 200 and body["key"] == ["a", 1] and body["value"] == [["a", 1]]
    assert server.answer("/state/nope?key=1")[0] == 404
    assert server.answer("/state/pairs?key=not-json")[0] == 400
    assert server.answer("/state/pairs")[0] == 400
    assert server.answer("/state/pairs?key=%22slow%22")[0] == 503
    assert server.answer("/elsewhere")[0] == 404


def test_keys_come_from_json_and_arrays_are_tuples() -> None:
    key: Any = parse_key('["a", [1, 2]]')
    assert key == ("a", (1, 2)) and hash(key) == hash(("a", (1, 2)))


def test_the_module_examples_run() -> None:
    assert doctest.testmod(framework.snapshots.queryable).failed == 0
    assert doctest.testmod(framework.operations.queryable_state).failed == 0
