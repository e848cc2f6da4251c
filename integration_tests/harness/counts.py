"""Pipelines with aggregates beside other state, for the snapshot, rescale and recovery
tests (a module of its own, so Spark's Python workers import the functions by name)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from connectors import KafkaSink, KafkaSource
from framework import Pipeline, Tumbling
from framework.demos.wordcount import (
    _word,
    add_counts,
    count_row,
    pair,
    plus_one,
    strict_split,
    tagged_words,
    window_count,
    word_ones,
)
from framework.kafka.clients import read_to_end


def counts(app: str, source: str, running: str, windows: str, *, window_ms: int = 200) -> Pipeline:
    """Per word, its running count (a rolling fold: ``[word, n]`` per occurrence) to
    ``running``, and its count per tumbling window of ``window_ms`` to ``windows``."""
    p = Pipeline(app)
    by_count, by_window = p.source(KafkaSource(source, partitions=2)).broadcast()
    by_count.flat_map(strict_split).key_by(_word).fold(0, plus_one, name="running").map(
        count_row
    ).sink(KafkaSink(running))
    by_window.flat_map(word_ones).key_by(_word).aggregate(
        Tumbling(window_ms), reduce=add_counts, combinable=True, name="windows"
    ).map(window_count).sink(KafkaSink(windows))
    return p


def pairs_and_windows(app: str, source: str, pairs: str, windows: str) -> Pipeline:
    """Word pairs (a window-2 grouping, node ``group``) of lines ``"<id> <words...>"``,
    and counts per token (ids too) and 200 ms window (node ``windows``)."""
    p = Pipeline(app)
    by_pair, by_window = p.source(KafkaSource(source, partitions=2)).broadcast()
    by_pair.flat_map(tagged_words).key_by(_word).group(window=2).map(pair).sink(KafkaSink(pairs))
    by_window.flat_map(word_ones).key_by(_word).aggregate(
        Tumbling(200), reduce=add_counts, combinable=True, name="windows"
    ).map(window_count).sink(KafkaSink(windows))
    return p


def running_oracle(bootstrap: str, topic: str) -> Counter[tuple[str, int]]:
    """``(word, n)`` for every word of the input and n = 1 .. its occurrences."""
    totals: Counter[str] = Counter()
    for msg in read_to_end(bootstrap, topic):
        totals.update((msg.value() or b"").decode().split())
    return Counter((word, n) for word, total in totals.items() for n in range(1, total + 1))


def released_windows(items: list[Any]) -> Counter[tuple[str, int]]:
    """``(word, window start) -> count`` of `window_count` rows; `AssertionError` if a
    window came out twice."""
    released = Counter({(word, start): n for word, start, n in items})
    assert len(items) == len(released), "a window was released twice"
    return released
