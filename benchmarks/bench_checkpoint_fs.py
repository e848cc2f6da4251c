"""What Spark's checkpoint writes cost per micro-batch, by Hadoop local file system.

Spark writes an offset-log and a commit-log file for every micro-batch (`walCommit` and
`commitOffsets` in its progress reports). Without Hadoop's native library the default
`LocalFileSystem` forks a `chmod` per file and per checksum file; `RawLocalFileSystem`
sets no permissions (and broke every Spark stateful query in the session: it is not a
`LocalFileSystem`); flamepipe's `NioLocalFileSystem` is a `LocalFileSystem` that sets them
through java.nio. Each variant runs the same query in a Spark driver of its own (a rate
source, a no-op `foreachBatch`, 100 ms trigger, flamepipe's session settings otherwise)
one after the other, and the p50/p99 of both durations over its batches are printed.

Run: ``.venv/bin/python benchmarks/bench_checkpoint_fs.py [batches]``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

VARIANTS = {
    "LocalFileSystem (Hadoop's default)": "org.apache.hadoop.fs.LocalFileSystem",
    "RawLocalFileSystem": "org.apache.hadoop.fs.RawLocalFileSystem",
    "NioLocalFileSystem (flamepipe)": "io.flamepipe.hadoop.NioLocalFileSystem",
}

_DRIVER = """
import json, sys, tempfile, time
from framework.config import Settings
from framework.runners.spark.session import spark_session

impl, batches = sys.argv[1], int(sys.argv[2])
settings = Settings.load()
spark = spark_session(settings, "bench-checkpoint-fs", {"spark.hadoop.fs.file.impl": impl})
with tempfile.TemporaryDirectory() as checkpoint:
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 50).load()
        .writeStream.foreachBatch(lambda df, i: None)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds").start()
    )
    seen, out = set(), []
    while len(out) < batches:
        time.sleep(0.05)
        for p in query.recentProgress:
            if p["batchId"] not in seen and p["batchId"] > 2:  # past the warm-up
                seen.add(p["batchId"])
                d = p["durationMs"]
                out.append((d.get("walCommit", 0), d.get("commitOffsets", 0)))
    query.stop()
print(json.dumps(out))
"""


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print(f"{batches} micro-batches per variant; ms, p50 / p99")
    print(f"{'file system':<36} {'offset log':>14} {'commit log':>14}")
    for name, impl in VARIANTS.items():
        with tempfile.TemporaryDirectory() as state:
            proc = subprocess.run(
                [sys.executable, "-c", _DRIVER, impl, str(batches)],
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, "FLAMEPIPE_STATE_DIR": state},
            )
        if proc.returncode != 0:
            print(f"{name:<36} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        wal = [float(r[0]) for r in rows]
        commit = [float(r[1]) for r in rows]
        print(
            f"{name:<36} {_p(wal, 0.5):5.0f} / {_p(wal, 0.99):5.0f}  "
            f"{_p(commit, 0.5):5.0f} / {_p(commit, 0.99):5.0f}   "
            f"(mean {statistics.fmean(wal) + statistics.fmean(commit):.0f} per batch)"
        )


if __name__ == "__main__":
    main()
