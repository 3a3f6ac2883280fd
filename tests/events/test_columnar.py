"""The columnar page reader behind Ledger.events: the pages read from the file and through
SQLite are the same pages; times turned into merge keys natively agree with Python's parsing;
millisecond times render as the writer stamps them."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capsem_core._native import _columns
from capsem_core.events import EVENT_TABLES
from capsem_core.events.reader import EventReader
from capsem_core.events.tables import text_time_us
from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_ledger
from capsem_core.writer import LedgerWriter, ledger_timestamp
from tests.events.ledgers import write_mixed


def _pages(directory: Path) -> list[tuple[object, ...]]:
    out = []
    with Ledger(directory) as ledger:
        after = "start"
        while True:
            page = ledger.events(after=after, limit=37)
            out.append((page.cursor, page.caught_up, [(e.table, e.id, e.event_id, e.timestamp, e.row, e.bodies)
                                                      for e in page.events]))
            after = page.cursor
            if page.caught_up:
                return out


def test_pages_read_from_the_file_and_through_sqlite_are_the_same(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    write_sample_ledger(tmp_path / "ledger", seed=9, bodies=300)
    from_pages = _pages(tmp_path / "ledger")
    monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", "0")
    assert _pages(tmp_path / "ledger") == from_pages and len(from_pages) > 5


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_a_millisecond_time_renders_as_the_writer_stamps_it(ms: int) -> None:
    assert _columns.ledger_time(ms) == ledger_timestamp(ms / 1000)


_TIMES = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))
    .map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1))
    .map(lambda d: d.isoformat()),  # no zone, maybe no fraction: Python's parser
    st.sampled_from(["2026-02-29T00:00:00.000000Z", "2024-02-29T23:59:59.999999Z", "0000-01-01T00:00:00.000000Z",
                     "2026-13-01T00:00:00.000000Z", "2026-01-01T24:00:00.000000Z", "2026-01-01T00:00:60.000000Z",
                     "2026-01-01T00:00:00.00000aZ", "2026-01-01 00:00:00.000000Z", "not a time", ""]),
    st.text(max_size=27),
)


@pytest.fixture(scope="module")
def fs_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("times") / "ledger"
    LedgerWriter(directory).close()
    return directory


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_TIMES, min_size=1, max_size=20))
def test_native_time_keys_agree_with_pythons_parser(fs_ledger: Path, times: list[str]) -> None:
    conn = sqlite3.connect(fs_ledger / "session.db", isolation_level=None)
    try:
        conn.execute("DELETE FROM fs_events")
        conn.executemany("INSERT INTO fs_events (event_id, timestamp, action, path) VALUES ('000000000001', ?, 'w', '/')",
                         [(t,) for t in times])
    finally:
        conn.close()
    want, key = [], 0
    for t in times:
        us = text_time_us(t)
        key = key if us is None else us
        want.append(key)
    table = next(t for t in EVENT_TABLES if t.name == "fs_events")
    reader = EventReader(fs_ledger / "session.db")
    try:
        reader._source.begin()
        shape = reader._shape(table)
        rows = reader._rows(shape, 0, len(times), False)
        assert EventReader._time_keys(table, shape, rows).tolist() == want
    finally:
        reader.close()


def test_a_millisecond_time_too_large_for_microseconds_is_merged_last_not_wrapped(tmp_path: Path) -> None:
    write_mixed(tmp_path, 9)
    conn = sqlite3.connect(tmp_path / "session.db", isolation_level=None)
    conn.execute("UPDATE security_decision_events SET timestamp_unix_ms = ? WHERE id = 1", ((1 << 62),))
    conn.close()
    with Ledger(tmp_path) as ledger:
        page = ledger.events(limit=100)
    order = [(e.table, e.id) for e in page.events]
    # Its key is the largest there is: its table waits behind it, the others go first.
    assert order[-3:] == [("security_decision_events", i) for i in (1, 2, 3)] and len(order) == 9
    assert page.events[-3].timestamp == str(1 << 62)
