"""flamepipe's side of the peer table (`../shared/peers`), without the peers.

The same method as the peer benchmark's flamepipe system, in one process, with what the
table does not show: every stage's micro-batch durations and the CPU of every process.

1. **Throughput**: ``--lines`` lines of 8 Zipf(1) words (vocabulary 10 000) are written at
   10 000 lines/s over a 2-partition LogAppendTime topic (a backlog spanning ~20 windows),
   then the clock starts, the Spark session starts, and the windowed count runs
   (`framework.demos.wordcount.windowed_counts`: ``flat_map((w, 1))``, ``key_by``,
   ``aggregate(Tumbling(1000), combinable=True)``, ``["word", start_ms, count]`` to a
   Kafka sink) until a read_committed reader has seen
   the oracle's count for every (word, window), the oracle computed from the records as
   Kafka stored them (LogAppendTime // 1000). Words/s from launch and from the pipeline's
   start (session up).
2. **Window latency**: ``--rate`` lines/s for 5 s warm-up + ``--seconds`` + 5 s tail; per
   output of a window inside the measured span, receipt - window end. Checked too.
3. **Running count** (``running``; ``running-pane``): the same backlog through
   `framework.demos.wordcount.rolling_counts`, the rolling per-word count: an update per
   word occurrence (``fold``); or per word and 1 s pane (``reduce(every_ms=1000,
   combinable=True)``), until the reader has every update; checked: each word's updates
   are its counts in order, the last one its total. Words/s from launch, against the
   windowed count's.
4. **Stateless latency**: a second pipeline, ``"<id> words"`` -> upper case, at ``--rate``
   lines/s; receipt - LogAppendTime of its line; every line checked, exactly once.

``--timeline`` prints, every second of the throughput phase, how far each stage, the
barriers and min time got and what the reader has (where a backlog's wall time goes).

Run: ``.venv/bin/python benchmarks/bench_peer_table.py [--lines 200000] [--rate 1000]
[--seconds 30] [--runs 1] [--phases throughput,window,running,running-pane,stateless]
[--warm-lines 20000] [--timeline]``
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import math
import random
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

from connectors import KafkaSink, KafkaSource
from framework import Pipeline
from framework.config import Settings
from framework.demos.wordcount import (
    rolling_counts,
    windowed_counts,
    windowed_counts_on_columns,
)
from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec
from framework.kafka.clients import read_to_end
from framework.local.provision import provision
from framework.spark import SparkRunner, spark_session

# A sibling module, not shipped to Spark's workers (which import this one by name when it
# is not __main__): the workers never need it.
with contextlib.suppress(ImportError):
    from cpu import cpu_seconds, print_cpu

WINDOW_MS = 1000
_SYLLABLES = ("ka", "fla", "me", "pi", "pe", "stre", "am", "bar", "ri", "er", "to", "nu")


class Text:
    """Lines of 8 words from a Zipf(1) vocabulary of 10 000 (the peer benchmark's text)."""

    def __init__(self, vocabulary: int = 10_000, per_line: int = 8, seed: int = 7) -> None:
        rng = random.Random(seed)
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
        self.vocab = sorted(words)
        rng.shuffle(self.vocab)
        self.cum = list(itertools.accumulate(1 / (r + 1) for r in range(vocabulary)))
        self.per_line = per_line

    def lines(self, count: int, seed: int) -> list[str]:
        words = random.Random(seed).choices(self.vocab, cum_weights=self.cum, k=count * 8)
        return [" ".join(words[i * 8 : (i + 1) * 8]) for i in range(count)]


# The stateless pipeline's function (module level: Spark's workers import it by name).
def upper(line: str) -> str:
    return line.upper()


def stateless(app: str, source: str, sink: str) -> Pipeline:
    p = Pipeline(app)
    p.source(KafkaSource(source, partitions=2)).map(upper).sink(KafkaSink(sink))
    return p


class Reader:
    """A read_committed reader of the output topic, stamping each record on receipt."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.got: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 5,
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, 0)])
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(1000, 0.005):
                if msg.error() is None:
                    self.got.append((time.time(), msg.value() or b""))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


def produce(bootstrap: str, topic: str, lines: list[str], rate: float) -> dict[int, int]:
    """Write ``lines`` over 2 partitions at ``rate`` lines/s; index -> LogAppendTime."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stamps: dict[int, int] = {}

    def delivered(index: int, error: Any, msg: Any) -> None:
        kind, stamp = msg.timestamp()
        if error is None and kind == TIMESTAMP_LOG_APPEND_TIME:  # ms
            stamps[index] = stamp

    started = time.monotonic()
    step = max(1, int(rate / 50))  # 20 ms pacing steps
    for i, line in enumerate(lines):
        if i % step == 0:
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
        while True:
            try:
                producer.produce(
                    topic,
                    line.encode(),
                    partition=i % 2,
                    on_delivery=functools.partial(delivered, i),
                )
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return stamps


def window_oracle(bootstrap: str, topic: str) -> Counter[tuple[str, int]]:
    out: Counter[tuple[str, int]] = Counter()
    for msg in read_to_end(bootstrap, topic):
        start = msg.timestamp()[1] // WINDOW_MS * WINDOW_MS
        for word in (msg.value() or b"").decode().split():
            out[(word, start)] += 1
    return out


def wait(done: Callable[[], bool], run: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run.check()
        if done():
            return True
        time.sleep(0.05)
    return False


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def stage_report(run: Any, skip: dict[str, int]) -> None:
    for stage, query in run.queries.items():
        if query.query is None:  # continuous: what its tasks committed
            query.recount()
            st = query.stats
            per = st.records_in / st.batches if st.batches else 0
            print(
                f"    stage {stage}: {st.batches} commits, {per:.0f} records each; items "
                f"in {st.items_in} out {st.items_out}"
            )
            continue
        progress = [
            p
            for p in getattr(query.query, "recentProgress", [])[skip.get(stage, 0) :]
            if p["numInputRows"]
        ]
        if not progress:
            continue
        parts = ("addBatch", "triggerExecution")
        shown = "  ".join(
            f"{k} {statistics.median(p['durationMs'].get(k, 0) for p in progress):.0f}"
            for k in parts
        )
        rows = statistics.median(p["numInputRows"] for p in progress)
        print(f"    stage {stage}: {len(progress)} batches with data, p50 rows {rows:.0f}; {shown}")


def system_cpu(by_role: dict[str, float]) -> float:
    """CPU seconds of the pipeline's processes: everything but the broker and ZooKeeper."""
    return sum(v for role, v in by_role.items() if role not in ("kafka broker", "zookeeper"))


def marks(run: Any) -> dict[str, int]:
    return {stage: len(getattr(q.query, "recentProgress", [])) for stage, q in run.queries.items()}


class Windows:
    """The window counts the reader has received so far, and when each first arrived."""

    def __init__(self, reader: Reader, since: int = 0) -> None:
        self.reader = reader
        self.taken = since
        self.counts: dict[tuple[str, int], int] = {}
        self.first_at: dict[tuple[str, int], float] = {}

    def take(self) -> None:
        new = self.reader.got[self.taken :]  # the reader appends meanwhile: count what was taken
        self.taken += len(new)
        for at, value in new:
            word, start, count = json.loads(value)
            self.first_at.setdefault((word, start), at)
            self.counts[(word, start)] = count

    def wrong(self, oracle: dict[tuple[str, int], int]) -> list[tuple[Any, int, int | None]]:
        return [(k, c, self.counts.get(k)) for k, c in oracle.items() if self.counts.get(k) != c]


def throughput_and_window(settings: Settings, text: Text, args: Any) -> dict[str, Any]:
    tag = f"pt{uuid.uuid4().hex[:6]}"
    source, sink = f"{tag}-in", f"{tag}-out"
    bootstrap = settings.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    produce(bootstrap, source, text.lines(args.lines, seed=11), 10_000)
    oracle = dict(window_oracle(bootstrap, source))
    reader = Reader(bootstrap, sink)
    cpu0 = cpu_seconds()
    launched = time.monotonic()
    spark = spark_session(settings, f"bench-{tag}", {"spark.master": settings.spark_master})
    build = windowed_counts_on_columns if args.pipeline == "columns" else windowed_counts
    pipeline = build(tag, source, sink, window_ms=WINDOW_MS)
    run = SparkRunner(settings, spark).start(pipeline.graph())
    ready = time.monotonic()
    try:
        windows = Windows(reader)

        shown = [0.0]

        def complete() -> bool:
            windows.take()
            now = time.monotonic()
            if args.timeline and now - shown[0] >= 1.0:
                shown[0] = now
                print(
                    f"    {now - launched:5.1f} s: read {len(windows.counts)} of {len(oracle)}; "
                    f"{run.progress()}",
                    flush=True,
                )
            return len(windows.counts) >= len(oracle) and not windows.wrong(oracle)

        ok = wait(complete, run, args.timeout)
        done = time.monotonic()
        cpu1 = cpu_seconds()
        bad = windows.wrong(oracle)
        words = args.lines * 8
        cpu_per_m = (system_cpu(cpu1) - system_cpu(cpu0)) / (words / 1e6)
        print(
            f"  throughput: {'ok' if ok else 'INCOMPLETE'} {words / (done - launched):,.0f} "
            f"words/s from launch, {words / (done - ready):,.0f} after ready "
            f"({ready - launched:.1f} s); wrong or missing {len(bad)} {bad[:3]}; "
            f"CPU per 1M words {cpu_per_m:.1f} s (without the broker)"
        )
        print_cpu(cpu0, cpu1, done - launched)
        stage_report(run, {})
        result = {
            "throughput": {
                "ok": ok,
                "words_per_s": words / (done - launched),
                "words_per_s_after_ready": words / (done - ready),
                "cpu_s_per_1m_words": cpu_per_m,
            }
        }
        if "window" in args.phases:
            result["window"] = window_latency(run, reader, source, text, args)
        return result
    finally:
        reader.close()
        run.stop()
        spark.stop()


def window_latency(run: Any, reader: Reader, source: str, text: Text, args: Any) -> Any:
    """Step 2 on the running pipeline: windows at a steady rate."""
    bootstrap = run.bootstrap
    skip = marks(run)
    windows = Windows(reader, len(reader.got))
    t0 = time.time()
    cpu0 = cpu_seconds()
    produce(bootstrap, source, text.lines(int(args.rate * (args.seconds + 10)), seed=23), args.rate)
    lo = math.ceil((t0 + 5) * 1000 / WINDOW_MS) * WINDOW_MS
    hi = math.floor((t0 + 5 + args.seconds) * 1000 / WINDOW_MS) * WINDOW_MS
    oracle = {
        k: c
        for k, c in window_oracle(bootstrap, source).items()
        if lo <= k[1] and k[1] + WINDOW_MS <= hi
    }

    def arrived() -> bool:
        windows.take()
        return all(k in windows.counts for k in oracle)

    ok = wait(arrived, run, 120)
    cpu1 = cpu_seconds()
    lat = [windows.first_at[k] - (k[1] + WINDOW_MS) / 1000 for k in oracle if k in windows.first_at]
    bad = windows.wrong(oracle)
    print(
        f"  window latency at {args.rate} lines/s: p50 {pct(lat, 0.5):.3f} s, p99 "
        f"{pct(lat, 0.99):.3f} s over {len(lat)} windows; wrong or missing {len(bad)}"
    )
    print_cpu(cpu0, cpu1, time.time() - t0)
    stage_report(run, skip)
    return {"ok": ok and not bad, "p50_s": pct(lat, 0.5), "p99_s": pct(lat, 0.99)}


def running_count(settings: Settings, text: Text, args: Any, every_ms: int | None) -> Any:
    """Step 3: the running count over the backlog, until every update is read."""
    tag = f"pr{uuid.uuid4().hex[:6]}"
    source, sink = f"{tag}-in", f"{tag}-out"
    bootstrap = settings.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    produce(bootstrap, source, text.lines(args.lines, seed=11), 10_000)
    panes = window_oracle(bootstrap, source)  # per word and 1 s pane: its occurrences
    expected: dict[str, list[int]] = {}
    totals: Counter[str] = Counter()
    for (word, _), n in sorted(panes.items(), key=lambda item: item[0][1]):
        if every_ms is None:
            expected.setdefault(word, []).extend(range(totals[word] + 1, totals[word] + n + 1))
        else:
            expected.setdefault(word, []).append(totals[word] + n)
        totals[word] += n
    updates = sum(len(v) for v in expected.values())
    reader = Reader(bootstrap, sink)
    cpu0 = cpu_seconds()
    launched = time.monotonic()
    spark = spark_session(settings, f"bench-{tag}", {"spark.master": settings.spark_master})
    run = SparkRunner(settings, spark).start(
        rolling_counts(tag, source, sink, every_ms=every_ms).graph()
    )
    ready = time.monotonic()
    try:
        ok = wait(lambda: len(reader.got) >= updates, run, args.timeout)
        done = time.monotonic()
        cpu1 = cpu_seconds()
        time.sleep(1)  # an update beyond the expected ones would show by now
        got: dict[str, list[int]] = {}
        for _, value in reader.got:
            word, n = json.loads(value)
            got.setdefault(word, []).append(n)
        ok = ok and got == expected
        words = args.lines * 8
        cpu_per_m = (system_cpu(cpu1) - system_cpu(cpu0)) / (words / 1e6)
        mode = "per word" if every_ms is None else f"per word and {every_ms} ms pane"
        print(
            f"  running count ({mode}): {'ok' if ok else 'WRONG OR INCOMPLETE'} "
            f"{words / (done - launched):,.0f} words/s from launch, "
            f"{words / (done - ready):,.0f} after ready; {len(reader.got):,} updates of "
            f"{updates:,}; CPU per 1M words {cpu_per_m:.1f} s (without the broker)"
        )
        print_cpu(cpu0, cpu1, done - launched)
        stage_report(run, {})
        return {"ok": ok, "words_per_s": words / (done - launched), "cpu_s_per_1m_words": cpu_per_m}
    finally:
        reader.close()
        run.stop()
        spark.stop()


def stateless_latency(settings: Settings, text: Text, args: Any) -> dict[str, Any]:
    tag = f"ps{uuid.uuid4().hex[:6]}"
    source, sink = f"{tag}-in", f"{tag}-out"
    bootstrap = settings.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    reader = Reader(bootstrap, sink)
    spark = spark_session(settings, f"bench-{tag}", {"spark.master": settings.spark_master})
    run = SparkRunner(settings, spark).start(stateless(tag, source, sink).graph())
    try:
        produce(bootstrap, source, ["0 warm up"], 10)
        wait(lambda: bool(reader.got), run, 120)
        skip = marks(run)
        total_s = 5 + args.seconds + 5
        lines = [
            f"{i} {line}" for i, line in enumerate(text.lines(int(args.rate * total_s), seed=31), 1)
        ]
        cpu0 = cpu_seconds()
        t0 = time.monotonic()
        stamps = produce(bootstrap, source, lines, args.rate)
        wanted = {str(i).encode() for i in range(1, len(lines) + 1)}
        wait(lambda: len(reader.got) >= len(lines) + 1, run, 120)
        time.sleep(1)
        cpu1 = cpu_seconds()
        received: Counter[int] = Counter()
        lat: list[float] = []
        first = int(5 * args.rate)
        last = int((5 + args.seconds) * args.rate)
        for at, value in reader.got:
            ident = value.split(b" ", 1)[0].strip(b'"')
            if ident not in wanted:
                continue
            index = int(ident)
            received[index] += 1
            if first <= index <= last and index - 1 in stamps:
                lat.append(at - stamps[index - 1] / 1000)
        ok = all(received[i] == 1 for i in range(1, len(lines) + 1))
        print(
            f"  stateless latency at {args.rate} lines/s: p50 {pct(lat, 0.5):.3f} s, p99 "
            f"{pct(lat, 0.99):.3f} s over {len(lat)} lines; exactly once: {ok}"
        )
        print_cpu(cpu0, cpu1, time.monotonic() - t0)
        stage_report(run, skip)
        return {"stateless": {"ok": ok, "p50_s": pct(lat, 0.5), "p99_s": pct(lat, 0.99)}}
    finally:
        reader.close()
        run.stop()
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300, help="give up after this long")
    ap.add_argument("--phases", default="throughput,window,running,running-pane,stateless")
    ap.add_argument(
        "--warm-lines",
        type=int,
        default=0,
        help="first a windowed backlog of this many lines, not measured: the phases then "
        "compare on a warm JVM (the first Spark session pays its start and JIT)",
    )
    ap.add_argument(
        "--pipeline",
        choices=("items", "columns"),
        default="items",
        help="the windowed count with per-item operators (the peers' shape) or with batch "
        "operators and the built-in Sum (`windowed_counts_on_columns`)",
    )
    ap.add_argument(
        "--fuse", action="store_true", help="fuse_stages: source and keyed stage in one query"
    )
    ap.add_argument(
        "--columnar",
        choices=("on", "off"),
        default=None,
        help="columnar source stages on or off (default: the setting's default)",
    )
    ap.add_argument(
        "--execution",
        choices=("micro-batch", "continuous"),
        default="continuous",
        help="how stages run (default: the settings' default)",
    )
    ap.add_argument(
        "--continuous-tasks",
        choices=("per-stage", "shared"),
        default="shared",
        help="continuous stages' tasks: shared (local[2], as in the peer harness) or per "
        "stage (local[4])",
    )
    ap.add_argument(
        "--timeline",
        action="store_true",
        help="throughput: print the run's progress (items through each stage, bundles, min "
        "time) and the reader's count every second, from launch",
    )
    args = ap.parse_args()
    text = Text()
    slots = 4 if args.execution == "continuous" and args.continuous_tasks == "per-stage" else 2
    results = []
    with provision() as stack:
        settings = stack.with_(
            parallelism=2,
            spark_master=f"local[{slots}]",
            continuous_tasks=args.continuous_tasks,
            fuse_stages=args.fuse,
            execution=args.execution,
        )
        if args.columnar is not None:
            settings = settings.with_(columnar=args.columnar == "on")
        if args.warm_lines:
            print(f"warm-up, not measured ({args.warm_lines} lines):", flush=True)
            warm = {**vars(args), "lines": args.warm_lines, "phases": "throughput"}
            throughput_and_window(settings, text, argparse.Namespace(**warm))
        for n in range(args.runs):
            print(f"run {n + 1} of {args.runs}", flush=True)
            result: dict[str, Any] = {}
            if "throughput" in args.phases:
                result.update(throughput_and_window(settings, text, args))
            for phase, every_ms in (("running", None), ("running-pane", WINDOW_MS)):
                if phase in args.phases.split(","):
                    result[phase] = running_count(settings, text, args, every_ms)
            if "stateless" in args.phases:
                result.update(stateless_latency(settings, text, args))
            results.append(result)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
