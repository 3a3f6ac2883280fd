"""The native page map (capsem_core._native._pages) on real and hostile files: it opens only
regular files, bounds what it reads, survives a file cut short under its map, and stops when
cancelled."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from capsem_core._native import _pages


def _database(path: Path, rows: int = 2000) -> list[int]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size = 1024")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    conn.execute("CREATE INDEX t_v ON t (v)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t (v) VALUES (?)", [(f"value {i} " + "x" * (i % 1500),) for i in range(rows)])
    conn.execute("COMMIT")
    roots = [1] + [r[0] for r in conn.execute("SELECT rootpage FROM sqlite_schema WHERE rootpage > 0")]
    conn.close()
    return roots


def test_a_sound_file_has_every_page_owned_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    roots = _database(db)
    f = _pages.PageFile(db)
    header = f.header()
    assert header is not None and header["page_size"] == 1024
    walk = f.walk(roots)
    assert walk.findings == [] and walk.findings_total == 0 and not walk.cancelled
    assert walk.btree_pages + walk.overflow_pages + walk.freelist_pages == header["page_count"]
    assert walk.overflow_pages > 0 and sum(walk.tree_pages) == walk.btree_pages + walk.overflow_pages
    assert all(e > 0 for e in f.estimate(roots))


def test_a_forgotten_root_leaves_its_pages_never_used(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    roots = _database(db)
    walk = _pages.PageFile(db).walk(roots[:-1])
    assert walk.findings and all(f.kind == "never_used" for f in walk.findings)
    assert walk.findings_total >= len(walk.findings) and len(walk.findings) <= _pages.MAX_FINDINGS


def test_a_file_cut_short_under_the_map_is_reported_not_a_crash(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    roots = _database(db)
    f = _pages.PageFile(db)
    os.truncate(db, 4096)   # the map still spans the old size: reading past 4 KiB faults
    walk = f.walk(roots)
    assert [x.kind for x in walk.findings] == ["shrank"]


def test_hostile_root_numbers_are_refused_or_reported(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _database(db)
    f = _pages.PageFile(db)
    with pytest.raises(ValueError):
        f.walk([1, -1])
    with pytest.raises(ValueError):
        f.walk([1, 1 << 32])
    walk = f.walk([1, 0xFFFFFFFF, 1])
    kinds = {x.kind for x in walk.findings}
    assert {"invalid_reference", "second_reference"} <= kinds


def test_only_regular_files_are_opened(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _database(db, rows=10)
    link = tmp_path / "link.db"
    link.symlink_to(db)
    with pytest.raises(OSError, match="symbolic link"):
        _pages.PageFile(link)
    with pytest.raises(OSError, match="not a regular file"):
        _pages.PageFile(tmp_path)
    with pytest.raises(OSError):
        _pages.PageFile(tmp_path / "missing.db")


def test_a_file_that_is_not_sqlite_is_a_bad_header_finding(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    f = _pages.PageFile(junk)
    assert f.header() is None
    assert [x.kind for x in f.walk([1]).findings] == ["bad_header"]
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    assert [x.kind for x in _pages.PageFile(empty).walk([1]).findings] == ["bad_header"]


def test_a_walk_stops_when_cancelled_from_another_thread(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    roots = _database(db, rows=20000)
    f = _pages.PageFile(db)
    f.cancel()   # set before the walk starts: it stops at its first poll
    walk = f.walk(roots)
    assert walk.cancelled
    # A walk in progress refuses to be closed under it.
    g = _pages.PageFile(db)
    started = threading.Event()

    def run() -> None:
        started.set()
        g.walk(roots)

    t = threading.Thread(target=run)
    t.start()
    started.wait()
    g.cancel()
    t.join()
    g.close()
