"""End-to-end latency with snapshots every 100 ms vs every 5 s, side by side in one run.

Two copies of `word_pairs` (one word per line, as in the latency benchmark) run at
once on one Spark session, reading the same input topic: app
``fast`` snapshots every 100 ms, app ``slow`` every 5 s. Snapshots are taken from the
changelogs beside the processing (docs/decisions/snapshots-from-changelogs.md), so the
goal is that the interval hardly shows in the latency: p99 within 10%.

Run: ``.venv/bin/python benchmarks/bench_snapshot_interval.py [seconds] [records/s]
[micro-batch|continuous]`` (continuous: a task slot per long-running task of both).
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
import uuid

from bench_latency import Input, Receipts, collect, percentiles, read_outputs, wait_for

from framework.demos.wordcount import word_pairs
from framework.local.provision import provision
from framework.spark import SparkRunner, spark_session

INTERVALS_MS = {"fast": 100, "slow": 5_000}


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    rate = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    execution = sys.argv[3] if len(sys.argv) > 3 else "micro-batch"
    with provision() as stack:
        base = stack.with_(parallelism=2, execution=execution)
        bootstrap = base.kafka_bootstrap
        # Continuous: two sources' and two units' tasks per pipeline, and two spare slots.
        master = "local[10]" if execution == "continuous" else "local[2]"
        spark = spark_session(base, "bench-snapshots", {"spark.master": master})
        tag = uuid.uuid4().hex[:6]
        source = f"snapint{tag}-in"
        runs, receipts, sinks = [], {}, []
        for name, interval in INTERVALS_MS.items():
            app = f"snap{name}{tag}"
            graph = word_pairs(app, source, f"{app}-out").graph()
            settings = base.with_(snapshot_interval_ms=interval)
            runs.append(SparkRunner(settings, spark).start(graph))
            receipts[name] = Receipts()
            sinks.append(f"{app}-out")
        # One reader process for both sinks (bench_latency's): stamps that do not wait for
        # this process's interpreter lock, and both outputs read alike.
        mp = multiprocessing.get_context("spawn")
        stop, batches = mp.Event(), mp.Queue()
        reader = mp.Process(
            target=read_outputs, args=(bootstrap, tuple(sinks), batches, stop), daemon=True
        )
        reader.start()
        collector = threading.Thread(target=collect, args=(batches, list(receipts.values())))
        collector.start()
        source_input = Input(bootstrap, source)
        try:
            source_input.at_rate(rate, 5.0)  # warm-up
            ids = source_input.at_rate(rate, seconds)
            if not wait_for(ids, list(receipts.values()), 300):
                for run in runs:
                    run.check()
                    print(f"  incomplete: {run.progress()}")
            print(f"latency at {rate} records/s, {seconds:.0f} s measured (2 cores, {execution})")
            p99s = {}
            for name, r in receipts.items():
                lat = [r.seen[i] - source_input.appended[i] for i in ids if i in r.seen] or [-1]
                p50, p99s[name] = percentiles(lat)
                coordinator = runs[list(INTERVALS_MS).index(name)].services.coordinator
                snaps = coordinator.stats.snapshots if coordinator is not None else 0
                print(
                    f"  snapshots every {INTERVALS_MS[name]:>5} ms: n={len(lat)} "
                    f"p50={p50:6.0f} ms p99={p99s[name]:6.0f} ms snapshots={snaps}"
                )
            print(f"  p99 ratio 100 ms / 5 s = {p99s['fast'] / p99s['slow']:.2f} (goal <= 1.10)")
        finally:
            stop.set()
            reader.join()
            collector.join()
            for run in runs:
                run.stop()
            spark.stop()


if __name__ == "__main__":
    main()
