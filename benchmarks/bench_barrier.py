"""Throughput of the barrier: items/s from `push` to release in a bundle.

Goal: >= 200k items/s released. Items arrive slightly out of order over 10 fronts,
a share of them is cancelled by tombstones (grouping repairs), and min time advances
every ``RELEASE_EVERY`` pushes to a few slots behind the newest item.

Run: ``.venv/bin/python benchmarks/bench_barrier.py [items]``.
"""

from __future__ import annotations

import random
import sys
import time

from framework.core.barrier import Barrier
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime

__all__ = ["main"]

PER_SLOT = 100
RELEASE_EVERY = 500


def make_records(n: int, repair_share: float) -> list[Record]:
    """``n`` items (dict payloads) plus a tombstone and replacement for ``repair_share``."""
    rng = random.Random(5)
    out: list[Record] = []
    for i in range(n):
        gt = GlobalTime(i // PER_SLOT, i % 10, i)
        meta = Meta(gt, (0,), 0xABCDEF)
        record = Record(meta, {"word": i % 97, "count": i})
        out.append(record)
        if rng.random() < repair_share:
            out.append(record.tombstone())
            out.append(Record(meta, {"word": i % 97, "count": i + 1}))
    # Local disorder inside a slot (a tombstone may even overtake its item).
    for _ in range(len(out) // 4):
        j = rng.randrange(len(out) - PER_SLOT)
        k = j + rng.randrange(1, PER_SLOT)
        if out[j].meta.gt.slot == out[k].meta.gt.slot:
            out[j], out[k] = out[k], out[j]
    return out


def run(records: list[Record]) -> tuple[int, int, float]:
    """Push everything, releasing as min time moves; (released, bundles, seconds)."""
    barrier = Barrier()
    push, release = barrier.push, barrier.on_min_time
    released = bundles = 0
    start = time.perf_counter()
    for i, record in enumerate(records):
        push(record)
        if i % RELEASE_EVERY == RELEASE_EVERY - 1:
            bundle = release(record.meta.gt.slot - 1)
            if bundle is not None:
                released += len(bundle.records)
                bundles += 1
    bundle = release(records[-1].meta.gt.slot + 1)
    if bundle is not None:
        released += len(bundle.records)
        bundles += 1
    elapsed = time.perf_counter() - start
    assert barrier.pending == 0
    return released, bundles, elapsed


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    for share in (0.0, 0.05, 0.3):
        records = make_records(n, share)
        best = min((run(records) for _ in range(3)), key=lambda r: r[2])
        released, bundles, elapsed = best
        print(
            f"repairs {share:4.0%}: pushed {len(records)}, released {released} in {bundles}"
            f" bundles: {released / elapsed / 1e3:6.0f}k items/s released,"
            f" {len(records) / elapsed / 1e3:6.0f}k records/s pushed"
        )


if __name__ == "__main__":
    main()
