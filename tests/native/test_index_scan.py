"""_index: body-index scans through the SQLite C API into numpy arrays."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import scans as _index
from capsem_core import errors
from capsem_core import format as fmt
from tests.native.test_verify_kernel import make_ledger


def _module_rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT id, block_offset, body_offset, body_len, body_hash FROM event_body_blobs "
                           "ORDER BY block_offset, body_offset, id").fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> Path:
    return make_ledger(tmp_path_factory.mktemp("ledger"), rows=400, seed=7)


def test_scan_bodies_returns_the_index_in_archive_order_with_decoded_digests(ledger):
    got = _index.scan_bodies(ledger)
    rows = _module_rows(ledger)
    assert len(rows) == got["id"].shape[0] > 0
    assert got["id"].tolist() == [r[0] for r in rows]
    assert got["block_offset"].tolist() == [r[1] for r in rows]
    assert got["body_offset"].tolist() == [r[2] for r in rows]
    assert got["body_len"].tolist() == [r[3] for r in rows]
    assert [fmt.body_hash_text(bytes(d)) for d in got["digest"]] == [r[4] for r in rows]
    assert got["hash_ok"].dtype == np.bool_ and got["hash_ok"].all()
    assert got["digest"].shape == (len(rows), 32) and got["digest"].dtype == np.uint8
    for key in ("id", "block_offset", "body_offset", "body_len"):
        assert got[key].dtype == np.int64


def test_scan_blocks_returns_body_blocks_by_offset(ledger):
    got = _index.scan_blocks(ledger)
    con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    rows = con.execute("SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset").fetchall()
    con.close()
    assert list(zip(*(got[k].tolist() for k in ("block_offset", "raw_len", "disk_len")))) == rows
    assert len(rows) > 1


@pytest.mark.parametrize("bad", [
    "blake3:" + "0" + "z" * 63,
    "blake3:" + "AB" * 32,
    "blake3:" + "ab" * 31 + "a ",
    "sha256:" + "ab" * 32,
    "blake3:" + "ab" * 33,
    "",
])
def test_a_malformed_body_hash_is_flagged_not_raised(tmp_path, bad):
    db = make_ledger(tmp_path, rows=5, seed=1)
    con = sqlite3.connect(db)
    con.execute("PRAGMA ignore_check_constraints = 1")  # hostile rows the schema would refuse
    victim = con.execute("SELECT id FROM event_body_blobs ORDER BY id LIMIT 1 OFFSET 2").fetchone()[0]
    con.execute("UPDATE event_body_blobs SET body_hash = ? WHERE id = ?", (bad, victim))
    con.commit()
    con.close()
    got = _index.scan_bodies(db)
    flagged = got["id"][~got["hash_ok"]].tolist()
    assert flagged == [victim]
    assert not got["digest"][~got["hash_ok"]].any()


def test_an_empty_index_gives_empty_arrays(tmp_path):
    db = make_ledger(tmp_path, rows=0, seed=1)
    got = _index.scan_bodies(db)
    assert got["id"].shape == (0,) and got["digest"].shape == (0, 32)
    assert _index.scan_blocks(db)["block_offset"].shape == (0,)


def test_sqlite_failures_are_ledger_errors_naming_the_file(tmp_path):
    with pytest.raises(errors.LedgerError, match="cannot open the body index: unable to open") as exc:
        _index.scan_bodies(tmp_path / "missing.db")
    assert exc.value.path == tmp_path / "missing.db"
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(errors.LedgerError, match="not a database") as exc:
        _index.scan_bodies(junk)
    assert exc.value.path == junk
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(errors.LedgerError, match="no such table: event_body_blobs"):
        _index.scan_bodies(empty)
    with pytest.raises(errors.LedgerError, match="no such table: body_blocks"):
        _index.scan_blocks(empty)


def test_a_scan_does_not_write_to_the_ledger(tmp_path):
    # (A WAL reader may create the -shm/-wal side files, as the sqlite3 module's does.)
    db = make_ledger(tmp_path, rows=20, seed=3)
    files = (db, db.with_suffix(".bodies"))
    before = [p.read_bytes() for p in files]
    _index.scan_bodies(db)
    _index.scan_blocks(db)
    assert [p.read_bytes() for p in files] == before


def test_one_libsqlite3_is_mapped_and_both_sides_report_the_same_version():
    code = (
        "import sqlite3\n"
        "from capsem_core._native import _index\n"
        "libs = {l.split()[-1] for l in open('/proc/self/maps') if 'libsqlite3' in l}\n"
        "print(len(libs), sqlite3.sqlite_version, _index.sqlite_version())\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert out[0] == "1"
    assert out[1] == out[2]


def test_rows_whose_rowid_order_differs_from_archive_order_come_back_in_archive_order(tmp_path):
    db = make_ledger(tmp_path, rows=30, seed=9)
    con = sqlite3.connect(db)
    # Move early rows' spans after later ones (as a row reusing an earlier span would be).
    con.execute("UPDATE event_body_blobs SET body_offset = body_offset + 100000 WHERE id % 3 = 0")
    con.commit()
    con.close()
    got = _index.scan_bodies(db)
    assert got["id"].tolist() == [r[0] for r in _module_rows(db)]
    assert [fmt.body_hash_text(bytes(d)) for d in got["digest"]] == [r[4] for r in _module_rows(db)]


def _same_arrays(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


@pytest.fixture
def ranges_of_any_size(monkeypatch):
    # Split even a small index into ranges (the default keeps 32k rows per range).
    monkeypatch.setattr(_index, "PARALLEL_MIN_ROWS", 1)


def _edit(db: Path, *statements: str) -> None:
    con = sqlite3.connect(db)
    con.execute("PRAGMA ignore_check_constraints = 1")  # hostile rows the schema would refuse
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()


def _every_split_agrees(db: Path, threads: tuple[int, ...] = (2, 3, 7, 16, 64)) -> dict:
    """The one-connection scan (checked against the sqlite3 module), equal to every split."""
    one = _index.scan_bodies(db, threads=1)
    assert one["id"].tolist() == [r[0] for r in _module_rows(db)]
    for n in threads:
        _same_arrays(_index.scan_bodies(db, threads=n), one)
    return one


def test_a_scan_split_into_rowid_ranges_returns_the_same_arrays_as_one_connection(tmp_path, ranges_of_any_size):
    db = make_ledger(tmp_path, rows=60, seed=11)
    _edit(db, "UPDATE event_body_blobs SET body_offset = body_offset + 100000 WHERE id % 4 = 1")
    _every_split_agrees(db)


def test_rows_deleted_between_others_leave_no_empty_slots_in_a_split_scan(tmp_path, ranges_of_any_size):
    db = make_ledger(tmp_path, rows=60, seed=14)
    _edit(db, "DELETE FROM event_body_blobs WHERE id % 3 = 0 OR id BETWEEN 40 AND 55")
    _every_split_agrees(db)


def test_sparse_and_negative_rowids_still_come_back_whole(tmp_path, ranges_of_any_size):
    # Rowids far apart (a hostile or hand-edited index): the arrays are sized by the row
    # count, never by the rowid span.
    db = make_ledger(tmp_path, rows=10, seed=12)
    con = sqlite3.connect(db)
    ids = [r[0] for r in con.execute("SELECT id FROM event_body_blobs ORDER BY id")]
    con.close()
    _edit(db, *(f"UPDATE event_body_blobs SET id = {new} WHERE id = {old}"
                for new, old in zip([-(1 << 62), -3, 1000, 1 << 40, (1 << 63) - 1], ids)),
          f"DELETE FROM event_body_blobs WHERE id = {ids[7]}")
    _every_split_agrees(db)


def test_malformed_body_hashes_are_flagged_the_same_in_every_range(tmp_path, ranges_of_any_size):
    db = make_ledger(tmp_path, rows=20, seed=13)
    _edit(db, "UPDATE event_body_blobs SET body_hash = upper(body_hash) WHERE id % 5 = 0",
          "UPDATE event_body_blobs SET body_hash = CAST(body_hash AS BLOB) WHERE id % 7 = 0",
          "UPDATE event_body_blobs SET body_hash = 12 WHERE id % 11 = 0")
    one = _every_split_agrees(db, (2, 5))
    bad = {r[0] for r in _module_rows(db) if not (isinstance(r[4], str) and re.fullmatch("blake3:[0-9a-f]{64}", r[4]))}
    assert set(one["id"][~one["hash_ok"]].tolist()) == bad and bad


@pytest.mark.parametrize("text,ok", [
    ("blake3:" + "0123456789abcdef" * 4, True),
    ("blake3:" + "0123456789abcdeF" * 4, False),
    ("blake3:" + "0123456789abcdeg" * 4, False),
    ("blake3:" + "/:`g" * 16, False),
    ("blake3:" + "\x00" * 64, False),
    ("blake3:" + "ff" * 31 + "f\xff", False),
])
def test_body_hash_decoding_takes_lower_case_hex_pairs_only(text, ok):
    got = _index.parse_body_hash(text.encode("latin-1"))
    assert (got is not None) == ok
    if ok:
        assert got == bytes.fromhex(text[7:])


def test_every_byte_value_at_every_digit_position_decodes_or_is_refused_like_the_rule():
    base = bytes.fromhex("00112233445566778899aabbccddeeff" * 2).hex().encode()
    lower_hex = set(b"0123456789abcdef")
    for position in range(64):
        for value in range(256):
            text = b"blake3:" + base[:position] + bytes([value]) + base[position + 1:]
            got = _index.parse_body_hash(text)
            if value in lower_hex:
                assert got == bytes.fromhex(text[7:].decode()), (position, value)
            else:
                assert got is None, (position, value)


def test_a_split_scan_bounds_ranges_by_rowid_even_when_id_is_not_the_rowid(tmp_path, ranges_of_any_size):
    # A hostile session.db whose id column is a plain INTEGER (not the rowid's alias), with
    # ids far from the rowids and repeated: ranges are cut by rowid, so they must be read by
    # rowid, or rows are dropped (ids outside the rowid bounds, more ids in a range than it
    # has slots).
    db = tmp_path / "session.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE event_body_blobs (id INTEGER, body_hash TEXT, block_offset INTEGER,"
                " body_offset INTEGER, body_len INTEGER)")
    con.executemany("INSERT INTO event_body_blobs VALUES (?, ?, 16, ?, 1)",
                    [(5 if k % 2 else (1 << 40) + k, "blake3:" + "ab" * 32, k) for k in range(40)])
    con.commit()
    con.close()
    for n in (1, 2, 5):
        got = _index.scan_bodies(db, threads=n)
        assert sorted(got["body_offset"].tolist()) == list(range(40)), n


@pytest.mark.parametrize("shadow", ["rowid", "_rowid_", "oid", "ROWID"])
def test_a_column_named_like_the_rowid_never_hides_rows_from_a_split_scan(tmp_path, ranges_of_any_size, shadow):
    # A hostile index may declare a column called rowid (or one of its other names): in SQL
    # that name then means the column, not the rowid the ranges are cut by. Every row must
    # still be read, whatever that column holds.
    db = tmp_path / "session.db"
    con = sqlite3.connect(db)
    con.execute(f"CREATE TABLE event_body_blobs (id INTEGER PRIMARY KEY, {shadow} INTEGER, body_hash TEXT,"
                " block_offset INTEGER, body_offset INTEGER, body_len INTEGER)")
    con.executemany(f"INSERT INTO event_body_blobs (id, {shadow}, body_hash, block_offset, body_offset, body_len)"
                    " VALUES (?, 7, ?, 16, ?, 1)", [(k + 1, "blake3:" + "ab" * 32, k) for k in range(40)])
    con.commit()
    con.close()
    for n in (1, 2, 5):
        got = _index.scan_bodies(db, threads=n)
        assert sorted(got["body_offset"].tolist()) == list(range(40)), n
