"""The body index read from session.db's own pages (pages/index.py): on samples of every mix
it is exactly what the SQL scans give, spans and keys alike; so it is for the values a hostile
writer may leave (malformed hashes, NULL spans and keys, texts on overflow pages); a value SQL
would convert, a damaged tree or a -wal holding frames leaves the scan to SQL, and the
ledger's index is the same either way."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from capsem_core import db
from capsem_core._native import _index, _pages
from capsem_core.pages import index as index_pages
from capsem_core.pages import tables as page_tables
from tests import scans as index
from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_ledger
from capsem_core.sample.profiles import MIXES
from tests.check.test_identity_graph import ledger, sound

FIXTURES = (sound, ledger)   # a sound realistic sample and its copies to damage


def by_sql(path: Path, conn: sqlite3.Connection) -> tuple[dict, dict]:
    return (_index.scan_bodies(db.read_plan(path).uri, busy_ms=1000, path=str(path), threads=1, conn=None),
            _index.scan_keys(db.read_plan(path).uri, busy_ms=1000, path=str(path), conn=None))


def scanned(path: Path, conn: sqlite3.Connection, *, keys: bool,
            alongside: index_pages.Alongside | None = None) -> index_pages.PageIndex | None:
    """The index from session.db's pages where they are ``conn``'s snapshot, else None."""
    mapped = page_tables.map_snapshot(path, conn)
    if mapped is None:
        return None
    try:
        return index_pages.read_index(mapped, conn, keys=keys, alongside=alongside)
    finally:
        mapped.close()


def both_ways(path: Path) -> tuple[index_pages.PageIndex | None, tuple[dict, dict]]:
    conn = db.connect_readonly(path)
    try:
        conn.execute("BEGIN")
        return scanned(path, conn, keys=True), by_sql(path, conn)
    finally:
        conn.close()


def assert_same(got: index_pages.PageIndex, want: tuple[dict, dict]) -> None:
    for mine, theirs in ((got.bodies, want[0]), (got.keys, want[1])):
        assert sorted(mine) == sorted(theirs)
        for name, array in theirs.items():
            assert mine[name].dtype == array.dtype and mine[name].shape == array.shape, name
            assert np.array_equal(mine[name], array), name


def edit(path: Path, *statements: str, loosen: tuple[str, ...] = ()) -> None:
    """Statements past the schema's CHECKs; ``loosen`` drops NOT NULL from those columns of
    event_body_blobs first (a hostile writer is bound by neither)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if loosen:
            [ddl] = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'event_body_blobs'").fetchone()
            for column in loosen:
                ddl = re.sub(rf"(\b{column} (?:TEXT|INTEGER)) NOT NULL", r"\1", ddl, count=1)
            version = conn.execute("PRAGMA schema_version").fetchone()[0]
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'event_body_blobs'", (ddl,))
            conn.execute(f"PRAGMA schema_version = {version + 1}")
            conn.execute("PRAGMA writable_schema = OFF")
        conn.execute("PRAGMA ignore_check_constraints = ON")
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


@pytest.mark.parametrize("mix", MIXES)
def test_a_sample_of_every_mix_reads_from_its_pages_as_sql_reads_it(mix: str, tmp_path: Path) -> None:
    write_sample_ledger(tmp_path / mix, seed=7, mix=mix, bodies=300 if mix != "large" else 30)
    got, want = both_ways(tmp_path / mix / "session.db")
    assert got is not None and len(got.bodies["id"]) > 0
    assert_same(got, want)


FIRST = "(SELECT MIN(id) FROM event_body_blobs)"
LAST = "(SELECT MAX(id) FROM event_body_blobs)"
HOSTILE = {
    "hash_upper_case": [f"UPDATE event_body_blobs SET body_hash = upper(body_hash) WHERE id = {FIRST}"],
    "hash_short": [f"UPDATE event_body_blobs SET body_hash = 'blake3:00' WHERE id = {FIRST}"],
    "hash_a_blob": [f"UPDATE event_body_blobs SET body_hash = CAST(body_hash AS BLOB) WHERE id = {FIRST}"],
    "hash_an_integer": [f"UPDATE event_body_blobs SET body_hash = 7 WHERE id = {LAST}"],   # stored as the text "7"
    "content_type_null": [f"UPDATE event_body_blobs SET content_type = NULL WHERE id = {FIRST}"],
    "content_type_on_overflow_pages": [f"UPDATE event_body_blobs SET content_type = printf('%.*c', 20000, 'x') "
                                       f"WHERE id = {FIRST}"],
    "texts_not_utf8": [f"UPDATE event_body_blobs SET direction = CAST(x'fffe41' AS TEXT) WHERE id = {FIRST}"],
    "rowids_out_of_archive_order": [f"UPDATE event_body_blobs SET id = 1000000 WHERE id = {FIRST}"],
    "rows_deleted": ["DELETE FROM event_body_blobs WHERE id % 3 = 0"],
}
NULLS = {
    "span_null": (("block_offset", "body_len"), [f"UPDATE event_body_blobs SET block_offset = NULL WHERE id = {FIRST}",
                                                 f"UPDATE event_body_blobs SET body_len = NULL WHERE id = {LAST}"]),
    "hash_null": (("body_hash",), [f"UPDATE event_body_blobs SET body_hash = NULL WHERE id = {FIRST}"]),
    "key_null": (("event_id", "original_bytes", "truncated"),
                 [f"UPDATE event_body_blobs SET event_id = NULL, original_bytes = NULL, truncated = NULL "
                  f"WHERE id = {FIRST}"]),
}


CONVERTED = {   # values the SQL scans convert on the way out: the pages leave them to it
    "span_a_text": [f"UPDATE event_body_blobs SET block_offset = 'sixteen' WHERE id = {FIRST}"],
    "span_a_real": [f"UPDATE event_body_blobs SET body_offset = 2.5 WHERE id = {FIRST}"],
    "key_a_blob": [f"UPDATE event_body_blobs SET content_type = x'74657874' WHERE id = {FIRST}",
                   f"UPDATE event_body_blobs SET event_id = x'00' WHERE id = {LAST}"],
}


@pytest.mark.parametrize("name", sorted({**HOSTILE, **NULLS, **CONVERTED}))
def test_each_hostile_value_reads_from_the_pages_as_sql_reads_it_or_is_left_to_sql(name: str, ledger: Path) -> None:
    loosen, statements = NULLS[name] if name in NULLS else ((), {**HOSTILE, **CONVERTED}[name])
    edit(ledger, *statements, loosen=loosen)
    got, want = both_ways(ledger)
    if name in CONVERTED:
        assert got is None
        return
    assert got is not None
    assert_same(got, want)
    # A body_hash that is not a TEXT, or a NULL span: the row is one the index cannot use.
    assert want[1]["row_ok"].all() == (name not in {"hash_a_blob", "hash_null", "span_null"})


def test_a_damaged_tree_leaves_the_scan_to_sql(ledger: Path) -> None:
    conn = sqlite3.connect(ledger)
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'event_body_blobs'").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(ledger, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\x07")   # no b-tree page type
    conn = db.connect_readonly(ledger)
    try:
        conn.execute("BEGIN")
        assert scanned(ledger, conn, keys=True) is None
    finally:
        conn.close()


def test_a_wal_holding_frames_leaves_the_scan_to_sql_and_its_rows_are_read(ledger: Path) -> None:
    writer = sqlite3.connect(ledger, isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("PRAGMA ignore_check_constraints = ON")
    writer.execute("INSERT INTO event_body_blobs (event_id, event_type, source_table, direction, original_bytes, "
                   "stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, created_at) "
                   "SELECT 'aaaaaaaaaaaa', event_type, source_table, direction, 1, 1, 0, body_hash, block_offset, "
                   f"0, 1, created_at FROM event_body_blobs WHERE id = {FIRST}")
    try:
        conn = db.connect_readonly(ledger)
        conn.execute("BEGIN")
        assert page_tables.map_snapshot(ledger, conn) is None
        assert scanned(ledger, conn, keys=True) is None
        rows = index.scan_bodies(ledger, conn=conn)
        assert len(rows["id"]) == conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0]
        conn.close()
    finally:
        writer.close()


def test_outside_a_read_transaction_the_scan_is_sqls(ledger: Path) -> None:
    conn = db.connect_readonly(ledger)
    try:
        assert scanned(ledger, conn, keys=False) is None
    finally:
        conn.close()


def test_the_ledgers_index_is_the_same_read_either_way(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edit(ledger, *HOSTILE["hash_upper_case"], *HOSTILE["content_type_on_overflow_pages"])
    with Ledger(ledger) as opened:
        from_pages = opened.index(threads=1)
        from_pages_batch = opened.read_bodies(errors="report")
    monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", "0")
    with Ledger(ledger) as opened:
        from_sql = opened.index(threads=1)
        from_sql_batch = opened.read_bodies(errors="report")
    assert len(from_pages) == len(from_sql) > 0
    for name in ("id", "block_offset", "body_offset", "body_len", "digest", "hash_ok", "row_ok", "original_bytes",
                 "truncated"):
        assert np.array_equal(getattr(from_pages, name), getattr(from_sql, name)), name
    for name in ("event_id", "source_table", "direction", "content_type"):
        assert getattr(from_pages, name).tolist() == getattr(from_sql, name).tolist(), name
    assert bytes(from_pages_batch) == bytes(from_sql_batch)
    assert [f.message for f in from_pages_batch.findings] == [f.message for f in from_sql_batch.findings]


def test_columns_read_alongside_are_the_codes_a_scan_of_their_own_gives(ledger: Path) -> None:
    conn = db.connect_readonly(ledger)
    mapped = _pages.PageFile(ledger)
    try:
        conn.execute("BEGIN")
        names = _pages.Codes(11)
        alongside = index_pages.Alongside({"trace_id": names, "turn_id": names})
        got = index_pages.read_index(mapped, conn, keys=False, alongside=alongside)
        plain = index_pages.read_index(mapped, conn, keys=False)
        assert got is not None and plain is not None
        for name, array in plain.bodies.items():
            assert np.array_equal(got.bodies[name], array), name
        own = _pages.Codes(12)
        columns = page_tables.record_columns(conn, "event_body_blobs", ["trace_id", "turn_id"], ())
        assert columns is not None
        alone = mapped.records(page_tables.root_page(conn, "event_body_blobs"), [(c, own) for c, _n in columns])
        assert alongside.rows == alone.rows and alongside.odd == frozenset()
        for (_c, name), codes in zip(columns, alone.values):
            # Both number texts in order of first appearance: equal codes, equal texts.
            assert np.array_equal(alongside.columns[name], codes), name
    finally:
        mapped.close()
        conn.close()


def test_columns_alongside_that_are_not_plain_text_are_not_read(ledger: Path) -> None:
    conn = sqlite3.connect(ledger, isolation_level=None)
    [ddl] = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'event_body_blobs'").fetchone()
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'event_body_blobs'",
                 (ddl.replace("trace_id TEXT", "trace_id TEXT COLLATE NOCASE", 1),))
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.close()
    reader = db.connect_readonly(ledger)
    try:
        reader.execute("BEGIN")
        names = _pages.Codes(3)
        alongside = index_pages.Alongside({"trace_id": names, "turn_id": names})
        got = scanned(ledger, reader, keys=False, alongside=alongside)
        assert got is not None and alongside.rows is None and alongside.columns == {}
    finally:
        reader.close()


def test_a_ledgers_verify_reads_its_index_from_the_pages_with_the_same_faults(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with sqlite3.connect(ledger) as conn:
        block = conn.execute("SELECT MIN(block_offset) FROM body_blocks").fetchone()[0]
    with open(ledger.with_suffix(".bodies"), "r+b") as f:   # one payload byte of the first block
        f.seek(block + 8 + 52 + 40)
        byte = f.read(1)
        f.seek(block + 8 + 52 + 40)
        f.write(bytes([byte[0] ^ 0x20]))
    with Ledger(ledger) as opened:
        monkeypatch.setattr(index._index, "scan_bodies", None)   # the SQL scan cannot run
        from_pages = opened.verify(threads=1)
    monkeypatch.undo()
    monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", "0")
    with Ledger(ledger) as opened:
        from_sql = opened.verify(threads=1)
    assert from_pages.faults and from_pages == from_sql


def test_a_ledger_maps_session_db_anew_when_a_checkpoint_has_grown_it(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Ledger(ledger) as opened:
        before = opened.index(threads=1)
        held = opened._pages.file
        writer = sqlite3.connect(ledger, isolation_level=None)
        writer.execute("PRAGMA ignore_check_constraints = ON")
        columns = ("event_id, event_type, source_table, direction, content_type, original_bytes, stored_bytes, "
                   "truncated, body_hash, block_offset, body_offset, body_len, trace_id, turn_id, created_at")
        for _ in range(3):   # enough rows for new pages
            writer.execute(f"INSERT INTO event_body_blobs ({columns}) SELECT printf('%012x', abs(random()) % "
                           f"281474976710655), {columns.split(', ', 1)[1]} FROM event_body_blobs")
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        writer.close()
        after = opened.index(threads=1)
        assert opened._pages.file is not held   # the old map no longer covered the file
        monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", "0")
        by_sql = opened.index(threads=1)
    assert len(after) == 8 * len(before) == len(by_sql)
    for name in ("id", "block_offset", "body_offset", "body_len", "digest", "hash_ok", "row_ok"):
        assert np.array_equal(getattr(after, name), getattr(by_sql, name)), name
    assert after.event_id.tolist() == by_sql.event_id.tolist()
