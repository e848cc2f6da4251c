"""Where a stateless record's milliseconds go, hop by hop, in one run.

Runs the peer benchmark's stateless pipeline (``lines -> upper -> sink``, two source
partitions, exactly once) at a steady rate, watches the sink segment's min time on the
driver (a subscription to the run's min-time view), then reads every topic the records
crossed and splits each slot's latency (a slot: ``delta_ms`` of input) into:

- ``stage``: the record's LogAppendTime -> its frame produced to the pre-barrier topic
  (the source stage: poll or micro-batch, operators, encoding; the frame's CreateTime);
  through a shuffle (``--pipeline pairs``) split into ``source`` (-> the source stage's
  frame produced), ``its commit`` (-> readable with read_committed) and ``keyed stage``
  (-> the keyed stage's frame produced: its fetch, program and the wait for its commit)
- ``min time``: frame produced -> the driver sees min time pass the slot, split into
  ``commit`` (frame produced -> readable with read_committed: the stage's transaction),
  ``fronts in`` (frame readable -> the fronts' heartbeats past the slot readable on the
  acks topic: the other partition's next commit), ``acker`` (the later of those and the
  slot's last ack -> the acker's report on the min-time topic) and ``notify`` (report
  appended -> the driver's view has it)
- ``release``: min time passed -> the output record produced (the barrier's bundle)
- ``read``: output produced -> a read_committed reader has it (the commit, the fetch);
  not shown when output values repeat (the pairs), which leaves no way to tell which
  record was read when: ``total to release`` is then the last figure

``--pipeline windowed`` times each window's last result from the window's end instead,
and shows beside the chain when the aggregate's segment passed the window's end
(``fronts in``, ``agg min time``) and the emission after it. ``--task-logs DIR`` runs at
DEBUG, so every commit of every continuous task is timed in the worker logs kept there.

p50 and p99 over slots, each slot timed by its earliest record (its worst latency)::

    .venv/bin/python benchmarks/latency_breakdown.py [--execution continuous] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_peer_table import WINDOW_MS, Reader, Text, pct, produce, stateless

from framework.core.messages import Ack, Heartbeat, MinTimeNotification
from framework.demos.wordcount import windowed_counts, word_pairs
from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec, partition_count
from framework.kafka.clients import read_to_end
from framework.local.provision import provision
from framework.logs import log_dir
from framework.spark import SparkRunner, spark_session
from framework.wire.avro import decode_ack_batch, decode_meta, decode_min_time
from framework.wire.bundles import META_HEADER
from framework.wire.frames import read_items
from framework.wire.topics import Topics

_KEYED = ("GROUP", "AGGREGATE")  # the nodes whose input crosses a shuffle topic


class MinTimes:
    """When (wall clock, ms) the driver saw each segment's min time pass each value."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str | None, int]] = []  # (slot, segment, at_ms)
        self._lock = threading.Lock()

    def __call__(self, note: MinTimeNotification) -> None:
        with self._lock:
            self.seen.append((note.slot, note.segment, time.time_ns() // 1_000_000))

    def passed(self, segment: str) -> list[tuple[int, int]]:
        """(min time, when first seen) of ``segment``, in order."""
        with self._lock:
            return sorted((slot, at) for slot, seg, at in self.seen if seg == segment)


def watch(bootstrap: str, partitions: dict[str, int], out: str, stop: Any) -> None:
    """In a process of its own (no share of the driver's interpreter lock): stamp the
    receipt of every record of ``partitions`` (topic -> count) by a read_committed reader,
    from their ends on; write ``[topic, partition, offset, ms]`` rows to ``out`` at ``stop``."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
        }
    )
    consumer.assign(
        [TopicPartition(t, p, OFFSET_END) for t, n in partitions.items() for p in range(n)]
    )
    rows: list[tuple[str, int, int, int]] = []
    while not stop.is_set():
        for msg in consumer.consume(1000, 0.005):
            if msg.error() is None:
                at = time.time_ns() // 1_000_000
                rows.append((msg.topic(), msg.partition(), msg.offset(), at))
    consumer.close()
    Path(out).write_text(json.dumps(rows))


def first_past(passed: list[tuple[int, int]], slot: int) -> int | None:
    """When min time first passed ``slot`` (min time > slot)."""
    for value, at in passed:  # few thousand entries: a scan is fine for a benchmark
        if value > slot:
            return at
    return None


class Hops:
    """When the acks and reports a slot's min time needs became readable (wall clock, ms):
    per acks partition (one acker shard each), the last batch with an ack of the slot in
    ``segment``, each front's first heartbeat past the slot, and the shard's first report
    of ``segment`` past it (its append time on the min-time topic)."""

    def __init__(
        self, bootstrap: str, topics: Topics, segment: str, seen: dict[tuple[str, int, int], int]
    ) -> None:
        self.acks: dict[tuple[int, int], int] = {}  # (shard, slot) -> last readable
        self.beats: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        self.reports: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for msg in read_to_end(bootstrap, topics.acks):
            at = seen.get((msg.topic(), msg.partition(), msg.offset()))
            if at is None:
                continue
            shard = msg.partition()
            for m in decode_ack_batch(msg.value()):
                if isinstance(m, Ack) and m.segment == segment:
                    self.acks[shard, m.slot] = max(self.acks.get((shard, m.slot), 0), at)
                elif isinstance(m, Heartbeat):
                    self.beats[shard, m.front].append((at, m.slot))
        for msg in read_to_end(bootstrap, topics.mintime):
            note = decode_min_time(msg.value())
            if note.segment == segment:
                self.reports[note.shard].append((msg.timestamp()[1], note.slot))
        for values in (*self.beats.values(), *self.reports.values()):
            values.sort()

    def ready(self, slot: int) -> tuple[int, int, int] | None:
        """(last ack in, last front past it in, last shard's report past it), or None."""
        acks_in = fronts_in = reported = 0
        for shard, entries in self.reports.items():
            report = next((at for at, value in entries if value > slot), None)
            fronts = [
                next((at for at, value in beats if value > slot), None)
                for (s, _), beats in self.beats.items()
                if s == shard
            ]
            if report is None or None in fronts:
                return None
            reported = max(reported, report)
            fronts_in = max([fronts_in, *(f for f in fronts if f is not None)])
            acks_in = max(acks_in, self.acks.get((shard, slot), 0))
        return (acks_in, fronts_in, reported) if reported else None


def breakdown(args: Any) -> None:
    text = Text()
    with provision() as stack:
        master = "local[4]" if args.execution == "continuous" else "local[2]"
        # Not trimmed: the report reads the internal topics back after the run.
        settings = stack.with_(
            parallelism=2,
            spark_master=master,
            execution=args.execution,
            trim_interval_ms=0,
            log_level="DEBUG" if args.task_logs else stack.log_level,
        )
        tag = f"lb{uuid.uuid4().hex[:6]}"
        source, sink = f"{tag}-in", f"{tag}-out"
        bootstrap = settings.kafka_bootstrap
        ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
        spark = spark_session(settings, f"bench-{tag}", {"spark.master": master})
        if args.pipeline == "windowed":
            graph = windowed_counts(tag, source, sink, window_ms=WINDOW_MS).graph()
        elif args.pipeline == "pairs":
            graph = word_pairs(tag, source, sink).graph()
        else:
            graph = stateless(tag, source, sink).graph()
        run = SparkRunner(settings, spark).start(graph)
        reader = Reader(bootstrap, sink)
        mins = MinTimes()
        assert run.services.view is not None
        run.services.view.subscribe(mins)
        sink_node = next(n.id for n in graph.nodes if n.kind.name == "SINK")
        topics = Topics(tag)
        shuffles = [topics.shuffle(n.id) for n in graph.nodes if n.kind.name in _KEYED]
        watched = [topics.pre(sink_node), topics.acks, topics.mintime, *shuffles]
        spawn = multiprocessing.get_context("spawn")
        stop, rows = spawn.Event(), Path(f"/tmp/{tag}-hops.json")
        watcher = spawn.Process(
            target=watch,
            args=(bootstrap, {t: partition_count(bootstrap, t) for t in watched}, str(rows), stop),
        )
        watcher.start()
        try:
            produce(bootstrap, source, text.lines(args.rate * 5, seed=3), args.rate)  # warm
            started_ms = time.time_ns() // 1_000_000
            produce(bootstrap, source, text.lines(args.rate * args.seconds, seed=5), args.rate)
            time.sleep(3)
            for barrier in run.barriers():
                print(f"barrier {barrier.sink_node}: {barrier.stats.timings()}")
        finally:
            stop.set()
            watcher.join()
            reader.close()
            run.stop()
            spark.stop()
            if args.task_logs:  # every commit of every task timed (DEBUG), kept
                shutil.copytree(log_dir(settings.state_dir), args.task_logs, dirs_exist_ok=True)
        seen = {(t, p, o): at for t, p, o, at in json.loads(rows.read_text())}
        rows.unlink()
        (window_report if args.pipeline == "windowed" else report)(
            bootstrap,
            app=tag,
            graph=graph,
            source=source,
            sink=sink,
            mins=mins,
            reader=reader,
            since_ms=started_ms,
            delta_ms=graph.delta_ms,
            seen=seen,
        )


def window_report(
    bootstrap: str,
    *,
    app: str,
    graph: Any,
    sink: str,
    mins: MinTimes,
    reader: Reader,
    since_ms: int,
    delta_ms: int,
    seen: dict[tuple[str, int, int], int],
    **_: Any,
) -> None:
    """Per window, from its end (wall clock) to its last result: ``emit`` (the aggregate's
    frame produced), ``commit`` (readable), ``min time`` (the driver sees the sink's
    segment pass the result), ``release`` (output produced), ``read``."""
    sink_node = next(n.id for n in graph.nodes if n.kind.name == "SINK")
    segment = graph.segments().of_node[sink_node]
    frames: dict[bytes, tuple[int, int]] = {}  # fp.meta -> (frame CreateTime, readable)
    topics = Topics(app)
    for msg in read_to_end(bootstrap, topics.pre(sink_node)):
        at = seen.get((msg.topic(), msg.partition(), msg.offset()), 0)
        for _, _, payload in read_items(msg.headers(), msg.value(), "pre"):
            frames[payload[2]] = (msg.timestamp()[1], at)  # (key, value, fp.meta, fp.mac)
    received: dict[bytes, float] = {value: at for at, value in reader.got}
    passed = mins.passed(segment)
    # The aggregate's side: its segment's min time must reach the window end's slot.
    aggregate = next(n.id for n in graph.nodes if n.kind.name == "AGGREGATE")
    hops = Hops(bootstrap, topics, graph.segments().of_node[aggregate], seen)
    last: dict[int, list[float]] = {}  # window end -> the stages' latest times
    due: dict[int, tuple[int, int, int]] = {}  # window end -> hops.ready of its last slot
    for msg in read_to_end(bootstrap, sink):
        raw = dict(msg.headers() or []).get(META_HEADER)
        value = msg.value() or b""
        if raw is None or value not in received:
            continue
        meta = decode_meta(raw)
        _, start, _ = json.loads(value)
        end = start + WINDOW_MS
        frame = frames.get(raw)
        past = first_past(passed, meta.gt.slot)
        if end < since_ms or frame is None or past is None:
            continue
        ready = hops.ready(end // delta_ms - 1)
        if ready is not None:
            due[end] = ready
        times = [frame[0], frame[1], past, msg.timestamp()[1], received[value] * 1000]
        last[end] = [max(a, b) for a, b in zip(last.get(end, times), times, strict=True)]
    names = ("emit", "commit", "min time", "release", "read")
    parts: dict[str, list[float]] = defaultdict(list)
    for end, times in sorted(last.items()):
        for i, name in enumerate(names):
            parts[name].append(times[i] - (times[i - 1] if i else end))
        parts["total"].append(times[-1] - end)
        if end in due:  # from the window's end, each on its own (they overlap)
            _, fronts_in, reported = due[end]
            parts["  (fronts in)"].append(fronts_in - end)
            parts["  (agg min time)"].append(reported - end)
            parts["  (emit after it)"].append(times[0] - reported)
    print(f"{len(last)} windows timed (ms, each window's last result, from the window's end):")
    for name, values in parts.items():
        print(
            f"  {name:<12} p50 {pct(values, 0.5):7.1f}  p99 {pct(values, 0.99):7.1f}  "
            f"mean {statistics.fmean(values):7.1f}"
        )


def shuffle_frames(
    bootstrap: str, graph: Any, topics: Topics, seen: dict[tuple[str, int, int], int]
) -> dict[int, tuple[int, int]]:
    """Through a shuffle (the pairs' grouping): slot -> when the latest frame holding it
    was produced by the source stage, and when it was readable."""
    shuffled: dict[int, tuple[int, int]] = {}
    for node in (n.id for n in graph.nodes if n.kind.name in _KEYED):
        for msg in read_to_end(bootstrap, topics.shuffle(node)):
            at = seen.get((msg.topic(), msg.partition(), msg.offset()), 0)
            for meta, _, _ in read_items(msg.headers(), msg.value(), "shuffle"):
                made, got = shuffled.get(meta.gt.slot, (0, 0))
                shuffled[meta.gt.slot] = (max(made, msg.timestamp()[1]), max(got, at))
    return shuffled


def sink_outputs(
    bootstrap: str, sink: str, reader: Reader
) -> tuple[dict[int, int], dict[int, float]]:
    """Per slot, the latest output record's timestamp and when the reader had it (none
    when output values repeat, as the pairs do: which record was read when is unknown)."""
    outputs: dict[int, int] = {}
    received: dict[bytes, float] = {value: at for at, value in reader.got}
    timed_reads = len(received) == len(reader.got)
    read_at: dict[int, float] = {}
    for msg in read_to_end(bootstrap, sink):
        meta = dict(msg.headers() or []).get(META_HEADER)
        if meta is None:
            continue
        slot = decode_meta(meta).gt.slot
        outputs[slot] = max(outputs.get(slot, 0), msg.timestamp()[1])
        at = received.get(msg.value() or b"")
        if at is not None and timed_reads:
            read_at[slot] = max(read_at.get(slot, 0.0), at * 1000)
    return outputs, read_at


def report(
    bootstrap: str,
    *,
    app: str,
    graph: Any,
    source: str,
    sink: str,
    mins: MinTimes,
    reader: Reader,
    since_ms: int,
    delta_ms: int,
    seen: dict[tuple[str, int, int], int],
) -> None:
    sink_node = next(n.id for n in graph.nodes if n.kind.name == "SINK")
    segment = graph.segments().of_node[sink_node]
    inputs: dict[int, int] = {}  # slot -> earliest LogAppendTime
    for msg in read_to_end(bootstrap, source):
        stamp = msg.timestamp()[1]
        if stamp >= since_ms:
            slot = stamp // delta_ms
            inputs[slot] = min(stamp, inputs.get(slot, stamp))
    produced: dict[int, int] = {}  # slot -> latest frame CreateTime holding it
    readable: dict[int, int] = {}  # slot -> when the last frame holding it was readable
    topics = Topics(app)
    for msg in read_to_end(bootstrap, topics.pre(sink_node)):
        at = seen.get((msg.topic(), msg.partition(), msg.offset()), 0)
        for meta, _, _ in read_items(msg.headers(), msg.value(), "pre"):
            slot = meta.gt.slot
            produced[slot] = max(produced.get(slot, 0), msg.timestamp()[1])
            readable[slot] = max(readable.get(slot, 0), at)
    hops = Hops(bootstrap, topics, segment, seen)
    shuffled = shuffle_frames(bootstrap, graph, topics, seen)
    outputs, read_at = sink_outputs(bootstrap, sink, reader)
    passed = mins.passed(segment)
    parts: dict[str, list[float]] = defaultdict(list)
    for slot, first_in in sorted(inputs.items()):
        frame, out, got = produced.get(slot), outputs.get(slot), read_at.get(slot, 0.0)
        past = first_past(passed, slot)
        if frame is None or out is None or past is None:
            continue
        parts["stage"].append(frame - first_in)
        if slot in shuffled and shuffled[slot][1]:
            made, shuffled_in = shuffled[slot]
            parts["  source"].append(made - first_in)
            parts["  its commit"].append(shuffled_in - made)
            parts["  keyed stage"].append(frame - shuffled_in)
        parts["min time"].append(past - frame)
        visible, ready = readable.get(slot, 0), hops.ready(slot)
        if visible and ready is not None:
            acks_in, fronts_in, reported = ready
            parts["  commit"].append(visible - frame)
            parts["  fronts in"].append(fronts_in - visible)
            parts["  acker"].append(reported - max(acks_in, fronts_in))
            parts["  notify"].append(past - reported)
        parts["release"].append(out - past)
        parts["total to release"].append(out - first_in)
        if got:
            parts["read"].append(got - out)
            parts["total"].append(got - first_in)
    print(f"{len(parts['stage'])} slots of {len(inputs)} timed (ms, each slot's earliest record):")
    for name, values in parts.items():
        print(
            f"  {name:<12} p50 {pct(values, 0.5):7.1f}  p99 {pct(values, 0.99):7.1f}  "
            f"mean {statistics.fmean(values):7.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--execution", choices=("micro-batch", "continuous"), default="micro-batch")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument(
        "--task-logs",
        metavar="DIR",
        help="run at DEBUG (every commit of a continuous task timed) and copy the logs here",
    )
    ap.add_argument(
        "--pipeline",
        choices=("stateless", "windowed", "pairs"),
        default="stateless",
        help="windowed: the peer table's windowed count; a window's results are timed from "
        "their slot (the window's last), so `stage` is the aggregate's emission after it; "
        "pairs: the demo's word_pairs (a window-2 grouping), `stage` is both stages",
    )
    breakdown(ap.parse_args())


if __name__ == "__main__":
    main()
