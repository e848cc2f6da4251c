"""The barrier and the acker as services: items/s and CPU per item, each in its own process.

A backlog is written first, as a last stage writes it: ``--items`` output items (a word
count's updates: key ``word``, value ``["word", n]``) in frames of up to 4096 on a
2-partition pre-barrier topic, ``--per-slot`` items per 10 ms slot over two fronts; after
every task batch of ``--batch`` items, the batch's sent-acks pre-aggregated per slot (as a
task's local acker flushes them) and the fronts' heartbeats. Then the acker and the
exactly-once barrier start, each in a process of its own (spawned, as `flamepipe acker` and
`flamepipe barrier` run), and work the backlog off: the barrier acks receipt, the acker
publishes min times, the barrier releases bundles in transactions. The clock stops when
the barrier has released every item; a read_committed reader then counts the output.

Printed: wall time and items/s from the services' start (start-up included) and from the
first release, and each service's CPU seconds and items per CPU-second (the goal of the
performance issue: 100k items/s on one core each).

``--barriers N`` gives the sink N barrier instances (`connectors.KafkaSink` ``barriers``),
each a process of its own: the sink gets 2N partitions, the pre-barrier topic N, and each
item goes to its output partition's instance, as a last stage routes it. The clock stops
when every instance has released its share. Words are Pareto(1) ranks (half the items are
one word, so one instance gets most of them) or, with ``--uniform``, uniform. The sink has
no grouping upstream, so its barrier buffers per slot (`framework.barrier.blocks`);
``--retracts`` runs the barrier of a sink tombstones can reach (per-item matching).

Run: ``.venv/bin/python benchmarks/bench_services.py [--items 1000000] [--per-slot 1000]
[--batch 8192] [--barriers 1] [--retracts] [--profile DIR]`` (``--profile`` writes a
cProfile of each service).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer, TopicPartition

from framework.acker.service import AckerService
from framework.barrier.service import BarrierService
from framework.core.acker.sharded import shard_of
from framework.core.messages import Ack, Heartbeat
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.kafka.admin import TopicSpec, ensure_topics
from framework.kafka.clients import new_consumer, produce_record
from framework.kafka.endpoints import KafkaSink
from framework.local.provision import provision
from framework.runners.keys import install_keys
from framework.wire.auth import Keyring, install
from framework.wire.avro import encode_ack_batch
from framework.wire.bundles import barrier_instance
from framework.wire.frames import FRAME_HEADERS, FrameBuilder
from framework.wire.records import OutRecord
from framework.wire.serde import Json
from framework.wire.topics import Topics

__all__ = ["main"]

SEGMENT = "s"
SEGMENTS = {SEGMENT: ()}
FRONTS = (7_000_001, 7_000_002)
FRONT_NODE, WORKER = 101, 202
SHARDS = 2
SINK_NODE = "9-sink"
WORDS = [f"w{i}" for i in range(10_000)]
TRACE = 0x5DEECE66D


@dataclass(frozen=True)
class Run:
    """What every process of one run needs."""

    bootstrap: str
    app: str
    keys: tuple[bytes, ...]
    items: int
    profile: str | None
    barriers: int = 1
    uniform: bool = False
    retracts: bool = False


def sink_of(run: Run) -> KafkaSink:
    """The sink: a word count's updates, keyed by word; two partitions per barrier."""
    return KafkaSink(
        f"{run.app}.out",
        value=Json(),
        key=_word_key,
        partitions=2 * run.barriers,
        barriers=run.barriers,
    )


def _pareto(rng: random.Random) -> int:
    """Pareto(1) word ranks: half the items are one word (a hot key)."""
    return int(rng.paretovariate(1.0)) % len(WORDS)


def _uniform(rng: random.Random) -> int:
    return rng.randrange(len(WORDS))


def _word_key(value: list[Any]) -> bytes:
    return str(value[0]).encode()


def write_backlog(run: Run, per_slot: int, batch: int) -> list[int]:
    """The backlog (module docstring); returns the items of each barrier instance."""
    bootstrap, app, items, sink = run.bootstrap, run.app, run.items, sink_of(run)
    # What this flamepipe's last stage sends (an earlier one: key and value bytes alone).
    encode = getattr(sink, "encode_item", lambda _meta, payload: sink.encode(payload))
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 200_000}
    )
    topics = Topics(app)
    pre = topics.pre(SINK_NODE)
    rng = random.Random(7)
    node_time = 0
    slot0 = time.time_ns() // 10_000_000 - items // per_slot - 100
    shares = [0] * run.barriers
    pick = _uniform if run.uniform else _pareto
    for first in range(0, items, batch):
        frames = [FrameBuilder(keyed=False) for _ in range(run.barriers)]
        acks: dict[int, int] = {}
        for i in range(first, min(items, first + batch)):
            slot = slot0 + i // per_slot
            front = FRONTS[i % 2]
            meta = Meta(GlobalTime(slot, front, i), (), TRACE)  # one path: one trace
            word = WORDS[pick(rng)]
            ack = rng.getrandbits(64) | 1
            record = encode(meta, [word, i])
            to = barrier_instance(record[0], meta, sink.partitions, run.barriers)
            frames[to].add(meta, ack, record)
            shares[to] += 1
            acks[slot] = acks.get(slot, 0) ^ ack
        for partition, frame in enumerate(frames):
            for value in frame.frames():
                produce_record(producer, OutRecord(pre, partition, None, value, FRAME_HEADERS))
        node_time += 1
        by_shard: dict[int, list[Ack]] = {}
        for slot, value in acks.items():
            by_shard.setdefault(shard_of(slot, SHARDS), []).append(Ack(SEGMENT, slot, value))
        last = slot0 + (min(items, first + batch) - 1) // per_slot
        beats = [Heartbeat(front, last) for front in FRONTS]
        for shard in range(SHARDS):
            worker = encode_ack_batch(WORKER, node_time, by_shard.get(shard, []), [])
            produce_record(producer, OutRecord(topics.acks, shard, None, worker))
            fronts = encode_ack_batch(FRONT_NODE, node_time, [], beats)
            produce_record(producer, OutRecord(topics.acks, shard, None, fronts))
        producer.poll(0)
    end = slot0 + (items - 1) // per_slot + 1
    node_time += 1
    for shard in range(SHARDS):
        beats = [Heartbeat(front, end) for front in FRONTS]
        fronts = encode_ack_batch(FRONT_NODE, node_time, [], beats)
        produce_record(producer, OutRecord(topics.acks, shard, None, fronts))
    producer.flush(60)
    return shares


def threads_cpu() -> str:
    """This process's CPU seconds by thread name (librdkafka names its threads ``rdk:*``)."""
    tick = os.sysconf("SC_CLK_TCK")
    by_name: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        name = head.split("(", 1)[1]
        name = "rdk:broker" if name.startswith("rdk:broker") else name
        fields = rest.split()
        by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {cpu:.2f}" for name, cpu in ranked if cpu >= 0.01)


def _profiled(profile: str | None, name: str, run: Any) -> None:
    if profile is None:
        run()
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.runcall(run)
    profiler.dump_stats(f"{profile}/{name}.prof")


def run_acker(run: Run, stop: Any, out: Any) -> None:
    """The acker service until ``stop`` is set; reports its CPU seconds."""
    install(Keyring(run.keys))

    def serve() -> None:
        with AckerService(run.bootstrap, run.app, SEGMENTS, list(FRONTS), SHARDS, poll_s=0.005):
            stop.wait()

    _profiled(run.profile, "acker", serve)
    out.put(("acker", time.process_time(), 0))


def run_barrier(run: Run, instance: int, share: int, stop: Any, out: Any) -> None:
    """Exactly-once barrier ``instance`` until it released its ``share`` of the items;
    reports its CPU seconds."""
    install(Keyring(run.keys))
    first_release = 0.0
    barrier = BarrierService(
        run.bootstrap,
        run.app,
        SINK_NODE,
        SEGMENT,
        sink_of(run),
        shards=SHARDS,
        segments=SEGMENTS,
        instance=instance,
        retracts=run.retracts,
    )

    threads = ""

    def watch() -> None:
        nonlocal first_release, threads
        while barrier.stats.items_out < share and not stop.is_set():
            if not first_release and barrier.stats.items_out:
                first_release = time.monotonic()
            time.sleep(0.005)
        threads = threads_cpu()
        barrier.stop_quietly()

    # The loop runs in this thread, so that a profile sees it.
    threading.Thread(target=watch, daemon=True).start()
    _profiled(run.profile, f"barrier{instance}", barrier.run_forever)
    stats = barrier.stats
    print(f"barrier {instance} CPU-s by thread: {threads}", flush=True)
    print(
        f"barrier {instance}: {stats.bundles} bundles, {stats.commits} commits, {stats.ahead} "
        f"items written ahead, {stats.holds} holds, {stats.aborts} aborts; {stats.timings()}",
        flush=True,
    )
    out.put((f"barrier{instance}", time.process_time(), first_release))


def count_output(bootstrap: str, topic: str, partitions: int, expected: int) -> int:
    """Items a read_committed reader finds on the output topic."""
    consumer = new_consumer(
        bootstrap, f"bench-reader-{uuid.uuid4().hex[:6]}", {"isolation.level": "read_committed"}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    idle = time.monotonic()
    while seen < expected and time.monotonic() - idle < 10:
        for msg in consumer.consume(10_000, 0.2):
            if msg.error() is None:
                seen += 1
                idle = time.monotonic()
    consumer.close()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--per-slot", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--barriers", type=int, default=1, help="barrier instances (processes)")
    parser.add_argument(
        "--uniform", action="store_true", help="uniform words (default: Pareto, one hot key)"
    )
    parser.add_argument(
        "--retracts",
        action="store_true",
        help="the barrier of a sink tombstones can reach (per-item matching) instead of the "
        "per-slot barrier of a sink no grouping precedes",
    )
    parser.add_argument("--profile", default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    with provision() as settings:
        keys = install_keys(settings).keys
        run = Run(
            settings.kafka_bootstrap,
            f"bench{uuid.uuid4().hex[:6]}",
            keys,
            args.items,
            args.profile,
            args.barriers,
            args.uniform,
            args.retracts,
        )
        topics = Topics(run.app)
        ensure_topics(
            run.bootstrap,
            [TopicSpec(topics.pre(SINK_NODE), run.barriers), TopicSpec(topics.acks, SHARDS)],
        )
        sink = sink_of(run)
        partitions = sink.prepare(run.bootstrap)
        started = time.monotonic()
        shares = write_backlog(run, args.per_slot, args.batch)
        print(
            f"backlog: {args.items:,} items written in {time.monotonic() - started:.1f} s; "
            f"per barrier instance {shares}"
        )
        stop, out = ctx.Event(), ctx.Queue()
        acker = ctx.Process(target=run_acker, args=(run, stop, out))
        barriers = [
            ctx.Process(target=run_barrier, args=(run, k, share, stop, out))
            for k, share in enumerate(shares)
        ]
        started = time.monotonic()
        acker.start()
        for barrier in barriers:
            barrier.start()
        for barrier in barriers:
            barrier.join(args.timeout)
        ended = time.monotonic()
        stop.set()
        acker.join(60)
        reports = {
            name: (cpu, at)
            for name, cpu, at in (out.get(timeout=30) for _ in range(1 + len(barriers)))
        }
        seen = count_output(run.bootstrap, sink.topic, partitions, args.items)
    wall = ended - started
    first = min(at for name, (_, at) in reports.items() if name != "acker" and at)
    steady = ended - first if first else float("nan")
    print(f"released and committed: {seen:,} of {args.items:,} items (read_committed)")
    print(f"from the services' start: {wall:.2f} s, {args.items / wall:,.0f} items/s")
    print(f"from the first release:   {steady:.2f} s, {args.items / steady:,.0f} items/s")
    barrier_cpu = sum(cpu for name, (cpu, _) in reports.items() if name != "acker")
    for name, cpu in (("barriers", barrier_cpu), ("acker", reports["acker"][0])):
        print(f"{name:<8} {cpu:6.2f} CPU-s, {args.items / cpu:,.0f} items per CPU-second")
    if seen != args.items:
        raise SystemExit(f"the output holds {seen} items, expected {args.items}")


if __name__ == "__main__":
    main()
