"""A loop on Spark: the latency of a component update and the loop's throughput.

The pipeline is incremental connected components (`framework.demos.components`) over JSON
edges on two source partitions, parallelism 2, released per 100 ms pane. One run:

1. Warm-up: one edge through, so the Python workers and tasks are up.
2. Throughput: ``--edges`` random edges over twice as many vertices (small components, no
   giant one) appended as fast as the producer goes; from the first append until the
   barrier has released everything appended. Reported: edges/s, and the items the loop's
   stage read per second (each edge's two ends plus every label sent round again).
3. Update latency, one probe at a time on the idle pipeline: an edge between two fresh
   vertices (the greater one's label changes after one round), then an edge from a fresh
   vertex with the least label yet to the end of a chain of ``--chain`` vertices built in
   step 2 (the label travels the chain, one round per vertex). Latency = when an
   independent read_committed reader receives ``(vertex, label)`` minus the edge's
   LogAppendTime. Nothing is released before the loop has settled (min time), so the
   chain's every label arrives at once; the difference of the two medians over the extra
   rounds is what a round costs. A pane's wait (up to 100 ms) is part of both. All pairs
   go first, then all chains, each probe's vertices its own.

Run: ``.venv/bin/python benchmarks/bench_loops.py [--execution continuous|micro-batch]
[--edges N] [--probes N] [--chain N]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer

from connectors import Json, KafkaSink, KafkaSource
from framework.config import Settings
from framework.demos.components import connected_components
from framework.local.provision import provision
from framework.spark import SparkRunner, spark_session

PANE_MS = 100
CHAIN_BASE = 10_000_000  # chains' vertices: above every random edge's
FRESH_BASE = -1_000_000  # probes' fresh vertices: below everything, so their label wins


class Receipts:
    """A read_committed reader of the sink: when each ``(vertex, label)`` first arrived."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.seen: dict[tuple[int, int], float] = {}
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-loops-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(500, 0.05):
                if msg.error() is None and msg.value():
                    vertex, label = json.loads(msg.value())
                    self.seen.setdefault((vertex, label), time.time())

    def wait(self, key: tuple[int, int], timeout_s: float) -> float | None:
        """When ``key`` arrived (epoch seconds), None if not within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while key not in self.seen and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.seen.get(key)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


class Edges:
    """A producer of JSON edges that knows each one's LogAppendTime."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.stamps: dict[int, float] = {}

    def send(self, edges: list[tuple[int, int]], tag: int | None = None) -> None:
        def stamped(err: Any, msg: Any) -> None:
            if err is None and tag is not None:
                self.stamps[tag] = msg.timestamp()[1] / 1000

        last = len(edges) - 1
        for i, edge in enumerate(edges):
            value = json.dumps(list(edge)).encode()
            if i == last:  # the last edge's delivery report carries its LogAppendTime
                self.producer.produce(self.topic, value, partition=i % 2, on_delivery=stamped)
            else:
                self.producer.produce(self.topic, value, partition=i % 2)
            if i % 10_000 == 0:
                self.producer.poll(0)
        self.producer.flush(60)


def random_edges(count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    vertices = 2 * count
    return [(rng.randrange(vertices), rng.randrange(vertices)) for _ in range(count)]


def chains(count: int, length: int) -> list[tuple[int, int]]:
    """``count`` chains of ``length`` vertices: chain k is CHAIN_BASE + k*length + 0..n-1."""
    edges = []
    for k in range(count):
        first = CHAIN_BASE + k * length
        edges += [(first + i, first + i + 1) for i in range(length - 1)]
    return edges


def percentiles(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):.0f} ms, p99 {p99:.0f} ms, max {ms[-1]:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--execution", default="continuous")
    parser.add_argument("--edges", type=int, default=20_000)
    parser.add_argument("--probes", type=int, default=30)
    parser.add_argument("--chain", type=int, default=10)
    args = parser.parse_args()
    with provision() as stack:
        run_benchmark(stack.with_(parallelism=2, execution=args.execution), args)


def run_benchmark(settings: Settings, args: argparse.Namespace) -> None:
    bootstrap = settings.kafka_bootstrap
    app = f"loops{uuid.uuid4().hex[:6]}"
    source, sink = f"{app}-edges", f"{app}-labels"
    pipeline = connected_components(
        app, KafkaSource(source, value=Json(), partitions=2), KafkaSink(sink), pane_ms=PANE_MS
    )
    graph = pipeline.graph()
    spark = spark_session(settings, "bench-loops", {"spark.master": "local[2]"})
    run = SparkRunner(settings, spark).start(graph)
    receipts = Receipts(bootstrap, sink)
    edges = Edges(bootstrap, source)
    loop_stage = next(n.id for n in graph.nodes if n.kind.value == "loop")
    try:
        # Step 1
        edges.send([(FRESH_BASE - 1, FRESH_BASE - 2)])
        if receipts.wait((FRESH_BASE - 1, FRESH_BASE - 2), 300) is None:
            raise RuntimeError("the warm-up edge did not come through within 300 s")
        # Step 2
        backlog = random_edges(args.edges, seed=1) + chains(args.probes, args.chain)
        before = run.stats[loop_stage].items_in
        started = time.monotonic()
        edges.send(backlog)
        until = time.time_ns() // 1_000_000
        run.wait_released(until + PANE_MS, timeout_s=900)
        took = time.monotonic() - started
        time.sleep(2)  # continuous stages' counts lag up to a second
        looped = run.stats[loop_stage].items_in - before
        print(
            f"{settings.execution}, parallelism 2, local[2]: {len(backlog)} edges in {took:.1f} s:"
            f" {len(backlog) / took:,.0f} edges/s; the loop's stage read {looped:,} items"
            f" ({looped / took:,.0f}/s, {looped / (2 * len(backlog)):.2f} per edge end)"
        )
        # Step 3
        pairs, far = [], []
        for k in range(args.probes):
            fresh = FRESH_BASE - 10 - 2 * k
            edges.send([(fresh, fresh + 1)], tag=-1 - k)  # a new pair: one round
            got = receipts.wait((fresh + 1, fresh), 60)
            if got is not None and -1 - k in edges.stamps:
                pairs.append(got - edges.stamps[-1 - k])
            time.sleep(0.3)
        for k in range(args.probes):
            least = FRESH_BASE - 100_000 - k  # below every pair's vertices
            first = CHAIN_BASE + k * args.chain
            edges.send([(least, first + args.chain - 1)], tag=k)  # the chain's rounds
            got = receipts.wait((first, least), 60)
            if got is not None and k in edges.stamps:
                far.append(got - edges.stamps[k])
            time.sleep(0.3)
        print(f"update latency, a new pair (1 round): {percentiles(pairs)} ({len(pairs)} probes)")
        print(
            f"update latency, a chain's far end ({args.chain} rounds): {percentiles(far)}"
            f" ({len(far)} probes)"
        )
        rounds = args.chain - 1
        extra = (statistics.median(far) - statistics.median(pairs)) / rounds * 1000
        print(f"each further round: {extra:.0f} ms (difference of the medians / {rounds})")
    finally:
        receipts.close()
        run.stop()
        spark.stop()


if __name__ == "__main__":
    main()
