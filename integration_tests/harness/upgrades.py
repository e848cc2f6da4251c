"""Versions of the word pairs pipeline for the savepoint-upgrade tests (a module of its
own, so Spark's Python workers import the functions by name)."""

from __future__ import annotations

import os
from typing import Any

from connectors import KafkaSink, KafkaSource
from framework import Pipeline
from framework.demos.wordcount import _word, first_letter, letter_window, pair, tagged_words


def upgraded_pairs(name: str, source: str, pairs: str, letters: str, window: int = 2) -> Pipeline:
    """`framework.demos.wordcount.word_pairs` changed: its grouping named ``pairs`` (the
    saved one was ``group``), its output to another topic, and a new grouping of the pairs
    by first letter (``letters``, window 3) to a second sink."""
    p = Pipeline(name)
    by_word = p.source(KafkaSource(source, partitions=2)).flat_map(tagged_words).key_by(_word)
    out, tee = by_word.group(window=window, name="pairs").map(pair).broadcast()
    out.sink(KafkaSink(pairs))
    tee.key_by(first_letter).group(window=3, name="letters").map(_letters).sink(KafkaSink(letters))
    return p


def _letters(window: tuple[Any, ...]) -> list[Any]:
    return letter_window(window)


def upgraded_from_env() -> Pipeline:
    """`upgraded_pairs` named by the environment (``FP_TEST_APP``, ``FP_TEST_SOURCE``,
    ``FP_TEST_PAIRS``, ``FP_TEST_LETTERS``): what ``flamepipe savepoint`` loads by name."""
    env = os.environ
    return upgraded_pairs(
        env["FP_TEST_APP"], env["FP_TEST_SOURCE"], env["FP_TEST_PAIRS"], env["FP_TEST_LETTERS"]
    )
