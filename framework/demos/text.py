"""Deterministic generated text for the word-count demo and tests."""

from __future__ import annotations

import random
from collections import Counter

_SYLLABLES = ("ka", "fla", "me", "pi", "pe", "stre", "am", "bar", "ri", "er", "to", "nu")


def _vocabulary(size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))))
    return sorted(words)


def generate_lines(
    count: int, words_per_line: int = 8, vocabulary: int = 200, seed: int = 7
) -> list[str]:
    """``count`` lines of Zipf-distributed words, the same for the same arguments."""
    rng = random.Random(seed)
    vocab = _vocabulary(vocabulary, rng)
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    return [" ".join(rng.choices(vocab, weights, k=words_per_line)) for _ in range(count)]


def word_counts(lines: list[str]) -> Counter[str]:
    """The oracle: how often each word occurs."""
    return Counter(word for line in lines for word in line.split())
