"""The database sink's table statements, without Kafka: identifiers checked, inserts and
upserts that SQLite runs, positions that round-trip."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from connectors import DatabaseSink, Table, sqlite
from framework.errors import ConfigError


def test_an_insert_and_an_upsert_run_on_sqlite(tmp_path: Path) -> None:
    counts = Table("counts", {"word": "TEXT", "n": "BIGINT"}, key=("word",))
    log = Table("log", {"word": "TEXT", "n": "BIGINT"})
    conn = sqlite(str(tmp_path / "t.db"))()
    for table in (counts, log):
        conn.execute(table.ddl())
        for row in [("a", 1), ("b", 1), ("a", 2)]:
            conn.execute(table.write("?"), row)
    conn.commit()
    assert sorted(conn.execute("SELECT word, n FROM counts")) == [("a", 2), ("b", 1)]
    assert sorted(conn.execute("SELECT word, n FROM log")) == [("a", 1), ("a", 2), ("b", 1)]
    assert "ON CONFLICT (word) DO UPDATE SET n = excluded.n" in counts.write("%s")
    assert "%s, %s" in counts.write("%s")


def test_a_key_only_table_ignores_a_second_write_of_a_row() -> None:
    seen = Table("seen", {"word": "TEXT"}, key=("word",))
    assert seen.write("?").endswith("ON CONFLICT (word) DO NOTHING")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Table("x; DROP TABLE y", {"a": "TEXT"}), "table"),
        (lambda: Table("t", {"a b": "TEXT"}), "column"),
        (lambda: Table("t", {"a": "TEXT); DROP TABLE t; --"}), "type"),
        (lambda: Table("t", {}), "at least one column"),
        (lambda: Table("t", {"a": "TEXT"}, key=("b",)), "not among its columns"),
    ],
)
def test_names_and_types_that_are_not_sql_identifiers_are_refused(make: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        make()  # type: ignore[operator]


def test_an_unknown_placeholder_is_refused() -> None:
    table = Table("t", {"a": "TEXT"})
    with pytest.raises(ConfigError, match="placeholder"):
        DatabaseSink("b:1", "t", sqlite(":memory:"), table, dict, placeholder=":1")


def test_positions_round_trip_through_the_positions_table(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    table = Table("t", {"a": "TEXT"})
    sink = DatabaseSink("b:1", "out", sqlite(str(path)), table, dict, name="s")
    conn = sqlite3.connect(path)
    assert sink._open(conn) == {}
    conn.execute(
        "INSERT INTO flamepipe_sink_positions VALUES ('s', 1, 10, 7, 'fp1 seq=3 gt=5,9,2')"
    )
    conn.commit()
    (start,) = sink._open(conn).values()
    assert (start.bundles_offset, start.items_offset, start.seq) == (10, 7, 3)
    assert tuple(start.gt_last) == (5, 9, 2)
