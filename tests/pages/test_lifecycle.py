"""The tool lifecycle counted from the identity graph's scan (pages/lifecycle.py): on a
sound sample and on every way of breaking it (calls without responses, responses without
calls, a trace that differs, NULL call_ids and traces under SQL's own rules, model calls that
are not recorded), the counts from the pages are exactly the SQL's; a column holding a value
of another kind leaves the counting to the SQL; and check reports the same section either
way, without running the lifecycle's SQL where the scan counted it."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsem_core import db as _db
from capsem_core._native import _pages
from capsem_core import snapshot as opening
from capsem_core.check import check_ledger, sql_checks
from capsem_core.pages import graph as identity_pages
from capsem_core.pages import lifecycle as lifecycle_pages
from tests.check.test_identity_graph import ledger, sound
from tests.pages.test_graph import sql

FIXTURES = (sound, ledger)   # the identity graph's sample and its damaged copies


def both_ways(db: Path) -> tuple[sql_checks.Lifecycle | None, sql_checks.Lifecycle]:
    """(the counts from the pages, the counts from SQL), in one read transaction."""
    conn = opening.open_read_only(db, _db.read_plan(db))
    mapped = _pages.PageFile(db)
    try:
        conn.execute("BEGIN")
        from_pages = lifecycle_pages.lifecycle_from_graph(identity_pages.read_graph(mapped, conn))
        return from_pages, sql_checks.tool_lifecycle_counts(conn, sql_checks.table_names(conn))
    finally:
        mapped.close()
        conn.close()


def test_a_sound_sample_counts_no_break_from_its_pages(ledger: Path) -> None:
    from_pages, by_sql = both_ways(ledger)
    assert from_pages == by_sql == sql_checks.Lifecycle(0, 0, 0, 0)


FIRST_CALL = "(SELECT MIN(id) FROM tool_calls)"
FIRST_RESPONSE = "(SELECT MIN(id) FROM tool_responses)"
DAMAGES = {
    "responses_deleted": ["DELETE FROM tool_responses WHERE id IN (SELECT id FROM tool_responses LIMIT 5)"],
    "calls_deleted": ["DELETE FROM tool_calls WHERE id IN (SELECT id FROM tool_calls LIMIT 4)"],
    "call_id_changed": [f"UPDATE tool_calls SET call_id = 'not-answered' WHERE id = {FIRST_CALL}"],
    "response_in_another_trace": [f"UPDATE tool_responses SET trace_id = 'elsewhere' WHERE id = {FIRST_RESPONSE}"],
    # IS: a call and its response that both lack a trace still answer each other.
    "both_traces_null": [f"UPDATE tool_calls SET trace_id = NULL WHERE id = {FIRST_CALL}",
                         "UPDATE tool_responses SET trace_id = NULL WHERE call_id = "
                         f"(SELECT call_id FROM tool_calls WHERE id = {FIRST_CALL})"],
    "one_trace_null": [f"UPDATE tool_calls SET trace_id = NULL WHERE id = {FIRST_CALL}"],
    # A NULL call_id answers nothing, not even another NULL.
    "null_call_ids": ["nullable tool_calls call_id", "nullable tool_responses call_id",
                      f"UPDATE tool_calls SET call_id = NULL WHERE id = {FIRST_CALL}",
                      f"UPDATE tool_responses SET call_id = NULL WHERE id = {FIRST_RESPONSE}"],
    "model_call_missing": ["UPDATE tool_calls SET model_call_id = 987654 WHERE id IN "
                           "(SELECT id FROM tool_calls WHERE model_call_id IS NOT NULL LIMIT 3)",
                           f"UPDATE tool_responses SET model_call_id = -5 WHERE id = {FIRST_RESPONSE}"],
    # A NULL model_call_id (a call no model emitted) names no model call: not a break.
    "model_call_null": ["UPDATE tool_calls SET model_call_id = NULL WHERE id IN (SELECT id FROM tool_calls LIMIT 3)"],
    "model_calls_emptied": ["DELETE FROM model_calls"],
    "everything_at_once": ["DELETE FROM tool_responses WHERE id IN (SELECT id FROM tool_responses LIMIT 2)",
                           f"UPDATE tool_calls SET model_call_id = 424242 WHERE id = {FIRST_CALL}",
                           "UPDATE tool_responses SET trace_id = 'x' WHERE id = (SELECT MAX(id) FROM tool_responses)"],
}

UNBROKEN = {"both_traces_null", "model_call_null"}


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_each_break_is_counted_from_the_pages_exactly_as_sql_counts_it(name: str, ledger: Path) -> None:
    for statement in DAMAGES[name]:
        sql(ledger, statement)
    from_pages, by_sql = both_ways(ledger)
    assert from_pages == by_sql
    assert (by_sql == sql_checks.Lifecycle(0, 0, 0, 0)) == (name in UNBROKEN)


@pytest.mark.parametrize("statement", [
    f"UPDATE tool_calls SET model_call_id = 'seven' WHERE id = {FIRST_CALL}",
    f"UPDATE tool_responses SET call_id = x'00ff' WHERE id = {FIRST_RESPONSE}",
    f"UPDATE tool_calls SET trace_id = x'01' WHERE id = {FIRST_CALL}",
])
def test_a_value_of_another_kind_leaves_the_counting_to_sql(statement: str, ledger: Path) -> None:
    sql(ledger, statement)
    from_pages, _by_sql = both_ways(ledger)
    assert from_pages is None


@pytest.mark.parametrize("name", ["responses_deleted", "model_call_missing", "null_call_ids"])
def test_check_reports_the_sqls_section_without_running_its_sql(
        name: str, ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for statement in DAMAGES[name]:
        sql(ledger, statement)
    by_sql = check_ledger(ledger).checks["tool_lifecycle"].to_json()   # small: the SQL counts it

    def refused(*_args: object) -> sql_checks.Lifecycle:
        raise AssertionError("the scan counted the lifecycle; its SQL must not run")

    monkeypatch.setattr(identity_pages, "MIN_BYTES", 0)
    monkeypatch.setattr(sql_checks, "tool_lifecycle_counts", refused)
    assert check_ledger(ledger).checks["tool_lifecycle"].to_json() == by_sql
    assert by_sql["findings"]


def test_check_counts_in_sql_where_the_scan_read_a_value_of_another_kind(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sql(ledger, f"UPDATE tool_calls SET model_call_id = 'seven' WHERE id = {FIRST_CALL}")
    by_sql = check_ledger(ledger).checks["tool_lifecycle"].to_json()
    ran: list[bool] = []
    real = sql_checks.tool_lifecycle_counts

    def counted(*args):  # type: ignore[no-untyped-def]
        ran.append(True)
        return real(*args)

    monkeypatch.setattr(identity_pages, "MIN_BYTES", 0)
    monkeypatch.setattr(sql_checks, "tool_lifecycle_counts", counted)
    assert check_ledger(ledger).checks["tool_lifecycle"].to_json() == by_sql
    assert ran == [True]
