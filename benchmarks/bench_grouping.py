"""Throughput of the grouping: items/s for windows 2 and 10, in order and shuffled.

Run: ``.venv/bin/python benchmarks/bench_grouping.py [items]``.
"""

from __future__ import annotations

import random
import sys
import time

from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime

__all__ = ["main"]

KEYS = 1000


def make_items(n: int) -> list[Record]:
    """``n`` in-order items over ``KEYS`` keys, ten per slot."""
    rng = random.Random(7)
    keyed = [Keyed(k, key_hash(k), None) for k in range(KEYS)]
    items = []
    for i in range(n):
        k = keyed[rng.randrange(KEYS)]
        items.append(Record(Meta(GlobalTime(i // 10, 1, i)), k._replace(value=i)))
    return items


def shuffle_locally(items: list[Record], fraction: float) -> list[Record]:
    """Swap a ``fraction`` of neighbours within 50 positions: late arrivals, repairs."""
    rng = random.Random(11)
    out = list(items)
    for _ in range(int(len(out) * fraction)):
        i = rng.randrange(len(out) - 50)
        j = i + rng.randrange(1, 50)
        out[i], out[j] = out[j], out[i]
    return out


def bench(window: int, items: list[Record]) -> tuple[float, int]:
    """Items/s pushing ``items`` (pruning every slot), and the number of outputs."""
    grouping = Grouping(0xFEED, window)
    push, prune = grouping.push, grouping.on_min_time
    outputs = 0
    start = time.perf_counter()
    for i, record in enumerate(items):
        outputs += len(push(record))
        if i % 1000 == 999:
            prune(record.meta.gt.slot - 10)
    elapsed = time.perf_counter() - start
    return len(items) / elapsed, outputs


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    items = make_items(n)
    late = shuffle_locally(items, 0.05)
    print(f"grouping benchmark: {n} items, {KEYS} keys")
    for window in (2, 10):
        rate, outs = bench(window, items)
        print(f"window={window:<3} in order      {rate:>12,.0f} items/s  ({outs} outputs)")
        rate, outs = bench(window, late)
        print(f"window={window:<3} 5% swapped    {rate:>12,.0f} items/s  ({outs} outputs)")


if __name__ == "__main__":
    main()
