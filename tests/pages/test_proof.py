"""The page map proves a table sound only where SQLite's per-table quick_check would pass it.

A table the page map proves needs no ``PRAGMA quick_check(TABLE)`` of its own
(``capsem_core.pages.check.proved``). The one thing that may never happen is a proof where
SQLite, on a read-only connection as the check opens session.db, finds anything. So damaged
copies of a small database with every kind of column the rules know (NOT NULL, each
affinity, the rowid's alias, overflowing rows, freeblocks left by deletes) are judged both
ways, table by table; and the tests SQLite makes of rows (NULL, a value of the wrong kind) and
of pages are shown one at a time, each worded by SQLite in the report. Tables the rules do
not cover (STRICT, WITHOUT ROWID, a generated column, more than 64 columns) and auto-vacuum
files are always left to SQLite.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from capsem_core.check import check_ledger
from capsem_core.check.run import check_pages
from capsem_core.pages import check as page_check
from capsem_core._native import _pages
from capsem_core.sample import write_sample_ledger

PAGE_SIZE = 1024
CASES = 700


def _build(path: Path, seed: int, *, vacuum: bool = False) -> None:
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    if vacuum:
        conn.execute("PRAGMA auto_vacuum = FULL")
    conn.execute("CREATE TABLE t1 (id INTEGER PRIMARY KEY, a TEXT NOT NULL, b INTEGER, c BLOB NOT NULL, "
                 "d VARCHAR(9), e REAL, f NUMERIC, g)")
    conn.execute("CREATE INDEX t1_a ON t1 (a)")
    conn.execute("CREATE INDEX t1_bd ON t1 (b, d)")
    conn.execute("CREATE TABLE t2 (x TEXT NOT NULL UNIQUE, y REAL)")
    conn.execute("CREATE TABLE t3 (id INTEGER PRIMARY KEY AUTOINCREMENT, big BLOB NOT NULL, note TEXT)")
    conn.execute("BEGIN")
    for i in range(rng.randint(150, 300)):
        conn.execute("INSERT INTO t1 (a, b, c, d, e, f, g) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (rng.randbytes(rng.randint(1, 30)).hex(), rng.choice([None, rng.randint(-10**12, 10**12)]),
                      rng.randbytes(rng.randint(0, 200)), rng.choice([None, "d" * rng.randint(0, 40)]),
                      rng.random(), rng.choice([None, 7, 2.5]), rng.choice([None, 1, "g", b"g"])))
        conn.execute("INSERT INTO t2 VALUES (?, ?)", (f"key {i} {rng.random()}", rng.random()))
        if i % 6 == 0:
            conn.execute("INSERT INTO t3 (big, note) VALUES (?, ?)", (rng.randbytes(rng.randint(900, 4000)), None))
    conn.execute("COMMIT")
    conn.execute("DELETE FROM t1 WHERE id % 5 = 0")
    conn.execute("DELETE FROM t3 WHERE id % 4 = 0")
    conn.close()


def _proved(db: Path) -> set[str]:
    """The tables the page map proves, as the check reads the file."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        schema = page_check.read_schema(conn)
    finally:
        conn.close()
    pages = _pages.PageFile(db)
    try:
        walk = page_check.walk(pages, schema)
    finally:
        pages.close()
    return {t for t in schema.tables if page_check.proved(walk, schema, t)}


def _sqlite_lines(db: Path, table: str) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return page_check.quick_check_lines(conn, table)
    finally:
        conn.close()


def _schema_reads(db: Path) -> bool:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        page_check.read_schema(conn)
        return True
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return False   # the check reports that first, before any table's check
    finally:
        conn.close()


def _cell_starts(page: bytes, number: int) -> list[int]:
    hdr = 100 if number == 1 else 0
    if page[hdr] not in (2, 5, 10, 13):
        return []
    count = struct.unpack_from(">H", page, hdr + 3)[0]
    pointers = hdr + (8 if page[hdr] & 8 else 12)
    return [struct.unpack_from(">H", page, pointers + 2 * i)[0] for i in range(min(count, 200))
            if pointers + 2 * i + 2 <= len(page)]


def _damage(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    number = rng.randint(1, len(data) // PAGE_SIZE)
    base = (number - 1) * PAGE_SIZE
    hdr = 100 if number == 1 else 0
    how = rng.random()
    if how < 0.3:        # the page header: type, freeblock, cell count, content start, fragments
        out[base + hdr + rng.randrange(12)] = rng.randrange(256)
    elif how < 0.5:      # the cell pointer array
        out[base + hdr + 8 + rng.randrange(48)] = rng.randrange(256)
    elif how < 0.75:     # the first bytes of a cell: sizes, rowid, record header
        starts = [s for s in _cell_starts(bytes(out[base:base + PAGE_SIZE]), number) if s < PAGE_SIZE - 12]
        if starts:
            at = base + rng.choice(starts) + rng.randrange(12)
            out[at] = rng.choice([0, 1, 7, 10, 11, 12, 13, 0x81, rng.randrange(256)])
    elif how < 0.9:      # one bit anywhere
        out[base + rng.randrange(PAGE_SIZE)] ^= 1 << rng.randrange(8)
    else:                # a run of zeros
        at = base + rng.randrange(PAGE_SIZE)
        out[at:at + rng.randint(1, 16)] = bytes(min(16, len(out) - at))[:len(out[at:at + 16])]
    return bytes(out)


def test_a_table_is_proved_only_where_sqlite_s_own_check_passes_it(tmp_path: Path) -> None:
    base = tmp_path / "base.db"
    _build(base, 1)
    tables = {"t1", "t2", "t3", "sqlite_sequence"}
    assert _proved(base) == tables   # the proof engages on a sound file, or the test proves nothing
    data = base.read_bytes()
    rng = random.Random(20261206)
    wrong, caught, proved = [], 0, 0
    for case in range(CASES):
        db = tmp_path / "case.db"
        db.write_bytes(_damage(rng, data))
        if not _schema_reads(db):
            continue
        for table in sorted(_proved(db)):
            proved += 1
            lines = _sqlite_lines(db, table)
            if lines != ["ok"]:
                keep = tmp_path / f"wrong-{case}-{table}.db"
                shutil.copy(db, keep)
                wrong.append(f"case {case}: {table} proved, quick_check says {lines[:2]} ({keep})")
        caught += sum(1 for t in tables - _proved(db) if _sqlite_lines(db, t) != ["ok"])
    assert wrong == [], "\n".join(wrong)
    # Damage that quick_check finds, and proofs of the tables it left alone, in numbers.
    assert caught >= 150 and proved >= 1000, (caught, proved)


def _edit_schema(db: Path, table: str, sql: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = ?", (sql, table))
    conn.close()


@pytest.mark.parametrize(("declared", "value", "words"), [
    ("a TEXT NOT NULL", None, "NULL value in t.a"),
    ("a TEXT", 12, "NUMERIC value in t.a"),
    ("a INTEGER", "12", "TEXT value in t.a"),
])
def test_a_row_sqlite_faults_is_left_to_sqlite_which_words_it(tmp_path: Path, declared: str, value: object,
                                                             words: str) -> None:
    db = tmp_path / "session.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a)")
    conn.executemany("INSERT INTO t (a) VALUES (?)", [("fine",)] * 50 + [(value,)] + [("fine",)] * 50)
    conn.close()
    _edit_schema(db, "t", f"CREATE TABLE t (id INTEGER PRIMARY KEY, {declared})")
    assert "t" not in _proved(db)
    result = check_pages(db, threads=2)
    assert result.counts["damaged"] is True and result.counts["tables_proved"] == 0
    assert any(words in f.message for f in result.findings), [f.message for f in result.findings]


def test_a_sample_ledger_s_tables_are_all_proved_and_none_read_again_by_sqlite(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    write_sample_ledger(directory)
    db = directory / "session.db"
    report = check_ledger(db)
    pages = report.checks["pages"].counts
    assert report.sound and pages["damaged"] is False
    # Every table but sqlite_schema, whose check also words the freelist.
    assert pages["tables_proved"] == pages["tables_checked"] - 1 > 10


@pytest.mark.parametrize("create", [
    "CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL) STRICT",
    "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL, w TEXT AS (v || 'x') STORED)",
    "CREATE TABLE t (id INTEGER PRIMARY KEY, " + ", ".join(f"c{i} TEXT" for i in range(64)) + ")",
])
def test_tables_the_rules_do_not_cover_are_checked_by_sqlite(tmp_path: Path, create: str) -> None:
    db = tmp_path / "session.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(create)
    conn.execute("CREATE TABLE plain (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    conn.executemany("INSERT INTO plain (v) VALUES (?)", [("x",)] * 20)
    conn.close()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        schema = page_check.read_schema(conn)
    finally:
        conn.close()
    # Only "plain" goes to the page map (t and sqlite_schema straight to SQLite), and only it is proved.
    assert page_check.provable(schema) == {"plain"}
    assert _proved(db) == {"plain"}
    result = check_pages(db, threads=1)
    assert result.counts["damaged"] is False and result.counts["tables_proved"] == 1


def test_a_schema_without_rules_leaves_every_table_to_sqlite() -> None:
    schema = page_check.Schema(("t",), (1, 2), {1: "table sqlite_schema", 2: "table t"}, ("sqlite_schema", "t"))
    assert page_check.provable(schema) == frozenset()
    ruled = schema._replace(rules=(None, (2, 0, 0, 0, 0)))   # t: a table of two columns, no constraint
    assert page_check.provable(ruled) == {"t"}


def test_an_auto_vacuum_file_is_left_to_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "session.db"
    _build(db, 3, vacuum=True)
    assert _proved(db) == set()
    assert check_pages(db, threads=2).counts["tables_proved"] == 0


def _leaf_of(db: Path, table: str) -> tuple[bytearray, int]:
    """The file's bytes and the offset of a leaf page of ``table`` holding several rows."""
    conn = sqlite3.connect(db)
    pages = [p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' "
                                        "ORDER BY pageno", (table,))]
    conn.close()
    data = bytearray(db.read_bytes())
    for page in pages:
        base = (page - 1) * PAGE_SIZE
        if struct.unpack_from(">H", data, base + 3)[0] >= 3:
            return data, base
    raise AssertionError("no leaf with three rows")


def test_an_interior_key_below_its_child_s_rows_is_not_proved(tmp_path: Path) -> None:
    db = tmp_path / "base.db"
    _build(db, 5)
    conn = sqlite3.connect(db)
    (page,) = conn.execute("SELECT pageno FROM dbstat WHERE name = 't2' AND pagetype = 'internal' "
                           "ORDER BY pageno").fetchone()
    conn.close()
    data = bytearray(db.read_bytes())
    base = (page - 1) * PAGE_SIZE
    cell = base + struct.unpack_from(">H", data, base + 12)[0] + 4   # cell 0's key, after its child
    length = next(i + 1 for i in range(9) if data[cell + i] < 0x80)
    data[cell:cell + length] = bytes([0x80] * (length - 1) + [0x01])  # the key 1, in as many bytes
    copy = tmp_path / "key.db"
    copy.write_bytes(bytes(data))
    assert "t2" not in _proved(copy)
    assert any("out of order" in line for line in _sqlite_lines(copy, "t2"))


def test_rows_out_of_order_and_a_wrong_fragment_count_are_not_proved(tmp_path: Path) -> None:
    db = tmp_path / "base.db"
    _build(db, 4)
    for damage in ("swap", "fragments"):
        data, base = _leaf_of(db, "t2")
        if damage == "swap":   # the first two cell pointers swapped: rowids out of order
            a, b = data[base + 8:base + 10], data[base + 10:base + 12]
            data[base + 8:base + 10], data[base + 10:base + 12] = b, a
        else:
            data[base + 7] += 1
        copy = tmp_path / f"{damage}.db"
        copy.write_bytes(bytes(data))
        assert "t2" not in _proved(copy), damage
        assert _sqlite_lines(copy, "t2") != ["ok"], damage
