"""Files of a flamepipe output topic, bucketed by time and key, exactly once.

Like `connectors.database`, the output topic is the write-ahead log: `FileSink` reads its
verified bundles (`connectors.BundleConsumer`) and writes each item's row into the file of
its time bucket (the item's global time, ``bucket_ms`` wide), its key (``partition_by``,
optional: a directory ``<partition_name>=<key>`` per key, as Hive and Spark lay out
partitioned tables) and its output partition. Files move through three states; readers
list only the third:

* in progress: ``_in_progress/<bucket>-<partition>[-<key>].jsonl``, rows appended per bundle
  (for HDFS in a local spill directory: only the sink's own process ever reads them);
* pending: ``_pending/<bucket>-<partition>[-<key>].<format>``, the whole file, durable;
* committed: ``bucket=<bucket start ms>/[<partition_name>=<key>/]part-<partition>.<format>``,
  by an atomic rename.

The directory is a path or a ``file://`` URI of a local or mounted filesystem, or HDFS as
``webhdfs://<namenode>:9870/<path>`` (`connectors._stores`): the commit needs an atomic
rename, which object stores lack. Readers that skip names starting with ``_`` (Spark,
Hive, pyarrow datasets) see committed files only. Keys are percent-encoded in names (``/``
cannot escape a bucket's directory).

A bucket of a partition is complete once a bundle of that partition has a ``GT_last`` at
or past its end: bundles of a partition release items in global-time order, so no later
one can hold an item of it. Protocol per bundle of partition ``p``:

1. Append each item's row to its bucket's in-progress file; an item of a bucket already
   committed is skipped (a restart reads again from before the oldest open bucket).
2. For each bucket of ``p`` the bundle completes, oldest first, write the pending file.
3. Replace ``_state.json`` atomically (write, sync, rename): per partition the committed
   bucket and the bundle position to resume from (before the first bundle of the oldest
   bucket still in progress), and the pending files it commits.
4. Rename each pending file into place.

On start (and after a kill -9 anywhere): pending files the state lists are renamed into
place (step 4 again, idempotent), every other pending and in-progress file is deleted, and
reading resumes at the state's positions. So a committed file is whole, appears once, and
its rows are never written into another; what was in progress is written again from the
output topic.

Example::

    >>> FileSink("127.0.0.1:9092", "counts", "/data/counts", bucket_ms=60_000,  # doctest: +SKIP
    ...          format="parquet", row=lambda c: {"word": c[0], "n": c[2]}).run()
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors._stores import LocalStore, Store, open_store
from connectors.bundles import BundleConsumer, BundleStart, VerifiedBundle
from framework import failpoints
from framework.core.time import DEFAULT_DELTA_MS
from framework.errors import ConfigError, SinkError, UserFunctionError
from framework.wire.positions import BundleMark
from framework.wire.serde import Serde

_log = logging.getLogger(__name__)
_FORMATS = ("jsonl", "parquet")
_STATE = "_state.json"


@dataclass(slots=True)
class FileSinkStats:
    """What a run wrote."""

    bundles: int = 0
    rows: int = 0
    committed: int = 0  # files
    skipped: int = 0  # items of committed buckets, read again after a restart
    recovered: int = 0  # pending files a restart renamed into place
    discarded: int = 0  # in-progress and unlisted pending files a restart deleted


@dataclass(slots=True)
class _Partition:
    """One output partition: its committed bucket, open buckets and where they began."""

    committed: int | None = None  # start ms of the last committed bucket
    last: BundleStart | None = None  # after the last bundle applied
    opened: dict[int, BundleStart | None] = field(default_factory=dict)  # bucket -> before
    keys: dict[int, set[str]] = field(default_factory=dict)  # bucket -> its files' keys


class FileSink:
    """Writes output ``topic`` into ``directory`` (module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        directory: str | os.PathLike[str],
        *,
        bucket_ms: int = 60_000,
        format: str = "jsonl",
        row: Callable[[Any], Any] | None = None,
        delta_ms: int = DEFAULT_DELTA_MS,
        serde: Serde | None = None,
        partition_by: Callable[[Any], object] | None = None,
        partition_name: str = "key",
        hdfs_user: str | None = None,
        hdfs_retry_s: float = 60.0,
        spill_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not partition_name or _quote(partition_name) != partition_name:
            raise ConfigError(f"partition_name={partition_name!r}: letters, digits, '_' or '-'")
        if format not in _FORMATS:
            raise ConfigError(f"format {format!r}: one of {', '.join(_FORMATS)}")
        if bucket_ms < 1 or bucket_ms % delta_ms:
            raise ConfigError(f"bucket_ms={bucket_ms}: a positive multiple of delta ({delta_ms})")
        self.bootstrap = bootstrap
        self.topic = topic
        self.store = open_store(directory, hdfs_user, hdfs_retry_s)
        self.root = self.store.where
        self.spill = _spill_dir(self.store, topic, spill_dir)
        self.bucket_ms = bucket_ms
        self.format = format
        self.row = row if row is not None else _same
        self.delta_ms = delta_ms
        self.serde = serde
        self.stats = FileSinkStats()
        self.partition_by = partition_by
        self.partition_name = partition_name
        self._parts: dict[int, _Partition] = {}

    def run(
        self, *, idle_s: float | None = None, stop: threading.Event | None = None
    ) -> FileSinkStats:
        """Write bundles until ``idle_s`` seconds pass without one (None: until ``stop``)."""
        starts = self._recover()
        group = f"flamepipe-filesink-{self.topic}"  # never committed to: positions are ours
        try:
            with BundleConsumer(
                self.bootstrap, self.topic, group, self.serde, starts=starts
            ) as consumer:
                for bundle in consumer.bundles(idle_s, stop):
                    self._apply(bundle)
        finally:
            if not isinstance(self.store, LocalStore):
                # Open buckets are read again on the next start: their spill is of no use.
                shutil.rmtree(self.spill, ignore_errors=True)
        return self.stats

    # -- recovery --------------------------------------------------------------------

    def _recover(self) -> dict[int, BundleStart]:
        self.spill.mkdir(parents=True, exist_ok=True)
        state = self._read_state()
        on_disk = set(self.store.names("_pending"))
        listed = set()
        for name, target in state.get("pending", []):
            listed.add(name)
            if name in on_disk:  # Step 4 again
                self.store.replace(f"_pending/{name}", target)
                self.stats.recovered += 1
        for path in sorted(self.spill.iterdir()):
            path.unlink()
            self.stats.discarded += 1
        for name in sorted(on_disk - listed):
            self.store.delete(f"_pending/{name}")
            self.stats.discarded += 1
        starts: dict[int, BundleStart] = {}
        for key, entry in state.get("partitions", {}).items():
            p = int(key)
            part = self._parts[p] = _Partition(committed=entry.get("committed"))
            resume = entry.get("resume")
            if resume is not None:
                mark = BundleMark.decode(resume["mark"], f"{self.root}/{_STATE} [{p}]")
                start = BundleStart(resume["bundles"], resume["items"], mark.seq, mark.gt_last)
                starts[p] = part.last = start
        if starts or self.stats.discarded:
            _log.info(
                "%s: resuming %s (%d pending files committed, %d partial files discarded)",
                self.root, {p: s.seq for p, s in starts.items()}, self.stats.recovered,
                self.stats.discarded,
            )  # fmt: skip
        return starts

    def _read_state(self) -> dict[str, Any]:
        path = f"{self.root}/{_STATE}"
        data = self.store.read(_STATE)
        if data is None:
            return {}
        try:
            state = json.loads(data)
        except ValueError as exc:
            raise SinkError(
                f"{path}: unreadable state ({exc}); it is written by FileSink only"
            ) from exc
        if not isinstance(state, dict) or state.get("format") != 1:
            raise SinkError(f"{path}: not a FileSink state of format 1")
        return state

    # -- one bundle ------------------------------------------------------------------

    def _apply(self, bundle: VerifiedBundle) -> None:
        p = bundle.partition
        part = self._parts.setdefault(p, _Partition())
        before = part.last
        # Step 1
        rows: dict[tuple[int, str], list[str]] = {}
        for item in bundle.items:
            bucket = self._bucket(item.meta.gt.slot)
            if part.committed is not None and bucket <= part.committed:
                self.stats.skipped += 1
                continue
            try:
                line = json.dumps(self.row(item.value), sort_keys=True, default=str)
                key = (
                    "" if self.partition_by is None else _quote(str(self.partition_by(item.value)))
                )
            except Exception as exc:
                raise UserFunctionError(
                    f"{self.root}: the row of {self.topic}[{p}]@{item.offset} failed: {exc!r}; "
                    "nothing of its bundle was committed"
                ) from exc
            rows.setdefault((bucket, key), []).append(line)
            part.opened.setdefault(bucket, before)
            part.keys.setdefault(bucket, set()).add(key)
        for (bucket, key), lines in rows.items():
            with open(self._in_progress(bucket, p, key), "a", encoding="utf-8") as out:
                out.write("".join(f"{line}\n" for line in lines))
        part.last = BundleStart.after(bundle, before.items_offset if before else None)
        self.stats.bundles += 1
        self.stats.rows += sum(len(lines) for lines in rows.values())
        # Step 2
        end_ms = bundle.header.gt_last.slot * self.delta_ms
        done = sorted(b for b in part.opened if b + self.bucket_ms <= end_ms)
        if not done:
            return
        pending = [
            self._finish(bucket, p, key) for bucket in done for key in sorted(part.keys[bucket])
        ]
        for bucket in done:
            del part.opened[bucket], part.keys[bucket]
        part.committed = done[-1]
        # Step 3
        failpoints.hit("filesink.state")
        self._write_state(pending)
        # Step 4
        failpoints.hit("filesink.rename")
        for name, target in pending:
            self.store.replace(f"_pending/{name}", target)
        self.stats.committed += len(pending)
        _log.info(
            "%s: buckets %s of partition %d committed (%d files); %d rows, %d files in all",
            self.root, done, p, len(pending), self.stats.rows, self.stats.committed,
        )  # fmt: skip

    def _finish(self, bucket: int, p: int, key: str) -> tuple[str, str]:
        """Step 2 for one file of a bucket: whole in ``_pending``, durable; (name, target)."""
        source = self._in_progress(bucket, p, key)
        name = f"{source.stem}.{self.format}"
        if self.format == "jsonl":
            self.store.upload(source, f"_pending/{name}")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            with open(source, encoding="utf-8") as lines:
                rows = [json.loads(line) for line in lines]
            if not all(isinstance(r, dict) for r in rows):
                raise SinkError(f"{self.root}: parquet rows must be mappings (give row=...)")
            converted = self.spill / name
            pq.write_table(pa.Table.from_pylist(rows), converted)
            source.unlink()
            self.store.upload(converted, f"_pending/{name}")
        where = f"bucket={bucket}/{self.partition_name}={key}" if key else f"bucket={bucket}"
        return name, f"{where}/part-{p}.{self.format}"

    def _write_state(self, pending: list[tuple[str, str]]) -> None:
        partitions = {}
        for p, part in self._parts.items():
            opened = list(part.opened.values())
            resume = part.last if not opened else _earliest(opened)
            partitions[str(p)] = {
                "committed": part.committed,
                "resume": None if resume is None else {
                    "bundles": resume.bundles_offset,
                    "items": resume.items_offset,
                    "mark": BundleMark(resume.seq, resume.gt_last).encode(),
                },
            }  # fmt: skip
        state = {"format": 1, "partitions": partitions, "pending": pending}
        self.store.write_atomic(_STATE, json.dumps(state, sort_keys=True).encode())

    def _bucket(self, slot: int) -> int:
        ms = slot * self.delta_ms
        return ms - ms % self.bucket_ms

    def _in_progress(self, bucket: int, p: int, key: str) -> Path:
        return self.spill / (f"{bucket}-{p}-{key}.jsonl" if key else f"{bucket}-{p}.jsonl")


def _earliest(starts: list[BundleStart | None]) -> BundleStart | None:
    """The earliest resume point; None (from the partition's first bundle) beats all."""
    if any(s is None for s in starts):
        return None
    return min((s for s in starts if s is not None), key=lambda s: s.bundles_offset)


def _same(value: object) -> Any:
    return value


def _quote(text: str) -> str:
    """``text`` safe as one path component: percent-encoded but letters, digits, ``_-``
    (``.`` too, but not as the whole name)."""
    quoted = urllib.parse.quote(text, safe="")
    return quoted.replace(".", "%2E") if quoted in {".", ".."} else quoted


def _spill_dir(store: Store, topic: str, given: str | os.PathLike[str] | None) -> Path:
    """Where in-progress files grow: inside a local root (so a commit is a rename), else
    ``spill_dir`` or a directory of the system's temporary space named after the store."""
    if isinstance(store, LocalStore):
        if given is not None:
            raise ConfigError("spill_dir is for a webhdfs:// directory; a local one spills inside")
        return store.root / "_in_progress"
    if given is not None:
        return Path(given)
    digest = hashlib.sha256(f"{store.where}\0{topic}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"flamepipe-filesink-{digest}"
