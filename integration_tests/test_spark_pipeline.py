"""Pipelines on Spark against the real stack (issue: pipelines on Spark)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from framework.config import Settings
from framework.demos.text import generate_lines, word_counts
from framework.demos.wordcount import wordcount
from integration_tests.pipeline_helpers import produce_lines, read_output, running


def _app(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def test_word_count_equals_the_counts_of_the_input(stack: Settings, spark: Any) -> None:
    settings = stack.with_(parallelism=2)
    app = _app("wc")
    source, sink = f"{app}-lines", f"{app}-counts"
    lines = generate_lines(400, words_per_line=6, vocabulary=60)
    with running(settings, spark, wordcount(app, source, sink)) as run:
        until = produce_lines(settings.kafka_bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
        items = read_output(settings.kafka_bootstrap, sink)
    oracle = word_counts(lines)
    # Exactly once: every word shows each running count 1..n once, nothing else.
    seen: dict[str, list[int]] = {}
    for word, n in items:
        seen.setdefault(word, []).append(n)
    assert {w: sorted(ns) for w, ns in seen.items()} == {
        w: list(range(1, n + 1)) for w, n in oracle.items()
    }
    assert Counter({w: max(ns) for w, ns in seen.items()}) == oracle
