"""Scale on this machine: local[2] against a standalone cluster of 1 and 2 workers, one run.

Runs `bench_spark_wordcount.py` (warm, with ``--cpu``) for the windowed word count and for
word pairs (the FlameStream grouping) on each Spark setup, one after the other in this
invocation, and prints a table: words/s, CPU seconds per million words (every process of
the stack: broker, ZooKeeper, Spark driver, master, workers, executor JVMs, Python
workers), and each throughput as a ratio of local[2] in the same run.

Run: ``.venv/bin/python benchmarks/bench_cluster_scale.py [windowed-lines] [pairs-lines]``
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETUPS = (("local[2]", []), ("standalone, 1 worker", ["--workers", "1"]))
SETUPS += (("standalone, 2 workers", ["--workers", "2"]),)


def _one(lines: int, extra: list[str]) -> tuple[float, float]:
    """``(words/s, total CPU-s)`` of one benchmark run."""
    cmd = [sys.executable, str(HERE / "bench_spark_wordcount.py"), str(lines), "10", "--warm"]
    out = subprocess.run(
        [*cmd, "--cpu", *extra], capture_output=True, text=True, check=True, cwd=HERE.parent
    ).stdout
    rate = re.search(r"([\d,]+) words/s", out)
    cpu = re.search(r"total\s+([\d.]+) CPU-s", out)
    if rate is None or cpu is None:
        raise SystemExit(f"unexpected benchmark output:\n{out}")
    return float(rate.group(1).replace(",", "")), float(cpu.group(1))


def main() -> None:
    windowed_lines = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    pairs_lines = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    rows = []
    for pipeline, lines, flags in (
        ("windowed count", windowed_lines, ["--windowed"]),
        ("word pairs (grouping)", pairs_lines, []),
    ):
        base = None
        for setup, extra in SETUPS:
            rate, cpu = _one(lines, [*flags, *extra])
            base = base or rate
            per_million = cpu / (lines * 10) * 1e6
            rows.append((pipeline, setup, rate, per_million, rate / base))
            print(f"  {pipeline:<22} {setup:<22} {rate:>10,.0f} words/s", flush=True)
    print("\n| pipeline | Spark | words/s | CPU-s per 1M words | vs local[2] |")
    print("|---|---|---|---|---|")
    for pipeline, setup, rate, per_million, ratio in rows:
        print(f"| {pipeline} | {setup} | {rate:,.0f} | {per_million:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
