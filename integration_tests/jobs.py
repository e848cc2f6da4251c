"""Pipelines for tests that run ``flamepipe`` commands in other processes.

A command names a pipeline as ``module:attribute`` and cannot pass arguments, so these
read the test's unique names from the environment (``FP_TEST_APP``, ``FP_TEST_SOURCE``,
``FP_TEST_SINK``).
"""

from __future__ import annotations

import os

from framework.demos.wordcount import word_pairs
from framework.pipeline import Pipeline


def word_pairs_job() -> Pipeline:
    """`word_pairs` over two source partitions, named by the environment."""
    env = os.environ
    return word_pairs(env["FP_TEST_APP"], env["FP_TEST_SOURCE"], env["FP_TEST_SINK"], 2)
