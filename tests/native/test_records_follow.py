"""Scans of several trees in one pass (PageFile.records_of), the gate a scan follows behind a
read-ahead (StreamGate, PageFile.follow), and codes of one scan adopted by another's
(Codes.adopt), on real SQLite files. Waits are for a state (a scan seen waiting, a gate seen
closed), with a generous deadline, never for a time."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from capsem_core._native import _archive, _pages

DEADLINE_S = 60.0
TABLES = ("a", "b", "c")


def _until(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """Three tables written row by row in turn, so each one's pages are spread over the file
    among the others' (as a ledger's are), with texts shared across them; their roots."""
    path = tmp_path_factory.mktemp("follow") / "session.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size = 1024")
    for t in TABLES:
        conn.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, name TEXT, n INTEGER, pad TEXT)")
    conn.execute("BEGIN")
    for i in range(3000):
        for k, t in enumerate(TABLES):
            conn.execute(f"INSERT INTO {t} (name, n, pad) VALUES (?, ?, ?)",
                         (f"trace-{(i * 7 + k) % 250}", i * 3 + k, "x" * (i % 90)))
    conn.execute("COMMIT")
    roots = dict(conn.execute("SELECT name, rootpage FROM sqlite_schema WHERE type = 'table'").fetchall())
    conn.close()
    return path, {t: int(roots[t]) for t in TABLES}


def _texts(codes: _pages.Codes, values: np.ndarray) -> list[bytes | None]:
    return [codes.text(int(v)) for v in values]


def _expected(path: Path, table: str) -> tuple[list[bytes], list[int]]:
    conn = sqlite3.connect(path)
    rows = conn.execute(f"SELECT name, n FROM {table} ORDER BY id").fetchall()
    conn.close()
    return [r[0].encode() for r in rows], [r[1] for r in rows]


def test_trees_scanned_in_one_pass_read_what_each_scan_alone_reads(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    codes = _pages.Codes(7)
    pages = _pages.PageFile(path)
    try:
        got = pages.records_of([(roots[t], [(1, codes), (2, None)]) for t in TABLES])
        for t, records in zip(TABLES, got):
            names, numbers = _expected(path, t)
            assert records.status == "ok" and records.rows == len(names)
            assert _texts(codes, records.values[0]) == names
            assert records.values[1].tolist() == numbers
            assert records.odd == [0, 0]
    finally:
        pages.close()


def test_trees_of_one_pass_share_codes_equal_texts_one_code(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    codes = _pages.Codes(3)
    pages = _pages.PageFile(path)
    try:
        a, b, _c = pages.records_of([(roots[t], [(1, codes)]) for t in TABLES])
    finally:
        pages.close()
    by_text: dict[bytes | None, set[int]] = {}
    for values in (a.values[0], b.values[0]):
        for v in values.tolist():
            by_text.setdefault(codes.text(v), set()).add(v)
    assert all(len(v) == 1 for v in by_text.values()) and len(codes) == 250


def test_a_tree_that_cannot_be_read_ends_alone_the_others_are_read(interleaved, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    pages = _pages.PageFile(path)
    try:
        # A root past the file's last page is no tree at all.
        bad, good = pages.records_of([(pages.size // 1024 + 5, [(1, None)]), (roots["b"], [(2, None)])])
    finally:
        pages.close()
    assert bad.status == "unreadable" and bad.rows == 0
    assert good.status == "ok" and good.values[0].tolist() == _expected(path, "b")[1]


def test_more_trees_than_a_pass_takes_are_refused(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    pages = _pages.PageFile(path)
    try:
        with pytest.raises(ValueError, match="MAX_TREES"):
            pages.records_of([(roots["a"], [(2, None)])] * (_pages.MAX_TREES + 1))
        assert pages.records_of([]) == []
    finally:
        pages.close()


def test_adopted_codes_name_the_same_texts_and_new_ones_are_added(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    mine, theirs = _pages.Codes(1), _pages.Codes(2)
    assert mine.find("only-mine") == 0
    pages = _pages.PageFile(path)
    try:
        a = pages.records(roots["a"], [(1, mine)])
        b = pages.records(roots["b"], [(1, theirs)])
    finally:
        pages.close()
    before = len(mine)
    mapped = mine.adopt(theirs)
    assert mapped is not None and mapped[0] == 0 and len(mapped) == len(theirs) + 1
    # Every text of theirs now reads the same through its adopted code here.
    assert _texts(mine, mapped[b.values[0]]) == _texts(theirs, b.values[0])
    assert len(mine) >= before and set(_texts(mine, a.values[0])) <= set(_texts(mine, np.arange(1, len(mine) + 1)))
    assert mine.adopt(_pages.Codes(9)).tolist() == [0]   # nothing coded there: only NULL


class WaitingScan:
    """A records scan of ``root`` on a thread, following an open gate at 0, seen waiting at it;
    the gate is closed and the thread joined on the way out."""

    def __init__(self, path: Path, root: int) -> None:
        self.gate = _pages.StreamGate()
        self.pages = _pages.PageFile(path)
        self.pages.follow(self.gate)
        self.got: list[_pages.Records] = []
        self.thread = threading.Thread(target=lambda: self.got.append(self.pages.records(root, [(2, None)])))

    def __enter__(self) -> WaitingScan:
        self.thread.start()
        _until(lambda: self.gate.waits > 0, "the scan never waited at the gate")
        return self

    def ended(self) -> _pages.Records:
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive() and self.got, "the scan did not end"
        return self.got[0]

    def __exit__(self, *exc: object) -> None:
        self.gate.close()
        self.thread.join(DEADLINE_S)
        self.pages.close()


def test_a_scan_following_an_open_gate_waits_for_it_then_reads_everything(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    with WaitingScan(path, roots["c"]) as scan:
        assert not scan.got   # nothing of the file past the gate is read yet: the scan cannot end
        with pytest.raises(RuntimeError):
            scan.pages.follow(None)   # not while a scan runs
        scan.gate.advance(scan.pages.size // 2)
        scan.gate.advance(1)          # a gate never moves back
        assert scan.gate.passed == scan.pages.size // 2
        scan.gate.advance(scan.pages.size)
        got = scan.ended()
    assert got.status == "ok" and got.values[0].tolist() == _expected(path, "c")[1]


def test_a_scan_following_a_closed_gate_reads_at_once(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    gate = _pages.StreamGate()
    gate.close()
    pages = _pages.PageFile(path)
    try:
        pages.follow(gate)
        got = pages.records(roots["a"], [(2, None)])
        pages.follow(None)
    finally:
        pages.close()
    assert not gate.open and gate.waits == 0
    assert got.status == "ok" and got.values[0].tolist() == _expected(path, "a")[1]


def test_a_scan_waiting_at_a_gate_is_cancelled(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    with WaitingScan(path, roots["a"]) as scan:
        scan.pages.cancel()
        assert scan.ended().status == "cancelled"


@pytest.mark.parametrize("advice", [False, True], ids=["sendfile", "advice"])
def test_a_read_ahead_advances_the_gate_of_its_file_and_closes_it_when_done(interleaved, advice: bool) -> None:  # type: ignore[no-untyped-def]
    path, roots = interleaved
    gate = _pages.StreamGate()
    pages = _pages.PageFile(path)
    ahead = _archive.ReadAhead(1 << 40, advice_only=advice)
    try:
        pages.follow(gate)
        ahead.add(pages.fileno(), pages.size, gate.capsule())
        got = pages.records_of([(roots[t], [(2, None)]) for t in TABLES])
        _until(lambda: not gate.open, "the read-ahead never closed the gate of the file it read")
        assert gate.passed == pages.size
    finally:
        ahead.close()
        pages.close()
    assert [g.values[0].tolist() for g in got] == [_expected(path, t)[1] for t in TABLES]


def test_a_read_ahead_closes_the_gates_of_files_it_does_not_read_or_cannot_take(interleaved) -> None:  # type: ignore[no-untyped-def]
    path, _roots = interleaved
    over, never, refused = _pages.StreamGate(), _pages.StreamGate(), _pages.StreamGate()
    fd = os.open(path, os.O_RDONLY)
    ahead = _archive.ReadAhead(0)   # over its limit at the first chunk not cached
    try:
        ahead.add(fd, 1 << 40, over.capsule())   # a size past the file: no chunk of it is cached
        ahead.add(fd, 1 << 20, never.capsule())
        _until(lambda: not over.open, "a file over the limit left its gate open")
        with pytest.raises(OSError):
            ahead.add(-1, 1, refused.capsule())
        assert not refused.open
    finally:
        ahead.close()
        os.close(fd)
    assert not never.open and not over.open
