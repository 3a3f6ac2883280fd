"""The native row scan (PageFile.records, page_records.h) on real SQLite files: every row of
a table, in rowid order, each chosen column as SQLite stores it (texts as codes equal exactly
when the bytes are, integers as themselves), values of another kind counted, never guessed;
rows spilling into overflow chains and short records written before an ALTER TABLE read
right; any page size; and damaged or hostile trees end the scan with a status, never a crash
or an endless walk."""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capsem_core._native import _pages

TEXT_LIMIT = 4096   # CAPSEM_REC_MAX_TEXT: a longer text is not coded
INT64_MIN = -(2 ** 63)

values = st.one_of(
    st.none(),
    st.integers(min_value=INT64_MIN, max_value=2 ** 63 - 1),
    st.sampled_from([0, 1, -1, 127, 128, -129, 2 ** 31, INT64_MIN]),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["same", "same", "other", "", "é✓"]),
    st.binary(max_size=20),
    st.just("y" * (TEXT_LIMIT + 1)),
)
rows_st = st.lists(st.tuples(st.integers(min_value=0, max_value=9000), values, values), min_size=0, max_size=120)


def _table(path: Path, rows: list[tuple[int, object, object]], page_size: int, *, alter_after: int | None = None,
           extra: object = "late") -> int:
    """A table t (id, pad, a, b[, c]) whose columns keep each value's own kind (no declared
    type), pad pushing a and b onto overflow pages when long; the root page."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {page_size}")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, pad, a, b)")
    conn.execute("BEGIN")
    for i, (pad, a, b) in enumerate(rows):
        if alter_after is not None and i == alter_after:
            conn.execute("COMMIT")
            conn.execute("ALTER TABLE t ADD COLUMN c")
            conn.execute("BEGIN")
        conn.execute("INSERT INTO t (pad, a, b) VALUES (?, ?, ?)", ("p" * pad, a, b))
        if alter_after is not None and i >= alter_after:
            conn.execute("UPDATE t SET c = ? WHERE id = last_insert_rowid()", (extra,))
    conn.execute("COMMIT")
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 't'").fetchone()[0]
    conn.close()
    return int(root)


def _stored(path: Path, column: str) -> list[tuple[int, str, object]]:
    conn = sqlite3.connect(path)
    rows = conn.execute(f"SELECT id, typeof({column}), {column} FROM t ORDER BY id").fetchall()
    conn.close()
    return rows


def _example_table(tmp_path: Path, tag: str, rows: list[tuple[int, object, object]], page_size: int) -> tuple[Path, int]:
    """A fresh _table for one hypothesis example (the function-scoped tmp_path is shared by
    every example of a test): its path and root page."""
    db = tmp_path / f"{tag}{os.getpid()}-{len(rows)}-{page_size}.db"
    db.unlink(missing_ok=True)
    return db, _table(db, rows, page_size)


def _is_text(kind: str, value: object) -> bool:
    return kind == "text" and len(str(value).encode()) <= TEXT_LIMIT


def _check_texts(codes: _pages.Codes, got: np.ndarray, odd: int, stored: list[tuple[int, str, object]]) -> None:
    by_text: dict[str, int] = {}
    expected_odd = 0
    for code, (_id, kind, value) in zip(got.tolist(), stored):
        if kind == "null":
            assert code == 0
        elif _is_text(kind, value):
            assert code >= 1 and by_text.setdefault(str(value), code) == code
            assert codes.find(str(value)) == code
        else:
            assert code == 0
            expected_odd += 1
    assert len(set(by_text.values())) == len(by_text)   # different texts, different codes
    assert odd == expected_odd


def _check_integers(got: np.ndarray, odd: int, stored: list[tuple[int, str, object]]) -> None:
    expected_odd = 0
    for value, (_id, kind, stored_value) in zip(got.tolist(), stored):
        if kind == "integer" and stored_value != INT64_MIN:
            assert value == stored_value
        else:
            assert value == _pages.NULL_VALUE
            expected_odd += kind != "null"
    assert odd == expected_odd


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_st, page_size=st.sampled_from([512, 1024, 4096, 65536]))
def test_every_row_is_read_as_sqlite_stores_it(tmp_path: Path, rows: list, page_size: int) -> None:
    db, root = _example_table(tmp_path, "t", rows, page_size)
    codes = _pages.Codes(int.from_bytes(os.urandom(8), "little"))
    # a as text codes, b as integers; a second text column sharing the codes.
    got = _pages.PageFile(db).records(root, [(_pages.ROWID, None), (2, codes), (3, None)])
    assert got.status == "ok" and got.rows == len(rows)
    stored_a, stored_b = _stored(db, "a"), _stored(db, "b")
    assert got.values[0].tolist() == [r[0] for r in stored_a]
    _check_texts(codes, got.values[1], got.odd[1], stored_a)
    _check_integers(got.values[2], got.odd[2], stored_b)
    again = _pages.PageFile(db).records(root, [(3, codes)])
    _check_texts(codes, again.values[0], again.odd[0], stored_b)
    db.unlink()


HASH = "blake3:" + "0123456789abcdef" * 4
hashes = st.one_of(values, st.just(HASH), st.just(HASH.upper()), st.just(HASH[:-1] + "g"), st.just(HASH.encode()),
                   st.binary(min_size=32, max_size=32).map(lambda b: "blake3:" + b.hex()))
texts_rows = st.lists(st.tuples(st.integers(min_value=0, max_value=9000), hashes, values), min_size=0, max_size=80)


def _texts_of(got: _pages.Records, i: int) -> list[bytes | None]:
    starts, data = got.values[i], got.data[i]
    assert data is not None
    ends = np.append(starts[1:], 0)
    ends = np.where(ends < 0, -1 - ends, ends)
    ends[-1:] = len(data)
    return [None if start < 0 else bytes(data[start:end]) for start, end in zip(starts.tolist(), ends.tolist())]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=texts_rows, page_size=st.sampled_from([512, 4096, 65536]))
def test_texts_come_out_end_to_end_and_hashes_as_digests_as_sqlite_stores_them(
        tmp_path: Path, rows: list, page_size: int) -> None:
    db, root = _example_table(tmp_path, "h", rows, page_size)
    got = _pages.PageFile(db).records(root, [(2, _pages.DIGEST), (3, _pages.TEXT)])
    assert got.status == "ok" and got.rows == len(rows)
    assert got.data[0].shape == (len(rows), 32)
    for state, digest, (_id, kind, value) in zip(got.values[0].tolist(), got.data[0], _stored(db, "a")):
        good = kind == "text" and len(value) == 71 and value.startswith("blake3:") and \
            all(c in "0123456789abcdef" for c in value[7:])
        assert state == (1 if good else 0 if kind == "text" else -1)
        assert bytes(digest) == (bytes.fromhex(value[7:]) if good else bytes(32))
    stored = _stored(db, "b")
    if rows:
        assert _texts_of(got, 1) == [value.encode() if kind == "text" else None for _id, kind, value in stored]
    assert got.odd == [0, sum(kind not in ("text", "null") for _id, kind, _v in stored)]
    db.unlink()


EVENT_ID = "0123456789ab"
event_ids = st.one_of(values, st.just(EVENT_ID), st.just(EVENT_ID.upper()), st.just(EVENT_ID[:-1] + "g"),
                      st.just(EVENT_ID[:-1]), st.just(EVENT_ID + "0"), st.just(EVENT_ID.encode()),
                      st.integers(min_value=0, max_value=2 ** 48 - 1).map(lambda v: f"{v:012x}"))
event_rows = st.lists(st.tuples(st.integers(min_value=0, max_value=9000), event_ids, values), min_size=0, max_size=80)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=event_rows, page_size=st.sampled_from([512, 4096, 65536]))
def test_event_ids_come_out_as_their_48_bit_values_and_anything_else_is_odd(
        tmp_path: Path, rows: list, page_size: int) -> None:
    db, root = _example_table(tmp_path, "e", rows, page_size)
    got = _pages.PageFile(db).records(root, [(2, _pages.HEX)])
    assert got.status == "ok" and got.rows == len(rows)
    odd = 0
    for value, (_id, kind, stored) in zip(got.values[0].tolist(), _stored(db, "a")):
        event_id = kind == "text" and len(stored) == 12 and all(c in "0123456789abcdef" for c in stored)
        assert value == (int(stored, 16) if event_id else _pages.NULL_VALUE)
        odd += kind != "null" and not event_id
    assert got.odd == [odd]
    db.unlink()


@given(held=st.lists(st.integers(min_value=-2 ** 63, max_value=2 ** 63 - 1), max_size=60),
       wanted=st.lists(st.integers(min_value=-2 ** 63, max_value=2 ** 63 - 1), max_size=60),
       shared=st.lists(st.integers(min_value=-5, max_value=5), max_size=30))
def test_missing_sorted_counts_the_wanted_values_held_lacks(held: list[int], wanted: list[int],
                                                             shared: list[int]) -> None:
    pool = np.sort(np.array(held + shared, dtype=np.int64))
    keys = np.sort(np.array(wanted + shared[::2], dtype=np.int64))
    assert _pages.missing_sorted(pool, keys) == sum(k not in set(pool.tolist()) for k in keys.tolist())


@given(pairs=st.lists(st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=2)),
                      max_size=80))
def test_runs_keep_the_first_row_of_each_run_of_equal_pairs(pairs: list[tuple[int, int]]) -> None:
    first = np.array([a for a, _b in pairs], dtype=np.int64)
    second = np.array([b for _a, b in pairs], dtype=np.int64)
    kept = [p for i, p in enumerate(pairs) if i == 0 or p != pairs[i - 1]]
    a, b = _pages.runs(first, second)
    assert list(zip(a.tolist(), b.tolist())) == kept
    with pytest.raises(ValueError):
        _pages.runs(first, np.zeros(len(pairs) + 1, dtype=np.int64))


def test_a_column_kind_the_scan_does_not_know_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    root = _table(db, [(0, "a", 1)], 4096)
    with pytest.raises(ValueError):
        _pages.PageFile(db).records(root, [(2, "blob")])
    with pytest.raises(ValueError):
        _pages.PageFile(db).records(root, [(_pages.ROWID, _pages.TEXT)])


def test_values_on_overflow_pages_are_read_through_the_chain(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    rows = [(20000 + i, f"trace-{i % 7}", i) for i in range(300)]
    root = _table(db, rows, 1024)
    codes = _pages.Codes(7)
    got = _pages.PageFile(db).records(root, [(2, codes), (3, None)])
    assert got.status == "ok" and got.odd == [0, 0]
    assert got.values[1].tolist() == list(range(300))
    assert [codes.find(f"trace-{i % 7}") for i in range(300)] == got.values[0].tolist()
    assert len(codes) == 7


def test_rows_written_before_a_column_was_added_count_that_column_odd(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    root = _table(db, [(0, "a", i) for i in range(50)], 4096, alter_after=20, extra="late")
    codes = _pages.Codes(3)
    got = _pages.PageFile(db).records(root, [(2, codes), (4, codes)])
    assert got.status == "ok" and got.rows == 50
    assert got.odd == [0, 20]   # the default of a row written before ALTER TABLE is not read
    assert got.values[1].tolist() == [0] * 20 + [codes.find("late")] * 30


def test_equal_texts_get_one_code_across_tables_sharing_codes(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE x (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("CREATE TABLE y (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO x (v) VALUES (?)", [(f"id-{i}",) for i in range(500)])
    conn.executemany("INSERT INTO y (v) VALUES (?)", [(f"id-{i}",) for i in range(250, 750)])
    roots = dict(conn.execute("SELECT name, rootpage FROM sqlite_schema").fetchall())
    conn.close()
    codes = _pages.Codes(11)
    f = _pages.PageFile(db)
    x = f.records(roots["x"], [(1, codes)]).values[0]
    y = f.records(roots["y"], [(1, codes)]).values[0]
    assert len(codes) == 750
    assert np.array_equal(x[250:], y[:250]) and not np.intersect1d(x[:250], y[250:]).size


def test_each_code_gives_back_the_bytes_of_its_text(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    texts = ["a", "", "\u00e9t\u00e9", "x" * 33, "\u65e5\u672c" * 40, "a\x00b", "trace-1"]
    root = _table(db, [(i * 300, texts[i % len(texts)], i) for i in range(70)], 1024)   # some on overflow pages
    codes = _pages.Codes(13)
    got = _pages.PageFile(db).records(root, [(2, codes)])
    assert got.status == "ok" and len(codes) == len(texts)
    for text in texts:
        assert codes.text(codes.find(text)) == text.encode("utf-8")
    assert [codes.text(c) for c in got.values[0].tolist()] == [texts[i % len(texts)].encode() for i in range(70)]
    for nobody in (0, -1, len(codes) + 1, 1 << 40):
        assert codes.text(nobody) is None


def test_a_tree_that_is_not_a_rowid_table_is_unreadable(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE w (k TEXT PRIMARY KEY, v) WITHOUT ROWID")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("CREATE INDEX t_v ON t (v)")
    conn.executemany("INSERT INTO w VALUES (?, ?)", [(f"k{i}", i) for i in range(100)])
    conn.executemany("INSERT INTO t (v) VALUES (?)", [(f"v{i}",) for i in range(100)])
    roots = dict(conn.execute("SELECT name, rootpage FROM sqlite_schema").fetchall())
    conn.close()
    f = _pages.PageFile(db)
    for name in ("w", "t_v"):
        assert f.records(roots[name], [(0, None)]).status == "unreadable"
    assert f.records(0, [(0, None)]).status == "unreadable"
    assert f.records(10 ** 6, [(0, None)]).status == "unreadable"


def test_columns_out_of_order_or_too_many_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    root = _table(db, [(0, "a", 1)], 4096)
    f = _pages.PageFile(db)
    with pytest.raises(ValueError):
        f.records(root, [(3, None), (2, None)])
    with pytest.raises(ValueError):
        f.records(root, [(i, None) for i in range(_pages.MAX_COLUMNS + 1)])


def _interior_root(path: Path) -> tuple[int, int]:
    """A table big enough for an interior root; (root, page size)."""
    root = _table(path, [(200, f"v{i}", i) for i in range(3000)], 1024)
    data = path.read_bytes()
    assert data[(root - 1) * 1024] == 0x05
    return root, 1024


def test_a_child_pointing_back_at_its_parent_ends_the_scan_not_the_process(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    root, size = _interior_root(db)
    with open(db, "r+b") as fh:   # the root's right-most child: the root itself
        fh.seek((root - 1) * size + 8)
        fh.write(struct.pack(">I", root))
    assert _pages.PageFile(db).records(root, [(2, None)]).status == "unreadable"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hits=st.lists(st.tuples(st.integers(min_value=1024, max_value=10 ** 7), st.integers(0, 255)),
                     min_size=1, max_size=12))
def test_bytes_damaged_anywhere_in_the_tree_end_in_a_status(tmp_path: Path, hits: list[tuple[int, int]]) -> None:
    base = tmp_path / "base.db"
    if not base.exists():
        _interior_root(base)
    db = tmp_path / f"d{os.getpid()}.db"
    shutil.copyfile(base, db)
    root = int(sqlite3.connect(base).execute("SELECT rootpage FROM sqlite_schema WHERE name = 't'").fetchone()[0])
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        for offset, byte in hits:
            fh.seek(offset % size)
            fh.write(bytes([byte]))
    codes = _pages.Codes(5)
    mapped = _pages.PageFile(db)
    got = mapped.records(root, [(_pages.ROWID, None), (2, codes), (3, None)])
    assert got.status in ("ok", "unreadable")
    if got.status == "ok":
        assert all(len(v) == got.rows for v in got.values)
    raw = mapped.records(root, [(1, _pages.TEXT), (2, _pages.DIGEST), (3, _pages.TEXT)])
    assert raw.status in ("ok", "unreadable")
    if raw.status == "ok":
        assert raw.data[1].shape == (raw.rows, 32)
        for starts, data in ((raw.values[0], raw.data[0]), (raw.values[2], raw.data[2])):
            begun = np.where(starts < 0, -1 - starts, starts)
            assert (np.diff(begun) >= 0).all() and (begun <= len(data)).all()


def test_a_file_cut_short_under_the_map_shrank(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    root, size = _interior_root(db)
    f = _pages.PageFile(db)
    os.truncate(db, 2 * size)
    assert f.records(root, [(2, None)]).status == "shrank"


def test_a_cancelled_file_stops_its_scan(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    root, _size = _interior_root(db)
    f = _pages.PageFile(db)
    f.cancel()
    assert f.records(root, [(2, None)]).status == "cancelled"


def test_a_scan_keeps_the_file_open_until_it_ends_and_the_arrays_outlive_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    root = _table(db, [(0, "a", i) for i in range(2000)], 4096)
    f = _pages.PageFile(db)
    got = f.records(root, [(3, None)])
    f.close()
    del f
    assert got.values[0].tolist() == list(range(2000)) and got.values[0].flags.writeable
