"""Pages of events over huge rows: a page's reads stop at a byte budget whatever the rows hold,
reads cut by bytes still deliver every row once and in time order, and a row holding a value too
large for a page ends the pages before it, the page that reaches it failing with its name."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core.errors import LedgerError
from capsem_core.events import reader as R
from capsem_core.ledger import Ledger
from capsem_core.writer import LedgerWriter
from tests.events.ledgers import event_id, write_mixed

MiB = 1 << 20
PATHS = [pytest.param("1", id="pages"), pytest.param("0", id="statement")]


def _poke(directory: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(directory / "session.db")
    conn.execute(sql, params)
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")   # the file is the snapshot: the page path reads it
    conn.close()


def _huge_net_rows(directory: Path, count: int, size: int) -> None:
    """One net_events row by the writer, then ``count`` rows of ``size`` bytes each inserted raw."""
    with LedgerWriter(directory) as writer:
        writer.insert("net_events", {"event_id": "000000000001", "timestamp": "2026-01-01T00:00:00.000000Z",
                                     "domain": "a", "decision": "allowed"})
    conn = sqlite3.connect(directory / "session.db")
    for i in range(count):
        conn.execute("INSERT INTO net_events(event_id, timestamp, domain, decision, request_body_preview) "
                     "VALUES (?, ?, 'big', 'allowed', ?)", (f"{i + 2:012x}", f"2026-01-01T00:00:{i:02d}.000000Z",
                                                             "x" * size))
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


# A child reads one page and says how far it raised its peak resident size (VmHWM: the
# kernel's own peak, which no sample can miss) over what opening the ledger left.
_ONE_PAGE = """
import json, sys
from capsem_core import Ledger
from capsem_core.events import reader
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) << 10 for l in f if l.startswith("VmHWM:"))
reader.PAGE_BYTES = int(sys.argv[2])
with Ledger(sys.argv[1]) as ledger:
    ledger.events("net_events", limit=1)
    before = hwm()
    page = ledger.events("net_events", limit=1000)
    print(json.dumps({"events": len(page.events), "grown": hwm() - before}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize("page_scans", PATHS)
def test_a_page_reads_no_more_than_its_byte_budget_and_one_row_whatever_the_rows_hold(
        tmp_path: Path, page_scans: str) -> None:
    # 40 rows of 2 MiB under a 4 MiB page: the page holds three of them, and reads only those
    # (reading the 64 rows a first read asks for would cost 80 MiB twice over: copied, and
    # the map's pages).
    _huge_net_rows(tmp_path, 40, 2 * MiB)
    done = subprocess.run([sys.executable, "-c", _ONE_PAGE, str(tmp_path), str(4 * MiB)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "CAPSEM_CORE_PAGE_SCANS": page_scans})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["events"] == 3
    assert seen["grown"] < 40 * MiB, f"one page raised the peak by {seen['grown'] / MiB:.0f} MiB"


@pytest.mark.parametrize("page_scans", PATHS)
def test_reads_cut_by_bytes_deliver_every_row_once_in_time_order(tmp_path: Path, page_scans: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", page_scans)
    write_mixed(tmp_path, 300)
    # Rows of every size, so that a table's read stops at its share of the budget, the merge
    # takes it all and wants more, and the read is repeated with a larger budget.
    _poke(tmp_path, "UPDATE fs_events SET path = printf('%.*c', (id * 997) % 5000, 'p')")
    _poke(tmp_path, "UPDATE net_events SET domain = printf('%.*c', (id * 631) % 3000, 'd') WHERE id % 4 = 0")
    monkeypatch.setattr(R, "PAGE_BYTES", 10_000)
    order: list[str] = []
    pages = 0
    with Ledger(tmp_path) as ledger:
        after = "start"
        while True:
            page = ledger.events(after=after, limit=1000)
            order += [e.event_id for e in page.events]
            pages += 1
            after = page.cursor
            if page.caught_up:
                break
    assert order == [event_id(i) for i in range(300)]
    assert pages > 10   # the budget did cut the pages


@pytest.mark.parametrize("page_scans", PATHS)
@pytest.mark.parametrize("column, before", [
    pytest.param("path", 13, id="its-time-read"),
    # A time too large to read stands where the row before it in its table does.
    pytest.param("timestamp", 11, id="its-time-too-large"),
])
def test_a_row_too_large_for_a_page_ends_the_pages_before_it_and_the_next_fails_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page_scans: str, column: str, before: int) -> None:
    monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", page_scans)
    write_mixed(tmp_path, 30)
    # Row 5 of fs_events is the ledger's 14th event (rows round robin over three tables).
    _poke(tmp_path, f"UPDATE fs_events SET {column} = ? WHERE id = 5", ("x" * (2 * MiB),))
    monkeypatch.setattr(R, "ROW_BYTES", MiB)
    delivered: list[str] = []
    after = "start"
    with Ledger(tmp_path) as ledger:
        with pytest.raises(LedgerError, match="row 5 of fs_events holds a value larger than the 1 MiB an events "
                                              "page takes") as caught:
            while True:
                page = ledger.events(after=after, limit=4)
                delivered += [e.event_id for e in page.events]
                after = page.cursor
                assert not page.caught_up
        assert caught.value.path == tmp_path / "session.db"
        # Every event before it, of every table, and nothing after it.
        assert delivered == [event_id(i) for i in range(before)]
        # The page that reaches it fails again: it is never skipped.
        with pytest.raises(LedgerError, match="row 5 of fs_events"):
            ledger.events(after=after)
        # The other tables still read on their own.
        assert len(ledger.events(["net_events"], limit=100).events) == 10
