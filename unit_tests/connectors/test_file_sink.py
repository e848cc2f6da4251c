"""The file sink without Kafka: bundles into time buckets, files committed once a bundle
passes their end, and recovery from a crash at each point of the commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from connectors.bundles import OutputItem, VerifiedBundle
from connectors.file_sink import FileSink
from framework import failpoints
from framework.core.messages import BundleHeader
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import ConfigError


class CrashError(Exception):
    """Stands for kill -9 at a failpoint."""


def bundle(
    p: int, seq: int, offset: int, items: list[tuple[int, str]], last: int
) -> VerifiedBundle:
    """Bundle ``seq`` of partition ``p``: items (slot, value), GT_last at slot ``last``."""
    out = tuple(
        OutputItem(value, Meta(GlobalTime(slot, 1, i)), None, p, 10 * seq + i)
        for i, (slot, value) in enumerate(items)
    )
    end = out[-1].offset + 1 if out else None
    return VerifiedBundle(p, BundleHeader(seq, GlobalTime(last, 1, 99), len(out)), out, offset, end)


def committed(root: Path) -> dict[str, list[Any]]:
    return {
        str(f.relative_to(root)): [json.loads(line) for line in f.read_text().splitlines()]
        for f in sorted(root.glob("bucket=*/*"))
    }


def sink(root: Path) -> FileSink:
    # 10 ms slots, 100 ms buckets: slots 0-9 are bucket 0, 10-19 bucket 100...
    return FileSink("b:1", "out", root, bucket_ms=100, delta_ms=10)


def test_a_bucket_is_committed_once_a_bundle_passes_its_end(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s._recover()
    s._apply(bundle(0, 0, 0, [(1, "a"), (5, "b")], last=5))
    assert committed(tmp_path) == {}  # bucket 0 may still get items
    s._apply(bundle(0, 1, 1, [(9, "c"), (12, "d")], last=12))
    assert committed(tmp_path) == {"bucket=0/part-0.jsonl": ["a", "b", "c"]}
    s._apply(bundle(1, 0, 0, [(3, "x")], last=25))
    assert committed(tmp_path)["bucket=0/part-1.jsonl"] == ["x"]
    assert s.stats.committed == 2 and s.stats.rows == 5


@pytest.mark.parametrize("point", ["filesink.state", "filesink.rename"])
def test_a_crash_in_a_commit_recovers_every_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    bundles = [
        bundle(0, 0, 0, [(1, "a"), (12, "b")], last=12),  # bucket 0 done; 100 opens
        bundle(0, 1, 1, [(15, "c"), (21, "d")], last=21),  # bucket 100 done; 200 opens
        bundle(0, 2, 2, [(25, "e")], last=31),  # bucket 200 done
    ]
    first = sink(tmp_path)
    first._recover()
    first._apply(bundles[0])

    def crash(name: str, before: object = None) -> None:
        if name == point:
            raise CrashError(name)

    monkeypatch.setattr(failpoints, "hit", crash)
    with pytest.raises(CrashError):
        first._apply(bundles[1])
    monkeypatch.undo()
    # A new process: it resumes where the state says and reads those bundles again.
    second = sink(tmp_path)
    starts = second._recover()
    assert list((tmp_path / "_in_progress").iterdir()) == []
    # Before the state of bundle 1, bucket 100 was open since bundle 0: from the first
    # bundle again (bucket 0's items skipped); after it, bucket 200 since bundle 1.
    resumed_after = starts[0].seq if 0 in starts else -1
    assert resumed_after == (-1 if point == "filesink.state" else 0)
    for b in bundles:
        if b.header.seq > resumed_after:
            second._apply(b)
    assert committed(tmp_path) == {
        "bucket=0/part-0.jsonl": ["a"],
        "bucket=100/part-0.jsonl": ["b", "c"],
        "bucket=200/part-0.jsonl": ["d", "e"],
    }
    assert second.stats.recovered == (1 if point == "filesink.rename" else 0)
    assert second.stats.skipped == 1  # one item of a committed bucket read again


def test_parquet_files_hold_the_rows(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    s = FileSink("b:1", "out", tmp_path, bucket_ms=100, delta_ms=10, format="parquet",
                 row=lambda v: {"word": v, "n": len(v)})  # fmt: skip
    s._recover()
    s._apply(bundle(0, 0, 0, [(1, "ab"), (2, "c")], last=12))
    table = pq.read_table(tmp_path / "bucket=0" / "part-0.parquet")
    assert table.to_pylist() == [{"n": 2, "word": "ab"}, {"n": 1, "word": "c"}]


def test_bad_options_fail_fast() -> None:
    with pytest.raises(ConfigError, match="format"):
        FileSink("b:1", "out", "/tmp/x", format="csv")
    with pytest.raises(ConfigError, match="multiple of delta"):
        FileSink("b:1", "out", "/tmp/x", bucket_ms=15, delta_ms=10)
    with pytest.raises(ConfigError, match=r"hdfs:// is not supported .* webhdfs://"):
        FileSink("b:1", "out", "hdfs://namenode:8020/data")
    with pytest.raises(ConfigError, match=r"s3a:// is not supported: .* no atomic rename"):
        FileSink("b:1", "out", "s3a://bucket/data")
    with pytest.raises(ConfigError, match="NameNode's HTTP host and port"):
        FileSink("b:1", "out", "webhdfs://namenode/data")
    with pytest.raises(ConfigError, match="NameNode's HTTP host and port"):
        FileSink("b:1", "out", "webhdfs://namenode:http/data")
    with pytest.raises(ConfigError, match="hdfs_user"):
        FileSink("b:1", "out", "webhdfs://alice@namenode:9870/data")
    with pytest.raises(ConfigError, match="spill_dir is for a webhdfs"):
        FileSink("b:1", "out", "/tmp/x", spill_dir="/tmp/y")
    with pytest.raises(ConfigError, match="partition_name"):
        FileSink("b:1", "out", "/tmp/x", partition_by=str, partition_name="a/b")


def test_keys_get_a_directory_each_within_their_time_bucket(tmp_path: Path) -> None:
    """``partition_by``: Hive-style directories per key; a key like ``../x`` stays inside;
    a ``file://`` URI names the same directory as its path."""
    s = FileSink("b:1", "out", tmp_path.as_uri(), bucket_ms=100, delta_ms=10,
                 partition_by=lambda v: v[0], partition_name="letter")  # fmt: skip
    s._recover()
    s._apply(bundle(0, 0, 0, [(1, "ab"), (2, "ba"), (3, "ac"), (4, "../x")], last=5))
    assert committed(tmp_path) == {}
    s._apply(bundle(0, 1, 1, [(12, "bb")], last=12))
    files = {
        str(f.relative_to(tmp_path)): f.read_text().split()
        for f in sorted(tmp_path.glob("bucket=*/*/*"))
    }
    assert files == {
        "bucket=0/letter=%2E/part-0.jsonl": ['"../x"'],
        "bucket=0/letter=a/part-0.jsonl": ['"ab"', '"ac"'],
        "bucket=0/letter=b/part-0.jsonl": ['"ba"'],
    }
    assert s.stats.committed == 3 and list((tmp_path / "_pending").iterdir()) == []
