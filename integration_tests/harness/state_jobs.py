"""A pipeline with both kinds of queryable state, for the queryable-state test (a module of
its own, so Spark's Python workers import the functions by name)."""

from __future__ import annotations

import os
from typing import Any

from connectors import KafkaSink, KafkaSource
from framework import Pipeline
from framework.demos.wordcount import _word, count_row, pair, plus_one, tagged_words


def first(tagged: list[str]) -> str:
    """The word of a ``[word, line id]`` item."""
    return tagged[0]


def pairs_and_counts(name: str, source: str, pairs: str, counts: str) -> Pipeline:
    """Word pairs (grouping ``pairs``, window 2) and the running count per word (rolling
    ``counts``), side by side on the same tagged words."""
    p = Pipeline(name)
    tagged, other = p.source(KafkaSource(source, partitions=2)).flat_map(tagged_words).broadcast()
    tagged.key_by(_word).group(window=2, name="pairs").map(pair).sink(KafkaSink(pairs))
    words: Any = other.map(first).key_by(_word)
    words.fold(0, plus_one, name="counts").map(count_row).sink(KafkaSink(counts))
    return p


def from_env() -> Pipeline:
    """`pairs_and_counts` named by the environment (``FP_TEST_APP``, ``FP_TEST_SOURCE``):
    what ``flamepipe state get`` loads by name."""
    app, source = os.environ["FP_TEST_APP"], os.environ["FP_TEST_SOURCE"]
    return pairs_and_counts(app, source, f"{app}-pairs", f"{app}-counts")
