"""Scan cursors: after a consumed stream the cursor stands after its last row and resumes a
scan (and, for an event table, Ledger.events) exactly there; it is checked as events cursors
are (edited, another table, another ledger, past the last row); scans resumed beside a live
writer deliver every committed row exactly once."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from capsem_core.columns import cursor as scan_cursor
from capsem_core.errors import CursorError
from capsem_core.events import EVENT_TABLE_NAMES
from capsem_core.events import cursor as events_cursor
from capsem_core.ledger import Ledger
from tests.events.ledgers import write_mixed

ROOT = Path(__file__).resolve().parents[2]


def _ids(ledger: Ledger, table: str, after: str) -> tuple[list[int], str]:
    rowid = "block_offset" if table == "body_blocks" else "id"
    scan = ledger.scan(table, columns=[rowid], after=after)
    ids = pa.table(scan).column(rowid).to_pylist()
    return ids, scan.cursor


def test_an_event_tables_scan_ends_at_an_events_cursor_that_events_and_scans_resume(tmp_path: Path) -> None:
    write_mixed(tmp_path, 30)
    with Ledger(tmp_path) as ledger:
        ids, cursor = _ids(ledger, "net_events", "start")
        assert ids == list(range(1, 11)) and cursor.startswith("ev1.")
        write_mixed(tmp_path, 30, first=30)
        page = ledger.events(after=cursor, limit=1000)
        # The events cursor marks only net_events: every other table starts from its first row.
        assert {(e.table, e.id) for e in page.events if e.table == "net_events"} == {("net_events", i)
                                                                                    for i in range(11, 21)}
        assert len([e for e in page.events if e.table == "fs_events"]) == 20
        again, cursor2 = _ids(ledger, "net_events", cursor)
        assert again == list(range(11, 21))
        assert _ids(ledger, "net_events", cursor2)[0] == []
        assert _ids(ledger, "net_events", page.cursor)[0] == []  # an events page's cursor resumes a scan too


def test_a_scan_resumes_from_the_cursor_of_an_events_page_and_keeps_its_other_marks(tmp_path: Path) -> None:
    write_mixed(tmp_path, 12)
    with Ledger(tmp_path) as ledger:
        page = ledger.events(["fs_events"], limit=2)
        ids, cursor = _ids(ledger, "net_events", page.cursor)
        assert ids == [1, 2, 3, 4]
        nxt = ledger.events(["fs_events", "net_events"], after=cursor, limit=100)
        assert [(e.table, e.id) for e in nxt.events if e.table == "fs_events"] == [("fs_events", 3), ("fs_events", 4)]
        assert not [e for e in nxt.events if e.table == "net_events"]


def test_a_scan_of_another_table_ends_at_a_scan_cursor_that_resumes_it(tmp_path: Path) -> None:
    write_mixed(tmp_path, 30)
    with Ledger(tmp_path) as ledger:
        ids, cursor = _ids(ledger, "event_body_blobs", "start")
        assert cursor.startswith("sc1.") and len(ids) == len(set(ids)) > 0
        write_mixed(tmp_path, 30, first=30)
        more, cursor2 = _ids(ledger, "event_body_blobs", cursor)
        assert more and min(more) > max(ids)
        assert _ids(ledger, "event_body_blobs", cursor2)[0] == []
        blocks, block_cursor = _ids(ledger, "body_blocks", "start")
        assert blocks and _ids(ledger, "body_blocks", block_cursor)[0] == []


def test_latest_scans_nothing_and_stands_after_the_last_row(tmp_path: Path) -> None:
    write_mixed(tmp_path, 9)
    with Ledger(tmp_path) as ledger:
        ids, cursor = _ids(ledger, "fs_events", "latest")
        assert ids == []
        write_mixed(tmp_path, 3, first=9)
        assert _ids(ledger, "fs_events", cursor)[0] == [4]


def test_a_partly_read_stream_stands_after_the_last_batch_it_handed_out(tmp_path: Path) -> None:
    write_mixed(tmp_path, 9)
    with Ledger(tmp_path) as ledger:
        scan = ledger.scan("fs_events")
        assert scan.cursor == events_cursor.encode({})  # nothing handed out: where it started
        reader = pa.RecordBatchReader.from_stream(scan)
        batch = reader.read_next_batch()
        assert batch.num_rows == 3 and scan.rows == 3
        assert _ids(ledger, "fs_events", scan.cursor)[0] == []


def _edit(cursor: str) -> str:
    prefix, body = cursor[:4], cursor[4:]
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[3] ^= 1
    return prefix + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def test_a_cursor_edited_of_another_table_or_another_ledger_is_refused(tmp_path: Path) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    write_mixed(mine, 12)
    write_mixed(other, 12, salt=5)
    with Ledger(mine) as ledger:
        _, blobs = _ids(ledger, "event_body_blobs", "start")
        _, events = _ids(ledger, "fs_events", "start")
        with pytest.raises(CursorError, match="integrity check"):
            ledger.scan("event_body_blobs", after=_edit(blobs))
        with pytest.raises(CursorError, match="of a scan of event_body_blobs, not of tool_responses"):
            ledger.scan("tool_responses", after=blobs)
        with pytest.raises(CursorError, match="marks event tables, and event_body_blobs is not one"):
            ledger.scan("event_body_blobs", after=events)
        with pytest.raises(CursorError, match="starts with 'sc1.'"):
            ledger.scan("event_body_blobs", after="nonsense")
    with Ledger(other) as ledger:
        with pytest.raises(CursorError, match="another ledger: row \\d+ of event_body_blobs"):
            ledger.scan("event_body_blobs", after=blobs)
        with pytest.raises(CursorError, match="another ledger: row 4 of fs_events"):
            ledger.scan("fs_events", after=events)


def test_a_cursor_past_the_last_row_is_refused(tmp_path: Path) -> None:
    write_mixed(tmp_path / "big", 30)
    write_mixed(tmp_path / "small", 30)
    with Ledger(tmp_path / "big") as ledger:
        _, cursor = _ids(ledger, "event_body_blobs", "start")
    shutil.rmtree(tmp_path / "small")
    write_mixed(tmp_path / "small", 6)
    with Ledger(tmp_path / "small") as ledger:
        with pytest.raises(CursorError, match="the ledger's last row there is"):
            ledger.scan("event_body_blobs", after=cursor)


def test_a_scan_cursor_round_trips_every_position_kind() -> None:
    for at in (scan_cursor.ScanPosition("body_blocks", None), scan_cursor.ScanPosition("body_blocks", -40),
               scan_cursor.ScanPosition("tool_responses", (1 << 63) - 1, b"12345678")):
        assert scan_cursor.decode(scan_cursor.encode(at)) == at
    assert set(scan_cursor.ANCHOR_COLUMNS) >= set(EVENT_TABLE_NAMES)


def test_scans_resumed_beside_a_live_writer_deliver_every_committed_row_once(tmp_path: Path) -> None:
    directory = tmp_path / "live"
    writer = subprocess.Popen([sys.executable, "-m", "oracles.live_writer", str(directory), "--rows", "3000"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    seen: dict[str, list[int]] = {"net_events": [], "exec_events": []}
    cursors = {t: "start" for t in seen}
    paths = set()
    with Ledger(directory) as ledger:
        while True:
            done = writer.poll() is not None
            for table in seen:
                scan = ledger.scan(table, columns=["id", "event_id"], after=cursors[table])
                ids = pa.table(scan).column("id").to_pylist()
                paths.add(scan.path)
                seen[table] += ids
                cursors[table] = scan.cursor
            if done:
                break
    assert writer.wait(timeout=60) == 0
    with Ledger(directory) as ledger:
        for table, ids in seen.items():
            want = pa.table(ledger.scan(table, columns=["id"])).column("id").to_pylist()
            assert ids == want and len(set(ids)) == len(ids)
    assert "rows" in paths  # the writer's WAL was read through SQLite at least once
