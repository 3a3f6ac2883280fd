"""The SQL checks of the report: everything it learns from session.db's tables.

The expected tables and their row counts, the file
monitor's overflow windows, the tool lifecycle (calls and responses that answer each other),
AI-provider traffic against model calls, NULLs in the fields the doctor relies on, tool
usage and the latest rows of each table. Each check fills its ``CheckResult`` from SQL
aggregates: nothing here makes a Python object per row of a large table. ``run.py`` decides
the order and the connection each runs on (the checks' or a worker's), all in one snapshot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from capsem_core.check.report import ERROR, NOTE, WARNING, CheckResult, Finding, Table, Value
from capsem_core.pages.lifecycle import Lifecycle

EXPECTED_TABLES: tuple[str, ...] = ("net_events", "model_calls", "tool_calls", "tool_responses", "fs_events")
PROVIDER_DOMAIN_PATTERNS: tuple[str, ...] = ("%.googleapis.com", "%.anthropic.com", "%.openai.com")
PREVIEW_COLUMNS: dict[str, tuple[str, ...]] = {
    "net_events": ("id", "timestamp", "domain", "decision", "method", "path", "status_code", "duration_ms"),
    "model_calls": ("id", "timestamp", "provider", "model", "input_tokens", "output_tokens", "stop_reason",
                    "estimated_cost_usd", "duration_ms"),
    "tool_calls": ("id", "model_call_id", "tool_name", "call_id", "origin"),
    "tool_responses": ("id", "model_call_id", "call_id", "is_error"),
    "fs_events": ("id", "timestamp", "action", "kind", "path", "size"),
}
# (label, WHERE clause, columns it reads) of the doctor's model-data-quality counts.
MODEL_NULL_CHECKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("NULL model", "model IS NULL", ("model",)),
    ("NULL tokens", "input_tokens IS NULL AND output_tokens IS NULL", ("input_tokens", "output_tokens")),
    ("NULL request_body_preview", "request_body_preview IS NULL", ("request_body_preview",)),
)


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The tables session.db holds (the checks skip what a missing table would need)."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _present(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int], table: str,
             result: CheckResult) -> tuple[set[str], int] | None:
    """(columns, row count) of the one table a check reads, its count recorded in ``result``;
    None, and the check skipped, when the ledger has no such table."""
    if table not in tables:
        result.skip(f"{table} is missing")
        return None
    result.counts[table] = row_counts[table]
    return _columns(conn, table), row_counts[table]


def _scalar(conn: sqlite3.Connection, sql: str, params: Sequence[Value] = ()) -> Value:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def check_tables(conn: sqlite3.Connection, tables: set[str], result: CheckResult) -> dict[str, int]:
    """Row counts of the expected tables that exist (the later checks reuse them)."""
    missing = sorted(t for t in EXPECTED_TABLES if t not in tables)
    result.counts["missing"] = missing
    rows: list[list[Value]] = []
    for table in EXPECTED_TABLES:
        if table in tables:
            n = int(_scalar(conn, f"SELECT COUNT(*) FROM {table}"))
            result.counts[table] = n
            rows.append([table, n])
        else:
            result.counts[table] = None
            rows.append([table, "MISSING"])
    result.tables["event_counts"] = Table(["table", "rows"], rows)
    if missing:
        result.add(Finding("missing_tables", ERROR, "Missing tables: " + ", ".join(missing),
                           count=len(missing)))
    return {table: n for table, n in rows if isinstance(n, int)}


def check_fs_overflow(conn: sqlite3.Connection, tables: set[str], result: CheckResult) -> None:
    if "fs_events" not in tables:
        result.skip("fs_events is missing")
        return
    windows, deferred = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM fs_events WHERE action = 'overflow'").fetchone()
    result.counts.update(windows=int(windows), deferred=int(deferred))
    if windows:
        result.add(Finding("fs_overflow", NOTE,
                           f"File monitor held {deferred} changes over to a later scan in {windows} "
                           f"overflowing windows (fs_events action 'overflow')", count=int(windows)))


def lifecycle_tables(tables: set[str]) -> bool:
    """Whether the ledger has the tables the tool lifecycle reads."""
    return "tool_calls" in tables and "tool_responses" in tables


def tool_lifecycle_counts(conn: sqlite3.Connection, tables: set[str]) -> Lifecycle:
    """The tool lifecycle's counts, in SQL (index-backed: idx_tool_calls_call_id, the
    responses' call_id index and model_calls' primary key)."""
    # A call and its response share call_id within one trace (IS: both may lack a trace). The
    # unary + keeps SQLite on the call_id index: a trace holds thousands of rows.
    unanswered = int(_scalar(conn, """
        SELECT COUNT(*) FROM tool_calls AS c WHERE NOT EXISTS (
            SELECT 1 FROM tool_responses AS r WHERE r.call_id = c.call_id AND +r.trace_id IS c.trace_id)"""))
    orphaned = int(_scalar(conn, """
        SELECT COUNT(*) FROM tool_responses AS r WHERE NOT EXISTS (
            SELECT 1 FROM tool_calls AS c WHERE c.call_id = r.call_id AND +c.trace_id IS r.trace_id)"""))
    if "model_calls" not in tables:
        return Lifecycle(unanswered, orphaned, None, None)
    missing_call = int(_scalar(conn, """
        SELECT COUNT(*) FROM tool_calls AS c WHERE c.model_call_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM model_calls AS m WHERE m.id = c.model_call_id)"""))
    missing_resp = int(_scalar(conn, """
        SELECT COUNT(*) FROM tool_responses AS r WHERE r.model_call_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM model_calls AS m WHERE m.id = r.model_call_id)"""))
    return Lifecycle(unanswered, orphaned, missing_call, missing_resp)


def fill_tool_lifecycle(result: CheckResult, row_counts: dict[str, int], counts: Lifecycle) -> None:
    """The tool lifecycle's counts and findings, from ``counts`` (however they were read)."""
    calls, responses = row_counts["tool_calls"], row_counts["tool_responses"]
    unanswered, orphaned = counts.unanswered, counts.orphaned
    result.counts.update(tool_calls=calls, tool_responses=responses,
                         calls_without_responses=unanswered, responses_without_calls=orphaned,
                         calls_missing_model_call=counts.missing_call, responses_missing_model_call=counts.missing_resp)
    # A call still waiting for its result is normal mid-session: a warning, as the doctor has it.
    if unanswered:
        result.add(Finding("calls_without_responses", WARNING,
                           f"tool_calls without responses: {unanswered}/{calls}", count=unanswered))
    # A response must answer a call of its own trace; one that does not is a broken ledger.
    if orphaned:
        result.add(Finding("responses_without_calls", ERROR,
                           f"tool_responses without calls: {orphaned}/{responses}", count=orphaned))
    if counts.missing_call:
        result.add(Finding("calls_missing_model_call", ERROR,
                           f"tool_calls naming a model call model_calls does not record: {counts.missing_call}/{calls}",
                           count=counts.missing_call))
    if counts.missing_resp:
        result.add(Finding("responses_missing_model_call", ERROR,
                           f"tool_responses naming a model call model_calls does not record: "
                           f"{counts.missing_resp}/{responses}", count=counts.missing_resp))


def check_tool_lifecycle(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                          result: CheckResult) -> None:
    if not lifecycle_tables(tables):
        result.skip("tool_calls or tool_responses is missing")
        return
    fill_tool_lifecycle(result, row_counts, tool_lifecycle_counts(conn, tables))


def check_provider_correlation(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                                result: CheckResult) -> None:
    if "net_events" not in tables or "model_calls" not in tables:
        result.skip("net_events or model_calls is missing")
        return
    where = " OR ".join("domain LIKE ?" for _ in PROVIDER_DOMAIN_PATTERNS)
    provider = int(_scalar(conn, f"SELECT COUNT(*) FROM net_events WHERE {where}", PROVIDER_DOMAIN_PATTERNS))
    model = row_counts["model_calls"]
    result.counts.update(provider_net_events=provider, model_calls=model)
    if provider > 0 and model == 0:
        result.add(Finding("provider_without_model_calls", WARNING,
                           f"Found {provider} AI-provider net_events but 0 model_calls -- "
                           f"stream parsing may have failed", count=provider))


def check_null_fields(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                       result: CheckResult) -> None:
    present = _present(conn, tables, row_counts, "model_calls", result)
    if present is None:
        return
    columns, total = present
    if total == 0:
        return
    # One pass over model_calls for all three counts.
    usable = [(label, clause) for label, clause, needs in MODEL_NULL_CHECKS if all(c in columns for c in needs)]
    if not usable:
        result.skip("model_calls has none of the checked columns")
        return
    select = ", ".join(f"COALESCE(SUM({clause}), 0)" for _, clause in usable)
    counts = conn.execute(f"SELECT {select} FROM model_calls").fetchone()
    for (label, _), n in zip(usable, counts):
        result.counts[label] = int(n)
        if n:
            result.add(Finding(label.replace(" ", "_").lower(), WARNING, f"{label}: {int(n)}/{total}",
                               count=int(n)))


def check_tool_usage(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                      result: CheckResult, usage: Sequence[Sequence[Value]] | None = None) -> None:
    """Origins and usage of tool_calls. ``usage``: the usage rows counted already, as the SQL
    below gives them (``pages.usage``, from the identity graph's scan); else the SQL counts."""
    present = _present(conn, tables, row_counts, "tool_calls", result)
    if present is None:
        return
    columns, total = present
    if total and "origin" in columns:
        origins = conn.execute(
            "SELECT origin, COUNT(*) AS n FROM tool_calls GROUP BY origin ORDER BY n DESC, origin").fetchall()
        result.tables["origins"] = Table(["origin", "count"], [[o, int(n)] for o, n in origins])
    wanted = ("tool_name", "origin", "decision", "duration_ms")
    if all(c in columns for c in wanted):
        usage = usage if usage is not None else conn.execute("""
            SELECT tool_name, origin, decision, COUNT(*) AS count, ROUND(AVG(duration_ms), 1) AS avg_ms
            FROM tool_calls WHERE tool_name IS NOT NULL
            GROUP BY tool_name, origin, decision ORDER BY count DESC, tool_name""").fetchall()
        if usage:
            result.tables["usage"] = Table(["tool_name", "origin", "decision", "count", "avg_ms"],
                                           [list(r) for r in usage])


def check_previews(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int], rows: int,
                    result: CheckResult) -> None:
    for table in EXPECTED_TABLES:
        if table not in tables:
            continue
        present = _columns(conn, table)
        cols = [c for c in PREVIEW_COLUMNS[table] if c in present]
        result.counts[table] = row_counts[table]
        order = "id DESC" if "id" in present else "rowid DESC"
        shown = conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order} LIMIT ?",
                             (max(rows, 0),)).fetchall() if cols else []
        result.tables[table] = Table(cols, [list(r) for r in shown])


__all__ = ["EXPECTED_TABLES", "MODEL_NULL_CHECKS", "Lifecycle", "PREVIEW_COLUMNS", "PROVIDER_DOMAIN_PATTERNS", "check_fs_overflow",
           "check_null_fields", "check_previews", "check_provider_correlation", "check_tables",
           "check_tool_lifecycle", "check_tool_usage", "fill_tool_lifecycle", "lifecycle_tables", "table_names",
           "tool_lifecycle_counts"]
