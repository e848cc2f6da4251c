"""Throughput of the tracker: acks/s through `Acker.ack`, `Acker.ack_many`, the local
acker, and one shard of the sharded tracker. Goal: >= 500k acks/s per core.

The workload is a three-segment chain; each item is acked when sent and when received in
each segment (6 acks); acks arrive in batches of 1000 (a flush) and a front heartbeats
after each batch. Receive-acks trail sends, so slots open in one batch and clear in a
later one, as in a running pipeline. "dense" puts 100 items in a slot; "sparse" puts one,
so nearly every receive-ack clears the lowest open slot and triggers CheckMinTime.

Run: ``.venv/bin/python benchmarks/bench_acker.py [acks]``.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable

from framework.core.acker.local import LocalAcker
from framework.core.acker.sharded import AckerShard
from framework.core.acker.tracker import Acker
from framework.core.messages import Ack, NodeTime

__all__ = ["main"]

SEGMENTS = {"source": [], "middle": ["source"], "sink": ["middle"]}
CHAIN = ("source", "middle", "sink")
BATCH = 1000
LAG = 500

AckBatch = list[tuple[str, int, int]]


def make_batches(n_acks: int, per_slot: int) -> list[tuple[AckBatch, int]]:
    """Ack batches, each with the heartbeat slot the front sends after it.

    Sends come in slot order and each receive-ack trails its send by ``LAG`` acks, so a
    slot opens in one batch and clears in a later one.
    """
    rng = random.Random(3)
    sends: AckBatch = []
    for i in range(n_acks // 2 // len(CHAIN)):
        slot = 1 + i // per_slot
        sends.extend((segment, slot, rng.getrandbits(64) | 1) for segment in CHAIN)
    ordered: AckBatch = []
    for i, send in enumerate(sends):
        ordered.append(send)
        if i >= LAG:
            ordered.append(sends[i - LAG])
    ordered.extend(sends[max(0, len(sends) - LAG) :])
    batches = []
    for start in range(0, len(ordered), BATCH):
        batch = ordered[start : start + BATCH]
        batches.append((batch, min(slot for _, slot, _ in batch)))
    return batches


def timed(run: Callable[[], None], n_acks: int) -> float:
    start = time.perf_counter()
    run()
    return n_acks / (time.perf_counter() - start)


def bench_ack(batches: list[tuple[AckBatch, int]]) -> Callable[[], None]:
    acker = Acker(SEGMENTS, fronts=[0])

    def run() -> None:
        ack, beat = acker.ack, acker.heartbeat
        for batch, slot in batches:
            for segment, s, value in batch:
                ack(segment, s, value)
            beat(0, slot)

    return run


def bench_ack_many(batches: list[tuple[AckBatch, int]]) -> Callable[[], None]:
    acker = Acker(SEGMENTS, fronts=[0])

    def run() -> None:
        ack_many, beat = acker.ack_many, acker.heartbeat
        for batch, slot in batches:
            ack_many(batch)
            beat(0, slot)
        assert acker.pending() == 0

    return run


def bench_local(batches: list[tuple[AckBatch, int]]) -> Callable[[], None]:
    acker = Acker(SEGMENTS, fronts=[0])
    local = LocalAcker(SEGMENTS)

    def run() -> None:
        for batch, slot in batches:
            local.ack_many(batch)
            local.heartbeat(0, slot)
            local.flush_to(acker)
        assert acker.pending() == 0

    return run


def bench_shard(batches: list[tuple[AckBatch, int]]) -> Callable[[], None]:
    shard = AckerShard(0, 1, SEGMENTS, fronts=[0])
    messages = [[Ack(*ack) for ack in batch] for batch, _ in batches]

    def run() -> None:
        receive = shard.receive
        for time_, batch in enumerate(messages, start=1):
            for message in batch:
                receive(1, message)
            receive(1, NodeTime(1, time_))

    return run


def main() -> None:
    n_acks = int(sys.argv[1]) if len(sys.argv) > 1 else 600_000
    for workload, per_slot in (("dense", 100), ("sparse", 1)):
        batches = make_batches(n_acks, per_slot)
        total = sum(len(batch) for batch, _ in batches)
        print(f"{workload}: {total} acks, batches of {BATCH}, {per_slot} item(s) per slot")
        for name, make in (
            ("Acker.ack", bench_ack),
            ("Acker.ack_many", bench_ack_many),
            ("LocalAcker -> Acker", bench_local),
            ("AckerShard.receive", bench_shard),
        ):
            rate = max(timed(make(batches), total) for _ in range(3))
            print(f"  {name:22s} {rate / 1e3:8.0f}k acks/s")


if __name__ == "__main__":
    main()
