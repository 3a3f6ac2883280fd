"""The tool usage table counted from the identity graph's scan (pages/usage.py): on a sound
sample and on every way of reshaping it (ties in SQL's order, NULL durations, origins,
decisions and tool names, SQLite's own rounding, texts in byte order, no rows at all), the rows
from the pages are exactly the SQL's; a value of another kind, a sum a double cannot hold
exactly or a text that is not UTF-8 leaves the counting to the SQL; and check reports the same
section either way, without the SQL pass where the scan counted it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from capsem_core import db as _db
from capsem_core import snapshot as opening
from capsem_core._native import _pages
from capsem_core.check import check_ledger, sql_checks
from capsem_core.pages import graph as identity_pages
from capsem_core.pages.usage import usage_from_graph
from tests.check.test_identity_graph import ledger, sound
from tests.pages.test_graph import sql

FIXTURES = (sound, ledger)   # the identity graph's sample and its reshaped copies

USAGE_SQL = """SELECT tool_name, origin, decision, COUNT(*) AS count, ROUND(AVG(duration_ms), 1) AS avg_ms
               FROM tool_calls WHERE tool_name IS NOT NULL
               GROUP BY tool_name, origin, decision ORDER BY count DESC, tool_name"""


@contextmanager
def scanned(db: Path) -> Iterator[tuple[identity_pages.Graph | None, sqlite3.Connection]]:
    """The identity graph's scan of ``db``, and the connection of its read transaction."""
    conn = opening.open_read_only(db, _db.read_plan(db))
    mapped = _pages.PageFile(db)
    try:
        conn.execute("BEGIN")
        yield identity_pages.read_graph(mapped, conn), conn
    finally:
        mapped.close()
        conn.close()


def both_ways(db: Path) -> tuple[list[list[object]] | None, list[list[object]]]:
    """(the rows from the pages, the rows from SQL), in one read transaction."""
    with scanned(db) as (graph, conn):
        return usage_from_graph(graph, conn), [list(r) for r in conn.execute(USAGE_SQL)]


FIRST_CALL = "(SELECT MIN(id) FROM tool_calls)"
FIRST_FOUR = "(SELECT id FROM tool_calls ORDER BY id LIMIT 4)"
SHAPES = {
    "sound": [],
    # Six groups of one tool name with equal counts: GROUP BY's order decides among them.
    "ties_within_one_name": ["UPDATE tool_calls SET tool_name = 'same', "
                             "origin = CASE id % 3 WHEN 0 THEN 'z' WHEN 1 THEN 'a' ELSE 'm' END, "
                             "decision = CASE id % 2 WHEN 0 THEN 'denied' ELSE 'allowed' END"],
    "names_in_byte_order": ["UPDATE tool_calls SET origin = 'native', decision = 'allowed', tool_name = CASE id % 5 "
                            "WHEN 0 THEN 'Z' WHEN 1 THEN 'a' WHEN 2 THEN '\u00e9' WHEN 3 THEN '' ELSE '\u65e5\u672c' END"],
    "durations_null": ["UPDATE tool_calls SET duration_ms = NULL WHERE id % 2 = 0"],
    "a_group_with_no_duration": [f"UPDATE tool_calls SET tool_name = 'untimed', duration_ms = NULL WHERE id IN {FIRST_FOUR}"],
    # 0.25 and -0.25: SQLite rounds them away from zero, Python's round() to even.
    "sqlites_rounding": [f"UPDATE tool_calls SET tool_name = 'quarter', origin = 'o', decision = 'd', duration_ms = 0 WHERE id IN {FIRST_FOUR}",
                         f"UPDATE tool_calls SET duration_ms = 1 WHERE id = {FIRST_CALL}",
                         "UPDATE tool_calls SET tool_name = 'minus', origin = 'o', decision = 'd', duration_ms = 0 WHERE id IN "
                         "(SELECT id FROM tool_calls ORDER BY id DESC LIMIT 4)",
                         "UPDATE tool_calls SET duration_ms = -1 WHERE id = (SELECT MAX(id) FROM tool_calls)"],
    "large_durations_still_exact": ["UPDATE tool_calls SET duration_ms = 1099511627776 + id WHERE id % 3 = 0"],
    "null_origins_and_decisions": ["nullable tool_calls origin", "nullable tool_calls decision",
                                   "UPDATE tool_calls SET origin = NULL WHERE id % 3 = 0",
                                   "UPDATE tool_calls SET decision = NULL WHERE id % 4 = 0"],
    "null_tool_names_left_out": ["nullable tool_calls tool_name", "UPDATE tool_calls SET tool_name = NULL WHERE id % 2 = 0"],
    "every_tool_name_null": ["nullable tool_calls tool_name", "UPDATE tool_calls SET tool_name = NULL"],
    "no_tool_calls": ["DELETE FROM tool_calls"],
    # More groups than one rounding statement takes (usage._ROUND_BATCH).
    "many_groups": ["WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500) "
                    "INSERT INTO tool_calls (call_index, call_id, tool_name, origin, decision, duration_ms) "
                    "SELECT i, 'extra-' || i, 'tool-' || (i % 701), 'o' || (i % 2), 'allowed', i * 7 FROM n"],
}


EMPTY = {"every_tool_name_null", "no_tool_calls"}


def reshaped(db: Path, *statements: str) -> Path:
    for statement in statements:
        sql(db, statement)
    return db


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_is_counted_from_the_pages_exactly_as_sql_counts_it(name: str, ledger: Path) -> None:
    from_pages, by_sql = both_ways(reshaped(ledger, *SHAPES[name]))
    assert from_pages == by_sql and bool(by_sql) == (name not in EMPTY)


def test_the_rounding_and_the_ties_are_sqlites(ledger: Path) -> None:
    from_pages, _by_sql = both_ways(reshaped(ledger, *SHAPES["sqlites_rounding"]))
    assert from_pages is not None
    means = {row[0]: row[4] for row in from_pages}
    assert means["quarter"] == 0.3 and means["minus"] == -0.3


def test_ties_keep_group_by_order(ledger: Path) -> None:
    from_pages, _by_sql = both_ways(reshaped(ledger, *SHAPES["ties_within_one_name"]))
    assert from_pages is not None
    counts = [row[3] for row in from_pages]
    assert len(set(counts)) < len(counts)   # there are ties to order
    for (_n, o1, d1, c1, _a), (_m, o2, d2, c2, _b) in zip(from_pages, from_pages[1:]):
        assert c1 > c2 or (c1 == c2 and (o1, d1) < (o2, d2))


def test_the_usage_texts_keep_to_a_domain_of_their_own(ledger: Path) -> None:
    """Only counted, never joined: they do not widen the join domains' arrays."""
    with scanned(ledger) as (graph, conn):
        [name] = conn.execute("SELECT tool_name FROM tool_calls LIMIT 1").fetchone()
        assert graph is not None and graph.code("usage", name) > 0 and graph.code("name", name) == 0


OTHER_KINDS = {
    "duration_beyond_exact_doubles": "UPDATE tool_calls SET duration_ms = 4611686018427387904 WHERE id % 2 = 0",
    "duration_a_text": f"UPDATE tool_calls SET duration_ms = 'slow' WHERE id = {FIRST_CALL}",
    "duration_a_real": f"UPDATE tool_calls SET duration_ms = 2.5 WHERE id = {FIRST_CALL}",
    "tool_name_a_blob": f"UPDATE tool_calls SET tool_name = x'00ff' WHERE id = {FIRST_CALL}",
    "origin_a_blob": f"UPDATE tool_calls SET origin = x'01' WHERE id = {FIRST_CALL}",
}


@pytest.mark.parametrize("name", sorted(OTHER_KINDS))
def test_what_the_arrays_cannot_say_leaves_the_counting_to_sql(name: str, ledger: Path) -> None:
    from_pages, by_sql = both_ways(reshaped(ledger, OTHER_KINDS[name]))
    assert from_pages is None and by_sql


def test_a_tool_name_that_is_not_utf8_leaves_the_counting_to_sql(ledger: Path) -> None:
    reshaped(ledger, f"UPDATE tool_calls SET tool_name = CAST(x'ff' AS TEXT) WHERE id = {FIRST_CALL}")
    with scanned(ledger) as (graph, conn):
        assert graph is not None and usage_from_graph(graph, conn) is None


def _handed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each tool usage check was handed rows counted from the pages."""
    handed: list[bool] = []
    real = sql_checks.check_tool_usage

    def check_tool_usage(conn, tables, counts, result, usage=None):  # type: ignore[no-untyped-def]
        handed.append(usage is not None)
        return real(conn, tables, counts, result, usage)

    monkeypatch.setattr(sql_checks, "check_tool_usage", check_tool_usage)
    return handed


@pytest.mark.parametrize("name", ["sound", "ties_within_one_name", "sqlites_rounding", "null_origins_and_decisions"])
def test_check_reports_the_sqls_section_from_the_pages(name: str, ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_sql = check_ledger(reshaped(ledger, *SHAPES[name])).checks["tool_usage"].to_json()   # small: the SQL counts it
    handed = _handed(monkeypatch)
    monkeypatch.setattr(identity_pages, "MIN_BYTES", 0)
    assert check_ledger(ledger).checks["tool_usage"].to_json() == by_sql
    assert handed == [True]
    assert by_sql["tables"]["usage"]["rows"]


def test_check_counts_in_sql_where_the_scan_read_a_value_of_another_kind(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_sql = check_ledger(reshaped(ledger, OTHER_KINDS["duration_a_text"])).checks["tool_usage"].to_json()
    handed = _handed(monkeypatch)
    monkeypatch.setattr(identity_pages, "MIN_BYTES", 0)
    assert check_ledger(ledger).checks["tool_usage"].to_json() == by_sql
    assert handed == [False]
