"""Pipelines for tests that run ``flamepipe`` commands in other processes.

A command names a pipeline as ``module:attribute`` and cannot pass arguments, so these
read the test's unique names from the environment (``FP_TEST_APP``, ``FP_TEST_SOURCE``,
``FP_TEST_SINK``).
"""

from __future__ import annotations

import os
from operator import itemgetter
from typing import Any

from connectors import Json, KafkaSink, KafkaSource
from framework.core.windows import WindowResult
from framework.demos.components import connected_components
from framework.demos.wordcount import add_counts, pair, tagged_words, two_groupings, word_pairs
from framework.pipeline import Pipeline, Tumbling

PIPELINES = (
    "word_pairs",
    "two_groupings",
    "word_pairs_two_barriers",
    "windows_and_pairs",
    "components",
)
"""The pipelines `build` makes (and the ``*_job`` specs name)."""


COMPONENTS_PANE_MS = 1000


def build(pipeline: str, app: str, source: str, sink: str) -> Pipeline:
    """``pipeline`` (one of `PIPELINES`) over two source partitions, with these names."""
    if pipeline == "word_pairs":
        return word_pairs(app, source, sink, 2)
    if pipeline == "word_pairs_two_barriers":  # keyed by word: items spread over 4 partitions
        two = KafkaSink(sink, key=itemgetter(0), partitions=4, barriers=2)
        return word_pairs(app, source, two, 2)
    if pipeline == "two_groupings":
        return two_groupings(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    if pipeline == "windows_and_pairs":
        return windows_and_pairs(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    if pipeline == "components":  # edges as JSON pairs: a loop (`Stream.loop`)
        edges = KafkaSource(source, value=Json(), partitions=2)
        return connected_components(app, edges, KafkaSink(sink), pane_ms=COMPONENTS_PANE_MS)
    raise ValueError(f"unknown test pipeline {pipeline!r}: use one of {', '.join(PIPELINES)}")


def _word(item: Any) -> Any:
    return item[0]


def _line_words(line: str) -> list[tuple[str, int]]:
    """``(word, 1)`` for the words of ``"<id> word word ..."`` (not the id)."""
    return [(word, 1) for word in line.split()[1:]]


def _window_row(result: WindowResult) -> list[Any]:
    return ["window", result.key, result.start_ms, result.value[1]]  # type: ignore[index]


def _pair_row(window: tuple[list[str], ...]) -> list[Any]:
    return ["pair", *pair(window)]


def windows_and_pairs(app: str, source: Any, sink: Any) -> Pipeline:
    """A windowed word count (1 s tumbling, combinable) and, beside it, which line each
    word occurred on before (a window-2 grouping), merged into one sink: an aggregate and
    a grouping, each with state, on one source."""
    p = Pipeline(app)
    counted, paired = p.source(source).broadcast(2)
    windows = (
        counted.flat_map(_line_words)
        .key_by(_word)
        .aggregate(Tumbling(1000), reduce=add_counts, combinable=True)
        .map(_window_row)
    )
    pairs = paired.flat_map(tagged_words).key_by(_word).group(window=2).map(_pair_row)
    windows.merge(pairs).sink(sink)
    return p


def _from_env(pipeline: str) -> Pipeline:
    env = os.environ
    return build(pipeline, env["FP_TEST_APP"], env["FP_TEST_SOURCE"], env["FP_TEST_SINK"])


def word_pairs_job() -> Pipeline:
    """`word_pairs` over two source partitions, named by the environment."""
    return _from_env("word_pairs")


def two_groupings_job() -> Pipeline:
    """`two_groupings` over two source partitions, named by the environment."""
    return _from_env("two_groupings")


def word_pairs_two_barriers_job() -> Pipeline:
    """`word_pairs` to a 4-partition sink written by two barrier instances."""
    return _from_env("word_pairs_two_barriers")


def components_job() -> Pipeline:
    """`connected_components` over JSON edges on two source partitions."""
    return _from_env("components")


def windows_and_pairs_job() -> Pipeline:
    """`windows_and_pairs` over two source partitions, named by the environment."""
    return _from_env("windows_and_pairs")
