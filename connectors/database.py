"""A relational table fed from a flamepipe output topic, exactly once.

The output topic is the write-ahead log: its bundles are released by min time, committed
and verified (`connectors.BundleConsumer`), each with its ``seq`` and ``GT_last``.
`DatabaseSink` applies each bundle to the table in one database transaction together
with the bundle's position, in a table of its own (``flamepipe_sink_positions``: per
sink and output partition, the bundle topic's and the output topic's offsets after the
bundle, its ``seq`` and ``GT_last``). Protocol:

1. Open the database; create the positions table (and the user's table, if asked) when
   missing; read this sink's positions.
2. Read the output topic's verified bundles from those positions (a partition without
   one from its first bundle); nothing is committed to Kafka.
3. Per bundle, in one transaction: each item's row (``row(payload)``, a mapping of the
   table's columns) inserted, or upserted on the table's key; then the partition's new
   position. Commit.
4. A crash (kill -9) before the commit leaves none of the bundle in the table, and the
   restart applies it again; after the commit, the position says it was applied, and the
   restart goes on after it. Every bundle once, none skipped: the consumer checks that
   ``seq`` continues from the stored one.

A row function that raises, or a row the database refuses, stops the sink with an error
naming the item (its partition, offset and meta); the bundle is not applied, so fixing the
cause and restarting loses nothing. SQLite is built in (`sqlite`); any DB-API 2 connection
with ``INSERT ... ON CONFLICT`` works (PostgreSQL: ``placeholder="%s"``).

Example::

    >>> sink = DatabaseSink(  # doctest: +SKIP
    ...     "127.0.0.1:9092", "counts", sqlite("counts.db"),
    ...     Table("counts", {"word": "TEXT", "start_ms": "BIGINT", "n": "BIGINT"},
    ...           key=("word", "start_ms")),
    ...     row=lambda item: {"word": item[0], "start_ms": item[1], "n": item[2]},
    ... )
    >>> sink.run(idle_s=10)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.bundles import BundleConsumer, BundleStart, VerifiedBundle
from framework import failpoints
from framework.errors import ConfigError, SinkError, UserFunctionError
from framework.wire.positions import BundleMark
from framework.wire.serde import Serde

_log = logging.getLogger(__name__)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_POSITIONS = "flamepipe_sink_positions"

Connect = Callable[[], Any]
"""Opens a DB-API 2 connection (not in autocommit mode)."""


def sqlite(path: str) -> Connect:
    """Connections to the SQLite file ``path`` (created if missing)."""

    def connect() -> sqlite3.Connection:
        # Waits for another writer rather than failing at once; the journal makes a
        # commit atomic across a kill -9.
        return sqlite3.connect(path, timeout=30.0)

    return connect


def _identifier(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{what} {name!r}: use letters, digits and _ (a SQL identifier)")
    return name


@dataclass(frozen=True, slots=True)
class Table:
    """The target table: its columns (name -> SQL type) and the key rows upsert on (empty:
    rows are inserted, and an item is a row)."""

    name: str
    columns: Mapping[str, str]
    key: tuple[str, ...] = ()
    create: bool = True  # create it when missing

    def __post_init__(self) -> None:
        _identifier(self.name, "table")
        if not self.columns:
            raise ConfigError(f"table {self.name!r} needs at least one column")
        for column, kind in self.columns.items():
            _identifier(column, "column")
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_ ()]{0,40}", kind):
                raise ConfigError(f"column {column!r} type {kind!r}: a SQL type, e.g. TEXT")
        unknown = [k for k in self.key if k not in self.columns]
        if unknown:
            raise ConfigError(f"table {self.name!r}: key {unknown} not among its columns")

    def ddl(self) -> str:
        """``CREATE TABLE IF NOT EXISTS`` for this table."""
        columns = ", ".join(f"{name} {kind}" for name, kind in self.columns.items())
        key = f", PRIMARY KEY ({', '.join(self.key)})" if self.key else ""
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({columns}{key})"

    def write(self, placeholder: str) -> str:
        """The statement that writes one row: an insert, or an upsert on the key."""
        names = list(self.columns)
        sql = (
            f"INSERT INTO {self.name} ({', '.join(names)}) "
            f"VALUES ({', '.join(placeholder for _ in names)})"
        )
        if not self.key:
            return sql
        rest = [n for n in names if n not in self.key]
        action = (
            "DO UPDATE SET " + ", ".join(f"{n} = excluded.{n}" for n in rest)
            if rest
            else "DO NOTHING"
        )
        return f"{sql} ON CONFLICT ({', '.join(self.key)}) {action}"


@dataclass(slots=True)
class SinkStats:
    """What a run applied."""

    bundles: int = 0
    rows: int = 0
    resumed: dict[int, int] = field(default_factory=dict)  # partition -> seq it resumed after


class DatabaseSink:
    """Applies output ``topic`` to ``table`` through ``connect`` (module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        connect: Connect,
        table: Table,
        row: Callable[[Any], Mapping[str, Any]],
        *,
        name: str | None = None,
        serde: Serde | None = None,
        placeholder: str = "?",
    ) -> None:
        if placeholder not in ("?", "%s"):
            raise ConfigError(f"placeholder {placeholder!r}: '?' (SQLite) or '%s' (PostgreSQL)")
        self.bootstrap = bootstrap
        self.topic = topic
        self.connect = connect
        self.table = table
        self.row = row
        self.name = name or f"{topic}:{table.name}"
        self.serde = serde
        self.placeholder = placeholder
        self.stats = SinkStats()

    def run(self, *, idle_s: float | None = None, stop: threading.Event | None = None) -> SinkStats:
        """Apply bundles until ``idle_s`` seconds pass without one (None: until ``stop``)."""
        conn = self.connect()
        try:
            # Step 1
            starts = self._open(conn)
            self.stats.resumed = {p: s.seq for p, s in starts.items()}
            group = f"flamepipe-dbsink-{self.name}"  # never committed to: positions are ours
            consumer = BundleConsumer(self.bootstrap, self.topic, group, self.serde, starts=starts)
            # Step 2
            with consumer:
                for bundle in consumer.bundles(idle_s, stop):
                    # Step 3
                    self._apply(conn, bundle, starts)
        finally:
            conn.close()
        return self.stats

    def _open(self, conn: Any) -> dict[int, BundleStart]:
        cursor = conn.cursor()
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {_POSITIONS} (sink TEXT NOT NULL, part INTEGER NOT "
            "NULL, bundles_offset BIGINT NOT NULL, items_offset BIGINT, mark TEXT NOT NULL, "
            "PRIMARY KEY (sink, part))"
        )
        if self.table.create:
            cursor.execute(self.table.ddl())
        conn.commit()
        cursor.execute(
            f"SELECT part, bundles_offset, items_offset, mark FROM {_POSITIONS} "
            f"WHERE sink = {self.placeholder}",
            (self.name,),
        )
        starts: dict[int, BundleStart] = {}
        for part, bundles_offset, items_offset, text in cursor.fetchall():
            mark = BundleMark.decode(text, f"{_POSITIONS} of {self.name!r}[{part}]")
            starts[int(part)] = BundleStart(
                int(bundles_offset),
                None if items_offset is None else int(items_offset),
                mark.seq,
                mark.gt_last,
            )
        return starts

    def _apply(self, conn: Any, bundle: VerifiedBundle, starts: dict[int, BundleStart]) -> None:
        p = bundle.partition
        start = BundleStart.after(bundle, starts[p].items_offset if p in starts else None)
        write = self.table.write(self.placeholder)
        columns = list(self.table.columns)
        cursor = conn.cursor()
        try:
            for item in bundle.items:
                where = f"{self.topic}[{p}]@{item.offset} (meta {item.meta})"
                try:
                    row = self.row(item.value)
                    values = tuple(row[c] for c in columns)
                except Exception as exc:
                    raise UserFunctionError(
                        f"{self.name}: the row of {where} failed: {exc!r}; nothing of its "
                        f"bundle (seq {bundle.header.seq}) was applied"
                    ) from exc
                try:
                    cursor.execute(write, values)
                except Exception as exc:
                    raise SinkError(
                        f"{self.name}: the database refused the row of {where}: {exc!r}; "
                        f"nothing of its bundle (seq {bundle.header.seq}) was applied"
                    ) from exc
            mark = BundleMark(start.seq, start.gt_last).encode()
            ph = self.placeholder
            cursor.execute(
                f"INSERT INTO {_POSITIONS} (sink, part, bundles_offset, items_offset, mark) "
                f"VALUES ({ph}, {ph}, {ph}, {ph}, {ph}) ON CONFLICT (sink, part) DO UPDATE SET "
                "bundles_offset = excluded.bundles_offset, "
                "items_offset = excluded.items_offset, mark = excluded.mark",
                (self.name, p, start.bundles_offset, start.items_offset, mark),
            )
            # Crash tests: the bundle's rows and position written, not committed.
            failpoints.hit("dbsink.bundle")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        starts[p] = start
        self.stats.bundles += 1
        self.stats.rows += len(bundle.items)
        if self.stats.bundles % 100 == 0:
            _log.info("%s: %d bundles, %d rows applied", self.name, *self._figures())

    def _figures(self) -> tuple[int, int]:
        return self.stats.bundles, self.stats.rows
