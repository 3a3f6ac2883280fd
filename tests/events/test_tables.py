"""The event tables are exactly the schema's tables with an event id and a time, and every
time reaches one scale the pages merge on."""

from __future__ import annotations

import pytest

from capsem_core import schema
from capsem_core.events import EVENT_TABLE_NAMES, EVENT_TABLES, choose_tables
from capsem_core.events.tables import ms_time_us, shown_time, text_time_us


def test_the_event_tables_are_the_schemas_tables_with_an_event_id_and_a_time_column() -> None:
    expected = []
    for table in schema.TABLES:
        columns = schema.table_columns(table)
        times = [c for c in ("timestamp", "timestamp_unix_ms") if c in columns]
        if "event_id" in columns and times and table != "event_body_blobs":
            expected.append((table, times[0]))
    assert [(t.name, t.time_column) for t in EVENT_TABLES] == expected
    assert "tool_responses" not in EVENT_TABLE_NAMES and "profile_mutation_events" not in EVENT_TABLE_NAMES


def test_tables_that_archive_bodies_are_the_schemas_body_source_tables() -> None:
    assert {t.name for t in EVENT_TABLES if t.has_bodies} == set(schema.BODY_SOURCE_TABLES) & set(EVENT_TABLE_NAMES)


def test_a_choice_keeps_the_table_order_names_each_table_once_and_refuses_other_tables() -> None:
    assert [t.name for t in choose_tables(["dns_events", "net_events", "dns_events"])] == ["net_events", "dns_events"]
    assert [t.name for t in choose_tables("fs_events")] == ["fs_events"]
    assert choose_tables(None) == EVENT_TABLES
    with pytest.raises(ValueError, match="not an event table: 'tool_responses'"):
        choose_tables(["net_events", "tool_responses"])
    with pytest.raises(ValueError, match="at least one"):
        choose_tables([])


def test_text_and_millisecond_times_meet_on_one_microsecond_scale() -> None:
    assert text_time_us("2025-06-02T09:00:03.373000Z") == ms_time_us(1748854803373)
    assert text_time_us("2025-06-02T09:00:03.373Z") == text_time_us("2025-06-02T11:00:03.373+02:00")
    assert text_time_us("2025-06-02T09:00:03") == 1748854803 * 1_000_000  # no offset: UTC
    for hostile in ("", "yesterday", "\x1b[2J", None, 17, b"2025-06-02"):
        assert text_time_us(hostile) is None
    assert ms_time_us("1748854803373") is None and ms_time_us(None) is None


def test_an_events_time_is_shown_as_rfc3339_text_whatever_the_table_stores() -> None:
    ms, text = EVENT_TABLES[-1], EVENT_TABLES[0]
    assert ms.time_is_ms and not text.time_is_ms
    assert shown_time(ms, 1748854803373) == "2025-06-02T09:00:03.373000Z"
    assert shown_time(text, "2025-06-02T09:00:03.419212Z") == "2025-06-02T09:00:03.419212Z"
    assert shown_time(ms, 10 ** 20) == str(10 ** 20) and shown_time(ms, -5) == "-5"
    assert shown_time(text, None) == "" and shown_time(text, 3.5) == "3.5"
