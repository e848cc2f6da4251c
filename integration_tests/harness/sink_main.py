"""An external sink as its own process, for tests that kill it (``kill -9``) and restart it.

Usage: ``python -m integration_tests.harness.sink_main db|pg|files BOOTSTRAP TOPIC WHERE
IDLE_S``. It applies the word-pairs output ``TOPIC`` until ``IDLE_S`` seconds pass without
a bundle, then prints its figures as JSON: ``db`` into the SQLite file ``WHERE``, ``pg``
into the PostgreSQL database of the DSN ``WHERE`` (table ``pairs``, one row per item,
inserted: a bundle applied twice would show as duplicate rows), ``files`` into JSON-lines
files under the directory ``WHERE`` (1 s buckets).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from connectors import DatabaseSink, FileSink, Table, sqlite
from framework.demos.oracle import pair_key

TABLE = Table("pairs", {"pair": "TEXT NOT NULL"})
BUCKET_MS = 1000


def row(item: Any) -> dict[str, Any]:
    return {"pair": pair_key(item)}


def first_letter(item: Any) -> str:
    """The files' key: a word pair's word's first letter (a directory per letter)."""
    return str(item[0][0])


def main(argv: list[str]) -> None:
    kind, bootstrap, topic, path, idle_s = argv
    sink: DatabaseSink | FileSink
    if kind == "db":
        sink = DatabaseSink(bootstrap, topic, sqlite(path), TABLE, row, name="pairs")
    elif kind == "pg":
        import psycopg

        def connect() -> Any:
            return psycopg.connect(path)

        sink = DatabaseSink(bootstrap, topic, connect, TABLE, row, name="pairs", placeholder="%s")
    else:
        sink = FileSink(
            bootstrap, topic, path, bucket_ms=BUCKET_MS, row=row, partition_by=first_letter
        )
    stats = sink.run(idle_s=float(idle_s))
    print(json.dumps(dataclasses.asdict(stats)))


if __name__ == "__main__":
    main(sys.argv[1:])
