"""Pipelines for tests that run ``flamepipe`` commands in other processes.

A command names a pipeline as ``module:attribute`` and cannot pass arguments, so these
read the test's unique names from the environment (``FP_TEST_APP``, ``FP_TEST_SOURCE``,
``FP_TEST_SINK``).
"""

from __future__ import annotations

import os
from operator import itemgetter

from connectors import KafkaSink, KafkaSource
from framework.demos.wordcount import two_groupings, word_pairs
from framework.pipeline import Pipeline

PIPELINES = ("word_pairs", "two_groupings", "word_pairs_two_barriers")
"""The pipelines `build` makes (and the ``*_job`` specs name)."""


def build(pipeline: str, app: str, source: str, sink: str) -> Pipeline:
    """``pipeline`` (one of `PIPELINES`) over two source partitions, with these names."""
    if pipeline == "word_pairs":
        return word_pairs(app, source, sink, 2)
    if pipeline == "word_pairs_two_barriers":  # keyed by word: items spread over 4 partitions
        two = KafkaSink(sink, key=itemgetter(0), partitions=4, barriers=2)
        return word_pairs(app, source, two, 2)
    if pipeline == "two_groupings":
        return two_groupings(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    raise ValueError(f"unknown test pipeline {pipeline!r}: use one of {', '.join(PIPELINES)}")


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
