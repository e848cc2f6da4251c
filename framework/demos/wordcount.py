"""The word-count pipelines of the demo and the integration tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors import KafkaSink, KafkaSource
from framework.core.graph import Sink, Source
from framework.core.reducers import Sum
from framework.core.windows import KeyValue, WindowResult
from framework.pipeline import Pipeline, Stream, Tumbling

COUNT_WINDOW = 1 << 30
"""A grouping window larger than any word's count: the window is the word's whole history."""


def _word(payload: Any) -> Any:
    return payload if isinstance(payload, str) else payload[0]


def running_count(window: tuple[str, ...]) -> list[Any]:
    """``[word, n]``: the n-th occurrence of the word (the window is its whole history)."""
    return [window[-1], len(window)]


def strict_split(line: str) -> list[str]:
    """Words of a line; raises on a line containing ``poison`` (dead-letter demos)."""
    if "poison" in line.split():
        raise ValueError(f"refusing to split a poisoned line: {line!r}")
    return line.split()


def wordcount(name: str, source: str, sink: str, partitions: int = 2) -> Pipeline:
    """Lines -> words -> per-word running counts; the last count of a word is its total."""
    p = Pipeline(name)
    (
        p.source(KafkaSource(source, partitions=partitions))
        .flat_map(strict_split)
        .key_by(_word)
        .group(window=COUNT_WINDOW)
        .map(running_count)
        .sink(KafkaSink(sink))
    )
    return p


def deployed() -> Pipeline:
    """The word count docker-compose deploys: topic ``lines`` to topic ``counts``."""
    return wordcount("wordcount", "lines", "counts")


def tagged_words(line: str) -> list[list[str]]:
    """``[word, line id]`` for every word of a line ``"<id> word word ..."``."""
    line_id, *words = line.split()
    return [[word, line_id] for word in words]


def pair(window: tuple[list[str], ...]) -> list[Any]:
    """``[word, [line ids of its previous and current occurrence]]``: order-sensitive."""
    return [window[-1][0], [tag for _, tag in window]]


def word_pairs(name: str, source: str, sink: str | KafkaSink, partitions: int = 2) -> Pipeline:
    """Which line each word occurred on just before: any reordering changes the output.

    ``sink`` is a topic name or a `KafkaSink` of one's own (more partitions, barriers).
    """
    p = Pipeline(name)
    _pairs(p, KafkaSource(source, partitions=partitions)).sink(
        sink if isinstance(sink, KafkaSink) else KafkaSink(sink)
    )
    return p


def _pairs(p: Pipeline, source: Source) -> Stream:
    """`word_pairs`' stream of pairs from ``source``."""
    return p.source(source).flat_map(tagged_words).key_by(_word).group(window=2).map(pair)


def first_letter(item: list[Any]) -> str:
    """The first letter of a `pair` output's word: a key with few values."""
    return str(item[0][0])


def letter_window(window: tuple[list[Any], ...]) -> list[Any]:
    """``[letter, words]`` of the last three pairs of a letter: a second, order-sensitive window."""
    return [window[-1][0][0], [item[0] for item in window]]


def two_groupings(name: str, source: Source, sink: Sink) -> Pipeline:
    """`word_pairs`, then a second grouping by first letter: two shuffles in sequence."""
    p = Pipeline(name)
    _pairs(p, source).key_by(first_letter).group(window=3).map(letter_window).sink(sink)
    return p


def pairs_per_letter(name: str, source: Source, sink: Sink) -> Pipeline:
    """`word_pairs`, then per first letter and 1 s tumbling window its pairs in global-time
    order: the grouping's repairs (tombstones) end at the aggregate, whose results are
    final, so the sink's barrier needs no matching (`framework.barrier.blocks`)."""
    p = Pipeline(name)
    _pairs(p, source).key_by(first_letter).aggregate(Tumbling(1000)).map(letter_pairs).sink(sink)
    return p


def letter_pairs(result: WindowResult) -> list[Any]:
    """``[letter, window start ms, pairs]`` of a `pairs_per_letter` window."""
    pairs: tuple[Any, ...] = result.value  # type: ignore[assignment]
    return [result.key, result.start_ms, [list(item) for item in pairs]]


def word_ones(line: str) -> list[tuple[str, int]]:
    """``(word, 1)`` for every word of a line."""
    return [(word, 1) for word in line.split()]


def add_counts(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    """Two counts of one word added: associative and commutative, so combinable."""
    return (a[0], a[1] + b[1])


def window_count(result: WindowResult) -> list[Any]:
    """``[word, window start ms, count]``."""
    value: tuple[str, int] = result.value  # type: ignore[assignment]
    return [result.key, result.start_ms, value[1]]


def windowed_counts(
    name: str, source: str, sink: str, *, window_ms: int = 1000, partitions: int = 2
) -> Pipeline:
    """Per word and tumbling window of ``window_ms``, one count; pre-reduced before the
    shuffle (``combinable``), so one item per word and task batch crosses it."""
    p = Pipeline(name)
    (
        p.source(KafkaSource(source, partitions=partitions))
        .flat_map(word_ones)
        .key_by(_word)
        .aggregate(Tumbling(window_ms), reduce=add_counts, combinable=True)
        .map(window_count)
        .sink(KafkaSink(sink))
    )
    return p


def plus_one(count: int, _: object) -> int:
    """A count's fold step."""
    return count + 1


def count_row(update: KeyValue) -> list[Any]:
    """``[word, count]`` of a rolling count's update (a pane's: ``(word, count)`` pairs)."""
    value = update.value
    return [update.key, value[1] if isinstance(value, tuple) else value]


def rolling_counts(
    name: str, source: str, sink: str, *, every_ms: int | None = None, partitions: int = 2
) -> Pipeline:
    """Per word, its count so far: the running word count as a rolling aggregation.

    One value per word in state, whatever the backlog. Without ``every_ms`` an update per
    occurrence (``[word, n]`` for n = 1, 2, ...; the same output as `wordcount`); with it,
    one update per word and pane of ``every_ms`` that had the word, pre-reduced before the
    shuffle.
    """
    p = Pipeline(name)
    words = p.source(KafkaSource(source, partitions=partitions))
    if every_ms is None:
        counts = words.flat_map(strict_split).key_by(_word).fold(0, plus_one)
    else:
        pairs = words.flat_map(word_ones).key_by(_word)
        counts = pairs.reduce(add_counts, every_ms=every_ms, combinable=True)
    counts.map(count_row).sink(KafkaSink(sink))
    return p


def word_ones_column(lines: pa.Array) -> pa.Array:
    """Per line, its words as ``{"word": w, "n": 1}`` rows: `word_ones` on a column."""
    words = pc.utf8_split_whitespace(lines)
    flat = pc.list_flatten(words)
    ones = pa.array([1] * len(flat), pa.int64())
    rows = pa.StructArray.from_arrays([flat, ones], names=["word", "n"])
    offsets = pc.subtract(words.offsets, words.offsets[0])  # an array may be a slice
    return pa.ListArray.from_arrays(offsets, rows)


def word_column(rows: pa.Array) -> pa.Array:
    """The ``word`` field of `word_ones_column`'s rows: the key."""
    return pc.struct_field(rows, "word")


def window_row_count(result: WindowResult) -> list[Any]:
    """``[word, window start ms, count]`` of a window of `word_ones_column` rows."""
    value: dict[str, Any] = result.value  # type: ignore[assignment]
    return [result.key, result.start_ms, value["n"]]


def windowed_counts_on_columns(
    name: str, source: str, sink: str, *, window_ms: int = 1000, partitions: int = 2
) -> Pipeline:
    """`windowed_counts` with batch operators and the built-in ``Sum``: the same output,
    the source stage on Arrow columns end to end (split, key, pre-reduce)."""
    p = Pipeline(name)
    (
        p.source(KafkaSource(source, partitions=partitions))
        .flat_map_batches(word_ones_column)
        .key_by_batches(word_column)
        .aggregate(Tumbling(window_ms), reduce=Sum("n"), combinable=True)
        .map(window_row_count)
        .sink(KafkaSink(sink))
    )
    return p
