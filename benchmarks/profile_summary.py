"""Where the Python CPU went: a summary of a py-spy ``raw`` profile of a benchmark.

Record every Python process of a run (the driver, the Spark Python workers forked under
the JVM, service processes), then summarise by process role and by the module of the
innermost frame (self time), and list the hottest functions:

    .venv/bin/py-spy record --subprocesses --format raw -o /tmp/run.txt -- \\
        .venv/bin/python benchmarks/bench_peer_table.py --phases throughput
    .venv/bin/python benchmarks/profile_summary.py /tmp/run.txt [--top 25]

The JVMs (the Spark driver with its executors' threads, the broker) are sampled by Java
Flight Recorder; ``--jfr`` summarises a recording by thread kind and innermost frame:

    FLAMEPIPE_JVM_FLAGS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
        -XX:StartFlightRecording=filename=/tmp/jfr/,settings=profile" <benchmark>
    .venv/bin/python benchmarks/profile_summary.py --jfr /tmp/jfr/<recording>.jfr

Samples are wall-clock samples of threads that were running (py-spy leaves idle threads
out), so a share is a share of Python CPU, not of the machine's.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter

_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_PROCESS = re.compile(r'^process \d+:"(?P<cmd>.*)"$')

_ROLES = (
    ("framework.runners.spark.daemon", "spark python worker"),
    ("pyspark.daemon", "spark python worker"),
    ("pyspark/daemon", "spark python worker"),
    ("pyspark/worker", "spark python worker"),
    ("framework.cli", "service process"),
)

_AREAS = (
    ("framework/demos", "user functions (demo)"),
    ("framework/core", "flamepipe core (operators, windows)"),
    ("framework/plan", "flamepipe stage tasks"),
    ("framework/wire", "flamepipe byte formats"),
    ("framework/kafka", "flamepipe kafka layer"),
    ("framework/barrier", "flamepipe barrier"),
    ("framework/acker", "flamepipe acker"),
    ("framework/runners", "flamepipe spark runner"),
    ("framework/", "flamepipe (other)"),
    ("confluent_kafka", "confluent-kafka client"),
    ("pyarrow", "pyarrow"),
    ("pyspark", "pyspark worker / py4j"),
    ("py4j", "pyspark worker / py4j"),
    ("fastavro", "fastavro"),
    ("json", "json"),
    ("hmac", "hmac / hashlib"),
    ("hashlib", "hmac / hashlib"),
    ("pickle", "pickle"),
    ("threading", "threads waiting / locks"),
    ("queue", "threads waiting / locks"),
    ("selectors", "sockets / select"),
    ("socket", "sockets / select"),
)


def _area(file: str) -> str:
    return next((area for needle, area in _AREAS if needle in file), f"other: {file[-40:]}")


def _role(cmd: str) -> str:
    return next((role for needle, role in _ROLES if needle in cmd), f"driver: {cmd[:50]}")


def summarise(path: str) -> tuple[Counter[str], Counter[str], Counter[str], int]:
    """Samples by process role, by area of the innermost frame, by innermost function."""
    roles: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = stack.split(";")
            # Nested processes (the driver > the JVM > its Python workers) each add a
            # frame: the innermost one is the process the stack belongs to.
            cmds = [m["cmd"] for m in map(_PROCESS.match, frames) if m]
            role = _role(cmds[-1]) if cmds else "unknown process"
            if _PROCESS.match(frames[-1]):
                continue  # a process frame alone: no Python stack sampled
            leaf = _FRAME.match(frames[-1])
            file = leaf["file"] if leaf else frames[-1]
            fn = leaf["fn"] if leaf else frames[-1]
            roles[role] += count
            areas[f"{role} | {_area(file)}"] += count
            functions[f"{fn} ({file.rsplit('site-packages/', 1)[-1]})"] += count
            total += count
    return roles, areas, functions, total


_THREAD_KINDS = (
    ("Executor task launch", "spark task threads (executor)"),
    ("stdout writer", "spark -> python writer threads"),
    ("stream execution", "spark streaming query threads"),
    ("dag-scheduler", "spark scheduler"),
    ("dispatcher-event-loop", "spark rpc / scheduler"),
    ("kafka-producer", "kafka clients in the jvm"),
    ("data-plane", "kafka broker request threads"),
    ("GC", "gc"),
)


def summarise_jfr(path: str) -> tuple[Counter[str], Counter[str], int]:
    """JFR execution samples by thread kind and by innermost Java method."""
    text = subprocess.run(
        ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "1", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kinds: Counter[str] = Counter()
    methods: Counter[str] = Counter()
    thread, in_stack = "", False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("sampledThread"):
            thread = line.split('"')[1] if '"' in line else line
        elif line.startswith("stackTrace = ["):
            in_stack = True
        elif in_stack:
            in_stack = False
            kind = next((k for needle, k in _THREAD_KINDS if needle in thread), thread[:40])
            kinds[kind] += 1
            methods[line.split("(")[0]] += 1
    return kinds, methods, sum(kinds.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="py-spy record --format raw output")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--jfr", action="store_true", help="the file is a JFR recording")
    args = ap.parse_args()
    if args.jfr:
        kinds, methods, samples = summarise_jfr(args.profile)
        for title, counter in (("thread kind", kinds), ("innermost method", methods)):
            print(f"\n{title}: share of {samples} samples")
            for name, n in counter.most_common(args.top):
                print(f"  {n / max(samples, 1):6.1%}  {name}")
        return
    roles, areas, functions, total = summarise(args.profile)
    if not total:
        raise SystemExit(f"{args.profile}: no samples")
    for title, counter in (("process", roles), ("process | area (self)", areas)):
        print(f"\n{title}: share of {total} samples")
        for name, n in counter.most_common(args.top):
            print(f"  {n / total:6.1%}  {name}")
    print("\nhottest functions (self)")
    for name, n in functions.most_common(args.top):
        print(f"  {n / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
