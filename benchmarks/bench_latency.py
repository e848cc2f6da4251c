"""End-to-end latency, exactly once vs at least once, side by side in one run.

One pipeline, one Spark run: lines -> words -> key_by -> group(window 2) -> map, then a
broadcast into two sinks. Sink ``eo`` has the exactly-once barrier (min-time release, one
Kafka transaction per bundle); sink ``alo`` the at-least-once barrier (same release rule,
the output without a transaction; only its receipt acks and positions commit in one).
Everything upstream of the barriers is shared, so the difference between the two columns
is what the output's transactions cost.

Latency of a record = wall clock when a read_committed consumer receives its output item
minus the record's LogAppendTime (from the producer's delivery report; one machine, one
clock). One reader process consumes both sinks' topics, so neither sink's stamps wait for
the driver. The overhead is reported as the difference of the sinks' percentiles and as
percentiles of the per-record difference. Phases: a first record through (the cold start),
then 1k and 10k records/s (one word per record), 5 s warm-up then 15 s measured each; then
a backlog drained by both sinks for throughput.

Where the services run: ``--processes`` (the deployed shape, as docker-compose runs it)
starts the acker and each barrier as a ``flamepipe acker|barrier`` process of its own;
without it they are threads of this process (the embedded default of ``pipeline.run()``),
sharing one interpreter lock with the Spark driver and the producer.

``--stateless`` measures a pipeline without the grouping (lines -> words -> map, the same
broadcast into two sinks): one Spark stage instead of two, so the difference between the
sinks is the barrier's alone on a less loaded stack.

Run: ``.venv/bin/python benchmarks/bench_latency.py [seconds-per-phase] [--processes]
[--stateless] [--cpu]``

``--cpu`` prints the CPU each process of the stack used in each phase (from /proc).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from cpu import cpu_seconds, print_cpu

from connectors import KafkaSink, KafkaSource
from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS
from framework.local.provision import provision
from framework.pipeline import Pipeline
from framework.runners.assembly import acker_for, barrier_for
from framework.spark import SparkRunner, spark_session

WARMUP_S = 5.0
RATES = (1_000, 10_000)
BACKLOG = 50_000


def tagged(line: str) -> list[list[str]]:
    """``"<id> <word>"`` -> ``[[word, id]]``."""
    line_id, word = line.split()
    return [[word, line_id]]


def pair(window: tuple[list[str], ...]) -> list[Any]:
    """``[word, [previous id, id]]``: the item names its line last."""
    return [window[-1][0], [tag for _, tag in window]]


def last(item: list[str]) -> list[Any]:
    """``[word, [id]]``: the stateless pipeline's output, read as `pair`'s is."""
    return [item[0], [item[1]]]


def pipeline(app: str, source: str, eo: str, alo: str, stateless: bool = False) -> Pipeline:
    """The benchmark pipeline; its two sinks differ only in their barrier's mode."""
    p = Pipeline(app)
    words = p.source(KafkaSource(source, partitions=2)).flat_map(tagged)
    if stateless:
        pairs = words.map(last)
    else:
        pairs = words.key_by(lambda item: item[0]).group(window=2).map(pair)
    to_eo, to_alo = pairs.broadcast(2)
    to_eo.sink(KafkaSink(eo), name="eo")
    to_alo.sink(KafkaSink(alo), name="alo")
    return p


def job() -> Pipeline:
    """`pipeline` named by the environment: the spec the service processes load."""
    env = os.environ
    topics = (env["FP_BENCH_IN"], env["FP_BENCH_EO"], env["FP_BENCH_ALO"])
    return pipeline(env["FP_BENCH_APP"], *topics, stateless="FP_BENCH_STATELESS" in env)


@contextmanager
def service_processes(settings: Settings, names: dict[str, str]) -> Iterator[None]:
    """The acker and both barriers as ``flamepipe`` processes, ready; stopped on exit."""
    here = Path(__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMEPIPE_")}
    env.update(
        names,
        PYTHONPATH=os.pathsep.join([str(here), str(here.parent)]),
        FLAMEPIPE_BOOTSTRAP_SERVERS=settings.kafka_bootstrap,
        FLAMEPIPE_ZOOKEEPER_CONNECT=settings.zookeeper,
        FLAMEPIPE_ACKER_SHARDS=str(settings.acker_shards),
    )
    cli = [sys.executable, "-m", "framework.cli"]
    commands = {
        "acker": [*cli, "acker", "bench_latency:job"],
        "eo": [*cli, "barrier", "bench_latency:job", "--sink", "eo"],
        "alo": [*cli, "barrier", "bench_latency:job", "--sink", "alo", "--at-least-once"],
    }
    logs = Path(tempfile.mkdtemp(prefix="flamepipe-bench-latency-"))
    procs = {
        name: subprocess.Popen(
            command, env=env, stdout=(logs / f"{name}.log").open("wb"), stderr=subprocess.STDOUT
        )
        for name, command in commands.items()
    }
    try:
        deadline = time.monotonic() + 120
        for name, proc in procs.items():
            log = logs / f"{name}.log"
            while "ready (epoch" not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)
        yield
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass
class Receipts:
    """Wall-clock ms at which each line id's item was first seen; duplicates counted."""

    seen: dict[int, int] = field(default_factory=dict)
    duplicates: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def read_outputs(bootstrap: str, topics: tuple[str, ...], out: Any, stop: Any) -> None:
    """Process body: timestamp every item of ``topics`` (read_committed), send batches.

    A process of its own, one consumer for all sinks, so the sinks are read alike and the
    stamps do not wait for the driver's interpreter lock. Sends ``[(sink index, line id,
    wall ms), ...]`` to ``out`` about every 20 ms.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            # The broker answers a waiting fetch as soon as commit markers land, so a
            # long wait adds no latency; a short one costs the broker CPU per fetch.
            "fetch.wait.max.ms": 500,
        }
    )
    index = {topic: i for i, topic in enumerate(topics)}
    consumer.assign([TopicPartition(topic, 0, 0) for topic in topics])
    batch: list[tuple[int, int, int]] = []
    sent = time.monotonic()
    try:
        while not stop.is_set():
            # consume(n, t) waits out t unless n messages come, and that wait would count
            # as latency: wait for one, then take what is there.
            first = consumer.consume(1, 0.02)
            for msg in first + consumer.consume(10_000, 0) if first else ():
                now = time.time_ns() // 1_000_000
                value = msg.value()
                if msg.error() is not None or value is None:  # a bundle header has no value
                    continue
                # The value is ``["word", ["previous id", "id"]]``: the last quoted field.
                line_id = int(value.rsplit(b'"', 2)[1])
                batch.append((index[msg.topic()], line_id, now))
            if batch and time.monotonic() - sent > 0.02:
                out.put(batch)
                batch, sent = [], time.monotonic()
    finally:
        if batch:
            out.put(batch)
        out.put(None)
        consumer.close()


def collect(queue: Any, receipts: Sequence[Receipts]) -> None:
    """Thread body: the reader process's batches into ``receipts`` until it ends."""
    while (batch := queue.get()) is not None:
        for sink, line_id, now in batch:
            r = receipts[sink]
            with r.lock:
                if line_id in r.seen:
                    r.duplicates += 1
                else:
                    r.seen[line_id] = now


class Input:
    """Produces ``"<id> <word>"`` lines; keeps each line's LogAppendTime."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.appended: dict[int, int] = {}
        self.next_id = 0
        self._rng = random.Random(7)
        # Latency starts at LogAppendTime, so batching here costs the measurement nothing,
        # while a produce request per partition every few ms took much of the broker.
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def _delivered(self, error: Any, msg: Any) -> None:
        if error is None:
            self.appended[int(msg.value().split()[0])] = msg.timestamp()[1]

    def produce(self, count: int) -> range:
        """Produce ``count`` lines now; returns their ids."""
        ids = range(self.next_id, self.next_id + count)
        for line_id in ids:
            word = f"w{self._rng.randrange(2000)}"
            value = f"{line_id} {word}".encode()
            self._producer.produce(
                self.topic, value, partition=line_id % 2, on_delivery=self._delivered
            )
        self._producer.poll(0)
        self.next_id += count
        return ids

    def at_rate(self, rate: int, seconds: float) -> range:
        """Produce ``rate`` lines per second for ``seconds`` in 20 ms steps."""
        first, started, sent = self.next_id, time.monotonic(), 0
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(rate * elapsed) - sent
            if due > 0:
                self.produce(due)
                sent += due
            time.sleep(0.02)
        self._producer.flush(30)
        return range(first, self.next_id)

    def flush(self) -> None:
        """Wait for every delivery report."""
        self._producer.flush(60)


def wait_for(ids: Sequence[int], receipts: Sequence[Receipts], timeout_s: float) -> bool:
    """Until every id was received by every sink; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(all(i in r.seen for i in ids) for r in receipts):
            return True
        time.sleep(0.1)
    return False


def percentiles(values: list[int]) -> tuple[float, float]:
    """p50 and p99 of ``values``."""
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))]


def report_batches(run: Any, since: dict[str, int]) -> None:
    """Per stage, p50 of each part of Spark's micro-batch (``durationMs``) since ``since``,
    batches with input only; ``since`` moves to now."""
    for stage, query in run.queries.items():
        progress = query.query.recentProgress
        batches = [p for p in progress[since.get(stage, 0) :] if p["numInputRows"]]
        since[stage] = len(progress)
        if not batches:
            continue
        parts = sorted({k for p in batches for k in p["durationMs"]})
        medians = {k: statistics.median(p["durationMs"].get(k, 0) for p in batches) for k in parts}
        rows = statistics.median(p["numInputRows"] for p in batches)
        shown = "  ".join(f"{k} {v:.0f}" for k, v in medians.items() if v)
        print(f"    stage {stage}: {len(batches)} batches, p50 rows {rows:.0f}; ms p50: {shown}")


def report_phase(rate: int, ids: range, source: Input, sinks: dict[str, Receipts]) -> None:
    """Print p50/p99 per sink and the exactly-once overhead, two ways.

    The difference of the sinks' percentiles, and the percentiles of the per-record
    difference (the same record through both barriers), which cancels what the two paths
    share: the record's wait for its micro-batch and for the min time.
    """
    stats = {}
    for name, receipts in sinks.items():
        lat = [receipts.seen[i] - source.appended[i] for i in ids if i in receipts.seen]
        stats[name] = percentiles(lat)
        print(
            f"  {rate:>6}/s {name:<3} n={len(lat):<6} p50={stats[name][0]:7.0f} ms "
            f"p99={stats[name][1]:7.0f} ms  duplicates={receipts.duplicates}"
        )
    p50 = stats["eo"][0] - stats["alo"][0]
    p99 = stats["eo"][1] - stats["alo"][1]
    print(f"  {rate:>6}/s overhead of exactly once: p50 {p50:+.0f} ms, p99 {p99:+.0f} ms")
    eo, alo = sinks["eo"].seen, sinks["alo"].seen
    paired = percentiles([eo[i] - alo[i] for i in ids if i in eo and i in alo])
    print(
        f"  {rate:>6}/s per-record overhead (eo - alo, same record): "
        f"p50 {paired[0]:+.0f} ms, p99 {paired[1]:+.0f} ms"
    )


def drain_backlog(source_input: Input, receipts: dict[str, Receipts], show_cpu: bool) -> None:
    """Throughput: a backlog of `BACKLOG` records, timed until each sink output all of it."""
    cpu_before = cpu_seconds()
    ids = source_input.produce(BACKLOG)
    source_input.flush()
    started = time.monotonic()
    done: dict[str, float] = {}
    while len(done) < 2 and time.monotonic() - started < 600:
        for name, r in receipts.items():
            if name not in done and all(i in r.seen for i in ids):
                done[name] = time.monotonic() - started
        time.sleep(0.05)
    cpu_after, span = cpu_seconds(), time.monotonic() - started
    for name, took in done.items():
        print(f"  backlog {BACKLOG} {name:<3} {BACKLOG / took:9,.0f} records/s")
    if len(done) == 2:
        ratio = done["alo"] / done["eo"]
        print(f"  exactly-once throughput = {ratio:.0%} of at-least-once")
    if show_cpu:
        print("  backlog CPU, by process:")
        print_cpu(cpu_before, cpu_after, span)


@contextmanager
def services_in_process(settings: Settings, graph: Any) -> Iterator[None]:
    """The acker and both barriers as threads of this process; stopped on exit."""
    sinks = {n.label: n.id for n in graph.nodes if n.label in ("eo", "alo")}
    services = [
        acker_for(settings, graph),
        barrier_for(settings, graph, sinks["eo"], exactly_once=True),
        barrier_for(settings, graph, sinks["alo"], exactly_once=False),
    ]
    try:
        for service in services:
            service.start()
        for service in services:
            service.wait_ready()
        yield
    finally:
        for service in reversed(services):
            service.stop_quietly()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    processes = "--processes" in sys.argv[1:]
    stateless = "--stateless" in sys.argv[1:]
    measured_s = float(args[0]) if args else 15.0
    with provision() as stack:
        settings = stack.with_(parallelism=2)
        app = f"lat{uuid.uuid4().hex[:6]}"
        source, eo_topic, alo_topic = f"{app}-in", f"{app}-eo", f"{app}-alo"
        graph = pipeline(app, source, eo_topic, alo_topic, stateless).graph()
        names = {"FP_BENCH_APP": app, "FP_BENCH_IN": source}
        if stateless:
            names["FP_BENCH_STATELESS"] = "1"
        names.update(FP_BENCH_EO=eo_topic, FP_BENCH_ALO=alo_topic)
        with (
            service_processes(settings, names)
            if processes
            else services_in_process(settings, graph)
        ):
            where = "processes" if processes else "threads of the driver"
            shape = "stateless (one stage)" if stateless else "word pairs (two stages)"
            print(f"pipeline: {shape}; services: acker and barriers as {where}")
            measure(
                settings,
                graph,
                (source, eo_topic, alo_topic),
                measured_s,
                "--cpu" in sys.argv[1:],
            )


def measure(
    settings: Settings,
    graph: Any,
    topics: tuple[str, str, str],
    seconds: float,
    show_cpu: bool = False,
) -> None:
    """The phases of the module docstring on ``graph`` (services running): source, eo, alo."""
    bootstrap = settings.kafka_bootstrap
    source, eo_topic, alo_topic = topics
    spark = spark_session(
        settings,
        "bench-latency",
        {"spark.master": os.environ.get("FLAMEPIPE_SPARK_MASTER", "local[2]")},
    )
    run = SparkRunner(settings, spark, services="external").start(graph)
    receipts = {"eo": Receipts(), "alo": Receipts()}
    mp = multiprocessing.get_context("spawn")
    stop, batches = mp.Event(), mp.Queue()
    reader = mp.Process(
        target=read_outputs, args=(bootstrap, (eo_topic, alo_topic), batches, stop), daemon=True
    )
    reader.start()
    collector = threading.Thread(target=collect, args=(batches, list(receipts.values())))
    collector.start()
    source_input = Input(bootstrap, source)
    try:
        # The first micro-batch pays the Python workers' start (tens of seconds on a cold
        # stack): measuring before it is through would time that backlog, not the path.
        first = source_input.produce(1)
        source_input.flush()
        if not wait_for(first, list(receipts.values()), 300):
            raise RuntimeError("the first record did not come through within 300 s")
        print(
            f"latency, producer append -> committed output (2 cores, delta_ms={DEFAULT_DELTA_MS})"
        )
        since: dict[str, int] = {}
        for rate in RATES:
            source_input.at_rate(rate, WARMUP_S)
            since.update({stage: len(q.query.recentProgress) for stage, q in run.queries.items()})
            cpu_before, phase_started = cpu_seconds(), time.monotonic()
            ids = source_input.at_rate(rate, seconds)
            cpu_after, span = cpu_seconds(), time.monotonic() - phase_started
            if not wait_for(ids, list(receipts.values()), 300):
                print(f"  {rate}/s: not everything arrived within 300 s")
            report_phase(rate, ids, source_input, receipts)
            if show_cpu:
                print(f"  {rate:>6}/s CPU while producing, by process:")
                print_cpu(cpu_before, cpu_after, span)
                report_batches(run, since)
        drain_backlog(source_input, receipts, show_cpu)
    finally:
        stop.set()
        collector.join(30)
        reader.join(30)
        run.stop()
        spark.stop()


if __name__ == "__main__":
    main()
