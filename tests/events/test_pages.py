"""Pages of events: clamped sizes, time order across tables and id order within one, the
bodies each event names, cursors that never move back, 'latest', partial pages, and hostile
rows read without a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from capsem_core.errors import LedgerError
from capsem_core.events import EVENT_TABLE_NAMES, EventPage
from capsem_core.events import cursor as C
from capsem_core.events import reader as R
from capsem_core.ledger import Ledger
from tests.events.ledgers import all_rows, event_id, row_for, write_mixed


def _drain(ledger: Ledger, after: str = "start", limit: int = 7, tables: list[str] | None = None
           ) -> tuple[list[tuple[str, int]], str]:
    seen: list[tuple[str, int]] = []
    while True:
        page = ledger.events(tables, after, limit)
        seen += [(e.table, e.id) for e in page.events]
        after = page.cursor
        if page.caught_up:
            return seen, after


@pytest.mark.parametrize("asked, size", [(0, 1), (-5, 1), (1, 1), (999, 999), (1000, 1000), (5000, 1000)])
def test_a_page_size_is_clamped_to_one_through_a_thousand(tmp_path: Path, asked: int, size: int) -> None:
    write_mixed(tmp_path, 1200, flush_every=600)
    with Ledger(tmp_path) as ledger:
        assert len(ledger.events(limit=asked).events) == size


@pytest.mark.parametrize("limit", [2.5, "10", True, None])
def test_a_page_size_that_is_not_an_integer_is_refused(tmp_path: Path, limit: object) -> None:
    write_mixed(tmp_path, 3)
    with Ledger(tmp_path) as ledger, pytest.raises(TypeError, match="limit must be an integer"):
        ledger.events(limit=limit)  # type: ignore[arg-type]


def test_a_page_merges_tables_by_time_and_keeps_id_order_within_each(tmp_path: Path) -> None:
    write_mixed(tmp_path, 60)
    with Ledger(tmp_path) as ledger:
        page = ledger.events(limit=60)
    # Rows were written one millisecond apart, round robin over three tables.
    assert [e.event_id for e in page.events] == [event_id(i) for i in range(60)]
    for table in ("net_events", "fs_events", "security_decision_events"):
        ids = [e.id for e in page.events if e.table == table]
        assert ids == list(range(1, 21))
    times = [e.timestamp for e in page.events]
    assert times == sorted(times) and times[2] == "2025-06-02T09:00:00.002000Z"  # a millisecond table's time


def test_every_event_carries_its_row_and_names_its_archived_bodies(tmp_path: Path) -> None:
    write_mixed(tmp_path, 12)
    with Ledger(tmp_path) as ledger:
        events = ledger.events(limit=12).events
        for i, event in enumerate(events):
            table, row, bodies = row_for(i)
            assert event.table == table and event.event_id == row["event_id"]
            assert {k: event.row[k] for k in row} == row and event.row["id"] == event.id
            assert set(event.row) >= {"id", "event_id", "trace_id"}
            assert event.bodies == tuple(b.direction for b in bodies)
            for direction in event.bodies:
                assert ledger.read_body(event.event_id, event.table, direction) == next(
                    b.data for b in bodies if b.direction == direction)


def test_paging_delivers_every_row_once_and_the_cursor_never_moves_back(tmp_path: Path) -> None:
    write_mixed(tmp_path, 500)
    with Ledger(tmp_path) as ledger:
        after, positions, seen = "start", {name: 0 for name in EVENT_TABLE_NAMES}, []
        while True:
            page = ledger.events(after=after, limit=13)
            seen += [(e.table, e.id) for e in page.events]
            now = C.decode(page.cursor)
            for name in EVENT_TABLE_NAMES:
                position = now[name].position if name in now else 0
                assert position >= positions[name]
                positions[name] = position
            after = page.cursor
            if page.caught_up:
                break
        assert len(seen) == len(set(seen)) == 500 and set(seen) == all_rows(tmp_path)
        again = ledger.events(after=after)
        assert again.events == [] and again.caught_up and again.cursor == after


def test_latest_skips_what_is_committed_and_then_delivers_only_what_follows(tmp_path: Path) -> None:
    write_mixed(tmp_path, 40)
    with Ledger(tmp_path) as ledger:
        tail = ledger.events(after="latest", limit=3)
        assert tail.events == [] and tail.caught_up
        assert ledger.events(after=tail.cursor).events == []
        assert tail.cursor == _drain(ledger)[1]  # standing at the end is standing at the end
    write_mixed(tmp_path, 25, first=40)
    with Ledger(tmp_path) as ledger:
        seen, _ = _drain(ledger, tail.cursor)
        assert [eid for eid in seen] and len(seen) == 25
        assert {(e.table, e.id) for e in ledger.events(after=tail.cursor, limit=25).events} == set(seen)


def test_a_cursor_of_some_tables_keeps_the_other_tables_where_they_stood(tmp_path: Path) -> None:
    write_mixed(tmp_path, 90)
    with Ledger(tmp_path) as ledger:
        net, after = _drain(ledger, tables=["net_events"])
        assert {t for t, _ in net} == {"net_events"} and len(net) == 30
        rest, _ = _drain(ledger, after)
        assert not any(t == "net_events" for t, _ in rest) and len(rest) == 60
        fs_page = ledger.events(["fs_events"], after, limit=5)
        assert not any(t == "net_events" for t, _ in _drain(ledger, fs_page.cursor)[0])


def test_a_partial_pages_cursor_resumes_at_the_first_event_not_taken(tmp_path: Path) -> None:
    write_mixed(tmp_path, 30)
    with Ledger(tmp_path) as ledger:
        page = ledger.events(limit=20)
        for k in (0, 1, 7, 19):
            assert ledger.events(after=page.cursor_at(k), limit=20 - k).events == page.events[k:]
        assert page.cursor_at(20) == page.cursor
        with pytest.raises(ValueError):
            page.cursor_at(21)


def test_a_page_is_read_in_one_snapshot_while_the_ledger_grows(tmp_path: Path) -> None:
    write_mixed(tmp_path, 30)
    with Ledger(tmp_path) as ledger:
        first = ledger.events(limit=30)
        assert first.caught_up
        write_mixed(tmp_path, 30, first=30)
        second = ledger.events(after=first.cursor, limit=1000)
        assert [e.event_id for e in second.events] == [event_id(i) for i in range(30, 60)] and second.caught_up


def _poke(directory: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(directory / "session.db", isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(sql, params)
    finally:
        conn.close()


def test_hostile_rows_are_delivered_as_stored_without_a_traceback(tmp_path: Path) -> None:
    write_mixed(tmp_path, 9)
    _poke(tmp_path, "UPDATE net_events SET domain = CAST(x'fffe41' AS TEXT), timestamp = 'not a time' WHERE id = 2")
    _poke(tmp_path, "UPDATE security_decision_events SET timestamp_unix_ms = 'soon', event_id = x'00ff' WHERE id = 1")
    _poke(tmp_path, "UPDATE fs_events SET path = ?, size = 1e999 WHERE id = 1", ("\x1b[2J\u202e",))
    with Ledger(tmp_path) as ledger:
        events = _drain(ledger, limit=100)
        page = ledger.events(limit=100)
    assert len(events[0]) == 9
    by_key = {(e.table, e.id): e for e in page.events}
    bad_text = by_key[("net_events", 2)]
    assert bad_text.row["domain"] == "\udcff\udcfeA" and bad_text.timestamp == "not a time"
    odd = by_key[("security_decision_events", 1)]
    assert odd.row["event_id"] == b"\x00\xff" and odd.event_id == str(b"\x00\xff") and odd.timestamp == "soon"
    assert by_key[("fs_events", 1)].row["path"] == "\x1b[2J\u202e"
    # A row whose time cannot be read keeps the place of the row before it in its table.
    order = [(e.table, e.id) for e in page.events]
    assert order.index(("net_events", 2)) > order.index(("net_events", 1))


def test_a_row_larger_than_an_events_page_takes_is_one_clear_error(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    write_mixed(tmp_path, 6)
    _poke(tmp_path, "UPDATE fs_events SET path = ? WHERE id = 2", ("x" * (3 << 20),))
    monkeypatch.setattr(R, "ROW_BYTES", 1 << 20)
    with Ledger(tmp_path) as ledger:
        with pytest.raises(LedgerError, match="larger than the 1 MiB an events page takes") as caught:
            _drain(ledger, limit=100)
        assert caught.value.path == tmp_path / "session.db"
        assert len(ledger.events(["net_events"], limit=100).events) == 2  # the other tables still read


def test_a_page_ends_early_once_its_values_pass_the_byte_budget(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write_mixed(tmp_path, 30)
    _poke(tmp_path, "UPDATE fs_events SET path = ?", ("y" * 4096,))
    monkeypatch.setattr(R, "PAGE_BYTES", 10_000)
    with Ledger(tmp_path) as ledger:
        seen, _ = _drain(ledger, limit=1000)
        page = ledger.events(limit=1000)
    assert len(seen) == 30 and len(page.events) < 30 and page.events[-1].table == "fs_events"


def test_a_closed_ledger_reads_no_events(tmp_path: Path) -> None:
    write_mixed(tmp_path, 3)
    ledger = Ledger(tmp_path)
    ledger.events()
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.events()
    with pytest.raises(LedgerError, match="closed"):
        ledger.follow()


def test_an_event_page_is_a_plain_value(tmp_path: Path) -> None:
    write_mixed(tmp_path, 3)
    with Ledger(tmp_path) as ledger:
        page = ledger.events()
    assert isinstance(page, EventPage) and len({e for e in page.events}) == 3
    assert page == EventPage(page.events, page.cursor, page.caught_up)
