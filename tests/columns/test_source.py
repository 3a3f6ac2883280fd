"""columns.source.HeldFile: session.db mapped once and lent to a column reader only while it is
the snapshot of the reader's transaction, by the rule pages.tables owns (header_is_snapshot)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from capsem_core._native import _columns
from capsem_core.columns.source import HeldFile, open_source
from capsem_core.pages.tables import SNAPSHOT_PRAGMAS, header_is_snapshot


def _database(path: Path, journal: str) -> sqlite3.Connection:
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute(f"PRAGMA journal_mode = {journal}")
    writer.execute("CREATE TABLE t (x TEXT)")
    writer.execute("INSERT INTO t VALUES ('a')")
    return writer


def _grow(writer: sqlite3.Connection) -> None:
    writer.execute("INSERT INTO t SELECT printf('%.*c', 3000, 'x') FROM (SELECT 1 UNION SELECT 2 UNION SELECT 3)")


def test_a_held_map_is_lent_while_it_is_the_snapshot_and_mapped_again_once_the_file_grows(tmp_path: Path) -> None:
    db = tmp_path / "session.db"
    writer = _database(db, "delete")
    held = HeldFile(db)
    source, plan = open_source(db)
    try:
        source.begin()
        first = held.for_snapshot(source, plan)
        assert first is not None
        assert held.for_snapshot(source, plan) is first   # kept across reads of one snapshot
        source.end()
        _grow(writer)
        # The old map no longer holds the file's pages: not the snapshot now.
        assert not header_is_snapshot(first.header(), lambda p: writer.execute(f"PRAGMA {p}").fetchone()[0])
        source.begin()
        again = held.for_snapshot(source, plan)
        assert again is not None and again is not first
        assert again.header() == {"page_size": 4096, "page_count": writer.execute("PRAGMA page_count").fetchone()[0],
                                  "freelist_count": 0,
                                  "schema_cookie": writer.execute("PRAGMA schema_version").fetchone()[0]}
        source.end()
    finally:
        source.close()
        held.close()
        writer.close()


def test_no_map_is_lent_outside_a_transaction_beside_a_wal_or_with_page_scans_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "session.db"
    writer = _database(db, "wal")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    held = HeldFile(db)
    source, plan = open_source(db)
    try:
        assert held.for_snapshot(source, plan) is None          # no transaction yet
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        source.begin()
        assert held.for_snapshot(source, plan) is not None      # the -wal is empty: the file is the snapshot
        source.end()
        _grow(writer)                                            # committed to the -wal only
        source.begin()
        assert held.for_snapshot(source, plan) is None
        source.end()
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", "0")
        source.begin()
        assert held.for_snapshot(source, plan) is None
        source.end()
    finally:
        source.close()
        held.close()
        writer.close()


def test_the_header_rule_compares_the_four_pragmas_in_order() -> None:
    header = {"page_size": 4096, "page_count": 7, "freelist_count": 1, "schema_cookie": 3}
    values = dict(zip(SNAPSHOT_PRAGMAS, (4096, 7, 1, 3)))
    assert header_is_snapshot(header, values.__getitem__)
    for name in SNAPSHOT_PRAGMAS:
        assert not header_is_snapshot(header, {**values, name: values[name] + 1}.__getitem__), name
    asked: list[str] = []
    assert not header_is_snapshot(None, lambda p: asked.append(p))
    assert asked == []   # no header (a file SQLite would not open): nothing is asked


def test_a_file_map_of_something_that_is_not_a_database_has_no_header(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    path.write_bytes(b"not a database" * 400)
    file = _columns.FileMap(path)
    try:
        assert file.header() is None
    finally:
        file.close()
