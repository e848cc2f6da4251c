"""The topic janitor's rounds and the names of an epoch's internal topics."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from connectors import KafkaSink, KafkaSource
from framework import Pipeline
from framework.errors import ConfigError
from framework.operations import hygiene
from framework.operations.hygiene import TopicJanitor, epoch_topics


def _graph() -> Pipeline:
    p = Pipeline("wc")
    p.source(KafkaSource("in")).key_by(str).group(window=2).sink(KafkaSink("out"))
    return p


def test_epoch_topics_are_named_from_the_graph_never_the_users() -> None:
    graph = _graph().graph()
    zero, one = epoch_topics(graph, 0), epoch_topics(graph, 1)
    assert {"wc.acks", "wc.mintime", "wc.acker"} <= zero
    assert {n for n in zero if n.endswith(".positions")}, "continuous stages' positions"
    assert all(name.startswith("wc.e1.") for name in one)
    assert not ({"in", "out", "out.bundles", "wc.dlq"} & (zero | one))


def test_a_round_trims_only_what_moved_and_a_failed_round_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[dict[tuple[str, int], int]] = []
    fail = [False]

    def delete(_bootstrap: str, below: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        if fail[0]:
            raise ConfigError("broker away")
        asked.append(dict(below))
        return dict(below)

    monkeypatch.setattr(hygiene, "delete_records", delete)
    needs = {("a.acks", 0): 10, ("a.acks", 1): 0}
    janitor = TopicJanitor("b:1", lambda: needs)
    janitor.trim_once()
    assert asked == [{("a.acks", 0): 10}]  # nothing to trim below 0
    janitor.trim_once()
    assert asked[-1] == {}  # nothing moved
    needs[("a.acks", 0)] = 25
    fail[0] = True
    janitor.trim_once()  # logged, not raised
    fail[0] = False
    janitor.trim_once()
    assert asked[-1] == {("a.acks", 0): 25}
    assert janitor.trimmed == 25 and janitor.rounds == 3
