"""`connectors.DatabaseSink` and `connectors.FileSink` against the real stack: a SQLite
table, a PostgreSQL table (a server of the test's own), bucketed files in a local directory
and in HDFS (a MiniDFSCluster of the test's own, through WebHDFS) fed from an exactly-once
output topic, each sink's process killed with kill -9 mid-run, hold the output exactly.

Word pairs run on Spark into a 2-partition sink while the four sinks, processes of their
own, apply the bundles. Each is killed by failpoints at the points of its commit (the
database: between a bundle's rows and its commit; the files: before the state that
commits pending files, and between that state and the renames) and once with SIGKILL from
outside, after HDFS itself was killed with SIGKILL and restarted under the HDFS sink
(which must try its calls again and commit again, not stop). The tables' rows are
inserted (no key), so a bundle applied twice would leave duplicate rows and a skipped one
missing rows: a table must hold exactly the read_committed output, which equals the
oracle; the committed files must hold exactly the output items of every bucket that a
later bundle closed, and nothing partial may be visible.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from connectors import BundleConsumer, FileSink, KafkaSink
from connectors._stores import Store, open_store
from connectors.bundles import OutputItem, VerifiedBundle
from framework.config import Settings
from framework.core.messages import BundleHeader
from framework.core.meta import Meta
from framework.core.time import DEFAULT_DELTA_MS, GlobalTime
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.errors import SinkError
from framework.failpoints import ENV
from framework.local.provision import free_port
from integration_tests.harness.hdfs import LocalHdfs
from integration_tests.harness.postgres import LocalPostgres
from integration_tests.harness.runs import produce_lines, read_output, running
from integration_tests.harness.sink_main import BUCKET_MS

ROOT = Path(__file__).resolve().parents[1]


def _sink(
    kind: str, bootstrap: str, topic: str, path: Path, idle_s: float, *, fail: str = ""
) -> Any:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(ENV, None)
    if fail:
        env[ENV] = fail
    args = [sys.executable, "-m", "integration_tests.harness.sink_main", kind]
    return subprocess.Popen(
        [*args, bootstrap, topic, str(path), str(idle_s)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _table_rows(where: Path | str, query: str = "SELECT pair FROM pairs") -> Counter[Any]:
    """The rows of a SQLite file (a path) or a PostgreSQL database (a DSN)."""
    if isinstance(where, str):
        import psycopg

        with psycopg.connect(where) as conn:
            try:
                return Counter(r[0] for r in conn.execute(query))
            except psycopg.errors.UndefinedTable:  # not created yet
                return Counter()
    if not where.exists():
        return Counter()
    with sqlite3.connect(where) as conn:
        try:
            return Counter(r[0] for r in conn.execute(query))
        except sqlite3.OperationalError:  # not created yet
            return Counter()


def _file_rows(store: Store) -> tuple[Counter[str], int]:
    """The committed rows, each in the directory of its word's first letter, and the number
    of buckets; nothing but committed files, the state and empty work directories."""
    rows: Counter[str] = Counter()
    top = store.names("")
    assert set(top) - {"_state.json", "_pending", "_in_progress"} == {
        name for name in top if name.startswith("bucket=")
    }, top
    assert store.names("_pending") == [], f"{store.where}: pending files left"
    for bucket in (name for name in top if name.startswith("bucket=")):
        for key in store.names(bucket):
            letter = urllib.parse.unquote(key.removeprefix("key="))
            for name in store.names(f"{bucket}/{key}"):
                assert name.startswith("part-") and name.endswith(".jsonl"), name
                data = store.read(f"{bucket}/{key}/{name}")
                assert data is not None
                pairs = [json.loads(line)["pair"] for line in data.decode().splitlines()]
                assert all(json.loads(pair)[0][0] == letter for pair in pairs), name
                rows.update(pairs)
    return rows, sum(name.startswith("bucket=") for name in top)


def _buckets(root: str) -> int:
    return sum(name.startswith("bucket=") for name in open_store(root).names(""))


def _wait(ready: Any, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _killed(proc: Any) -> str:
    out, _ = proc.communicate(timeout=120)
    text: str = out.decode(errors="replace")[-2000:]
    assert proc.returncode == -signal.SIGKILL, text
    return text


def _kill_running(proc: Any) -> None:
    """SIGKILL ``proc``, which must still be running."""
    if proc.poll() is not None:
        out, _ = proc.communicate()
        raise AssertionError(f"the sink ended by itself: {out.decode(errors='replace')[-3000:]}")
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL


def _closed_items(bootstrap: str, topic: str) -> Counter[str]:
    """The output items whose 1 s bucket a later bundle of their partition closed."""
    items: list[tuple[int, int, str]] = []
    last: dict[int, int] = {}
    with BundleConsumer(bootstrap, topic, f"verify-{uuid.uuid4().hex}") as consumer:
        for bundle in consumer.bundles(to_end=True):
            last[bundle.partition] = bundle.header.gt_last.slot * DEFAULT_DELTA_MS
            items += [
                (bundle.partition, i.meta.gt.slot * DEFAULT_DELTA_MS, pair_key(i.value))
                for i in bundle.items
            ]
    return Counter(key for p, ms, key in items if ms - ms % BUCKET_MS + BUCKET_MS <= last[p])


@pytest.fixture(scope="module")
def hdfs(stack: Settings) -> Any:
    with LocalHdfs(stack) as cluster:
        yield cluster


def test_database_and_file_sinks_killed_mid_run_hold_the_output_exactly_once(
    stack: Settings, spark: Any, tmp_path: Path, hdfs: LocalHdfs
) -> None:
    with LocalPostgres() as postgres:
        _run_sinks(stack, spark, tmp_path, postgres.dsn, hdfs)


def test_webhdfs_refusals_name_the_fix(hdfs: LocalHdfs) -> None:
    """A user HDFS denies, and a NameNode that does not answer, fail with the fix; a
    replace is atomic over an existing file; a missing file reads as absent."""
    root = hdfs.uri(f"/refusals-{uuid.uuid4().hex}")
    store = open_store(root)
    store.write_atomic("_state.json", b"old")
    store.write_atomic("_state.json", b"new")
    assert store.read("_state.json") == b"new" and store.read("nothing") is None
    assert store.names("") == ["_state.json"]  # the temporary name is gone
    with pytest.raises(SinkError, match=r"HDFS refused .*user=mallory.*hdfs_user=") as refused:
        open_store(root, user="mallory").write_atomic("x", b"1")
    assert "\tat org.apache" not in str(refused.value)  # one line, not the server's stack
    dead = f"webhdfs://127.0.0.1:{free_port()}/x"  # nothing listens there
    with pytest.raises(SinkError, match=r"WebHDFS unreachable .*HTTP address.* 1 s of tries"):
        open_store(dead, retry_s=1).names("")


def test_parquet_files_reach_hdfs_whole_and_only_when_committed(hdfs: LocalHdfs) -> None:
    """Parquet through the same commit: nothing visible while a bucket is open, then one
    readable file and no pending one."""
    import io

    import pyarrow.parquet as pq

    root = hdfs.uri(f"/parquet-{uuid.uuid4().hex}")
    sink = FileSink("unused:1", "out", root, bucket_ms=100, delta_ms=10, format="parquet",
                    row=lambda v: {"word": v, "n": len(v)})  # fmt: skip
    store = open_store(root)
    sink._recover()
    sink._apply(_bundle(0, [(1, "ab"), (2, "c")], last=5))
    assert [n for n in store.names("") if n.startswith("bucket=")] == []
    sink._apply(_bundle(1, [(12, "d")], last=12))
    data = store.read("bucket=0/part-0.parquet")
    assert data is not None
    assert pq.read_table(io.BytesIO(data)).to_pylist() == [
        {"n": 2, "word": "ab"}, {"n": 1, "word": "c"},
    ]  # fmt: skip
    assert store.names("_pending") == [] and sink.stats.committed == 1


def _bundle(seq: int, items: list[tuple[int, str]], last: int) -> VerifiedBundle:
    """Bundle ``seq`` of partition 0: items (slot, value), GT_last at slot ``last``."""
    out = tuple(
        OutputItem(value, Meta(GlobalTime(slot, 1, i)), None, 0, 10 * seq + i)
        for i, (slot, value) in enumerate(items)
    )
    header = BundleHeader(seq, GlobalTime(last, 1, 99), len(out))
    return VerifiedBundle(0, header, out, seq, out[-1].offset + 1)


def _run_sinks(stack: Settings, spark: Any, tmp_path: Path, dsn: str, hdfs: LocalHdfs) -> None:
    run = _SinkRun(stack.with_(parallelism=2), tmp_path, dsn, hdfs)
    try:
        run.killed(spark)
        finals = [run.start(kind, path, 6) for kind, path in run.targets]
        for proc in finals:
            out, _ = proc.communicate(timeout=180)
            assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    finally:
        run.stop_all()
    run.check()


class _SinkRun:
    """Word pairs on Spark into a 2-partition topic, applied by four sink processes: SQLite,
    PostgreSQL, local files and files in HDFS."""

    def __init__(self, settings: Settings, tmp_path: Path, dsn: str, hdfs: LocalHdfs) -> None:
        self.settings = settings
        self.bootstrap = settings.kafka_bootstrap
        app = self.app = f"xsink{uuid.uuid4().hex[:6]}"
        self.source, self.sink = f"{app}-lines", f"{app}-pairs"
        self.db, self.dsn, self.files = tmp_path / "pairs.db", dsn, tmp_path / "files"
        self.hdfs, self.hdfs_uri = hdfs, hdfs.uri(f"/pairs-{uuid.uuid4().hex}")
        self.targets: list[tuple[str, Path | str]] = [
            ("db", self.db), ("pg", dsn), ("files", self.files), ("files", self.hdfs_uri),
        ]  # fmt: skip
        texts = generate_lines(920, words_per_line=5, vocabulary=40, seed=21)
        self.lines = [f"{i} {text}" for i, text in enumerate(texts)]
        self.started: list[Any] = []

    def start(self, kind: str, where: Path | str, idle_s: float, fail: str = "") -> Any:
        self.started.append(_sink(kind, self.bootstrap, self.sink, where, idle_s, fail=fail))
        return self.started[-1]

    def stop_all(self) -> None:
        """kill -9 of every sink still running (a failed check leaves none behind)."""
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)

    def trickle(self, part: list[str]) -> int:
        """``part`` in 12 small bursts 0.25 s apart: a release, and a bundle, per burst."""
        until = 0
        for i in range(12):
            until = produce_lines(self.bootstrap, self.source, part[i::12], partitions=2)
            time.sleep(0.25)
        return until

    def killed(self, spark: Any) -> None:
        """The pipeline runs while the sinks are killed at their commits' points and from
        outside, and HDFS restarts under the HDFS sink."""
        db, dsn, files, uri, lines = self.db, self.dsn, self.files, self.hdfs_uri, self.lines
        pipeline = word_pairs(self.app, self.source, KafkaSink(self.sink, partitions=2))
        with running(self.settings, spark, pipeline) as run:
            # Warm: the rounds' bursts then come out as a release (and a bundle) each.
            warm = produce_lines(self.bootstrap, self.source, lines[:20], partitions=2)
            run.wait_released(warm, timeout_s=180)
            # Killed at each point of a commit, each process at its own count, while
            # bundles keep coming: the database sinks between a bundle's rows and its
            # commit, the file sinks before the state that commits pending files, then
            # between it and the renames.
            for round_, failing in enumerate(
                [
                    [("db", db, "dbsink.bundle=2"), ("pg", dsn, "dbsink.bundle=3"),
                     ("files", files, "filesink.state=1"), ("files", uri, "filesink.state=2")],
                    [("db", db, "dbsink.bundle=4"), ("pg", dsn, "dbsink.bundle=2"),
                     ("files", files, "filesink.rename=1"), ("files", uri, "filesink.rename=2")],
                ]
            ):  # fmt: skip
                procs = [self.start(kind, path, 60, fail) for kind, path, fail in failing]
                self.trickle(lines[20 + 300 * round_ : 20 + 300 * (round_ + 1)])
                for proc in procs:
                    _killed(proc)
            # kill -9 from outside while they apply what keeps arriving.
            procs = [self.start(kind, path, 60) for kind, path in self.targets]
            self._hdfs_restarted_under_its_sink()
            for proc in procs:
                _kill_running(proc)
            out, _ = procs[-1].communicate()
            assert b"trying again for up to 60 s" in out, out.decode(errors="replace")[-3000:]
            until = self.trickle(lines[820:])
            run.wait_released(until, timeout_s=180)

    def _hdfs_restarted_under_its_sink(self) -> None:
        """HDFS crashes (kill -9) and comes back while bundles arrive: the HDFS sink tries
        its calls again, and commits again once HDFS is back."""
        restart = threading.Thread(target=self.hdfs.restart, args=(2.0,))
        restart.start()
        self.trickle(self.lines[620:770])
        restart.join(180)
        assert not restart.is_alive(), "HDFS did not come back"
        after_restart = _buckets(self.hdfs_uri)
        self.trickle(self.lines[770:820])
        _wait(lambda: _buckets(self.hdfs_uri) > after_restart, "an HDFS commit after the restart")

    def check(self) -> None:
        """The tables hold every output item once; the files every closed bucket's items."""
        output = Counter(pair_key(item) for item in read_output(self.bootstrap, self.sink))
        assert output == word_pairs_oracle(self.bootstrap, self.source, DEFAULT_DELTA_MS)
        # The tables: every output item once.
        for table in (self.db, self.dsn):
            rows = _table_rows(table)
            assert sum(rows.values()) == sum(output.values()), (
                f"{table}: {sum(rows.values())} rows for {sum(output.values())} output items: "
                f"missing {sum((output - rows).values())}, extra {sum((rows - output).values())}"
            )
            assert rows == output
            parts = _table_rows(table, "SELECT part FROM flamepipe_sink_positions")
            assert set(parts) == {0, 1}
        # The files, local and in HDFS: every item of a closed bucket once, in committed files.
        closed = _closed_items(self.bootstrap, self.sink)
        assert sum(closed.values()) > 0
        for root in (str(self.files), self.hdfs_uri):
            written, buckets = _file_rows(open_store(root))
            assert buckets >= 3, root
            assert written == closed, (
                f"{root}: {sum(written.values())} rows in files, {sum(closed.values())} "
                f"expected: missing {sum((closed - written).values())}, extra "
                f"{sum((written - closed).values())}"
            )
