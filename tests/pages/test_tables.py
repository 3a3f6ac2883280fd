"""Where a native page scan finds each column it wants (page_tables.py): in a plain rowid
table declared with the expected types, the record columns in record order with the INTEGER
PRIMARY KEY as the rowid; any other table (a collation where texts are compared, a column
without a type, a key that is not the rowid, a generated column, a missing column or table)
is left to SQL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from capsem_core.pages import tables as page_tables
from capsem_core._native import _pages


def test_a_plain_table_maps_its_columns_and_any_other_is_left_to_sql(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute("CREATE TABLE plain (id INTEGER PRIMARY KEY, call_id TEXT, model_call_id INTEGER)")
    conn.execute("CREATE TABLE folded (id INTEGER PRIMARY KEY, call_id TEXT COLLATE NOCASE)")
    conn.execute("CREATE TABLE loose (id INTEGER PRIMARY KEY, call_id)")
    conn.execute("CREATE TABLE keyed (id TEXT PRIMARY KEY, call_id TEXT)")
    conn.execute("CREATE TABLE derived (id INTEGER PRIMARY KEY, x TEXT, call_id TEXT GENERATED ALWAYS AS (x))")
    conn.execute("CREATE TABLE narrow (id INTEGER PRIMARY KEY, call_id TEXT) WITHOUT ROWID")
    integers = ("id", "model_call_id")
    assert page_tables.record_columns(conn, "plain", ["call_id", "id", "model_call_id"], integers) == [
        (_pages.ROWID, "id"), (1, "call_id"), (2, "model_call_id")]
    for table, names in (("folded", ["call_id"]), ("loose", ["call_id"]), ("keyed", ["id"]), ("derived", ["call_id"]),
                         ("narrow", ["call_id"]), ("plain", ["event_id"]), ("missing", ["call_id"])):
        assert page_tables.record_columns(conn, table, names, integers) is None, table
    # A reader that never compares texts may take a collated column.
    assert page_tables.record_columns(conn, "folded", ["call_id"], integers, plain_text=False) == [(1, "call_id")]
    assert page_tables.root_page(conn, "plain") and page_tables.root_page(conn, "missing") is None
    assert page_tables.utf8(conn)
    conn.close()


def test_a_database_in_utf16_is_not_utf8(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute("PRAGMA encoding = 'UTF-16le'")
    conn.execute("CREATE TABLE t (x TEXT)")
    assert not page_tables.utf8(conn)
    conn.close()


def test_a_map_is_the_file_sqlite_reads_only_while_their_headers_agree(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("CREATE TABLE t (x TEXT)")
    mapped = _pages.PageFile(db)
    reader = sqlite3.connect(db)
    assert page_tables.same_file(mapped, reader)
    writer.execute("INSERT INTO t SELECT printf('%.*c', 3000, 'x') FROM (SELECT 1 UNION SELECT 2 UNION SELECT 3)")
    assert not page_tables.same_file(mapped, reader)   # the file grew past the map's header
    assert page_tables.same_file(_pages.PageFile(db), reader)
    for conn in (reader, writer):
        conn.close()
