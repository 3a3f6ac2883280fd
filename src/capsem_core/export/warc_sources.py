"""Each body's source row: the row of its ``source_table`` that its target URI and its date
come from, looked up in bulk, never a query per body.

The source row of a body is the first row (lowest id) of its ``source_table`` with the
body's ``event_id``, for every table alike: the writer gives a row's bodies the row's own
``event_id`` (``tool_responses`` included: its rows carry an ``event_id`` column of their own,
which is the key, not ``call_id``; ``call_id`` only names the target URI). Target URIs and time
columns are Capsem's (``capsem-warc-export.md``); ``tool_responses`` has no time column, so
its records carry the body row's ``event_body_blobs.created_at``, the time it was archived.

Two steps, so memory stays bounded by what one batch and one part of it need: a batch's
event ids of one table go to SQLite in one query (a JSON array through ``json_each``, one
parameter however many ids, so an unindexed ``event_id`` costs one scan per batch, not one per
chunk of ids) answering each id's first row id; then the URIs and times of a part of the
batch are read by those row ids. URIs and texts come back as bytes bounded in SQL (a value
over ``MAX_HEADER_VALUE_BYTES`` comes back as its length only), so neither a huge value nor
one that is not UTF-8 can fail or swell a read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from capsem_core.export.warc_fields import MAX_HEADER_VALUE_BYTES

# How the export reads session.db: (sql, parameters) -> rows, on the ledger's connection.
Query = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]

# A timestamp text longer than this is no ledger timestamp (which is 27 bytes): read no more.
MAX_STAMP_BYTES = 64


@dataclass(frozen=True, slots=True)
class Source:
    """One body table: the SQL of its target URI over its columns, and its time column
    ("timestamp": RFC 3339 text, "timestamp_unix_ms": integer milliseconds, None: none)."""

    table: str
    uri: str
    time: str | None


SOURCES: dict[str, Source] = {s.table: s for s in (
    Source("net_events", "'https://' || domain || COALESCE(path, '')", "timestamp"),
    Source("model_calls", "'https://' || provider || path", "timestamp"),
    Source("tool_calls", "'capsem://tool/' || tool_name", "timestamp"),
    Source("tool_responses", "'capsem://tool-response/' || call_id", None),
    Source("exec_events", "'capsem://exec/' || exec_id", "timestamp"),
    Source("security_rule_events", "'capsem://security/' || rule_id", "timestamp_unix_ms"),
    Source("security_decision_events", "'capsem://security-decision/' || actor", "timestamp_unix_ms"),
    Source("security_ask_events", "'capsem://security-ask/' || ask_id", "timestamp_unix_ms"),
)}


@dataclass(frozen=True, slots=True)
class SourceRow:
    """What a source row gives a record: the URI's bytes (None when it is NULL or longer than
    MAX_HEADER_VALUE_BYTES), its length in bytes (None for NULL), and the time as read: bytes
    of a text timestamp (None: NULL or too long to be one), an int or other value of a
    ``timestamp_unix_ms``, or None for a table without a time column."""

    uri: bytes | None
    uri_bytes: int | None
    time: object


def _bounded(expr: str, limit: int) -> str:
    return f"CASE WHEN length(CAST({expr} AS BLOB)) <= {limit} THEN CAST({expr} AS BLOB) END"


def _time_sql(source: Source) -> str:
    if source.time is None:
        return "NULL"
    if source.time == "timestamp_unix_ms":
        # An integer as itself; anything else (a hostile row's text or float) as a bounded
        # blob or the float, which no date is made of but a skip can quote.
        col = "timestamp_unix_ms"
        return (f"CASE typeof({col}) WHEN 'integer' THEN {col} WHEN 'real' THEN {col} "
                f"ELSE substr(CAST({col} AS BLOB), 1, {MAX_STAMP_BYTES}) END")
    return _bounded(source.time, MAX_STAMP_BYTES)


def first_rows(query: Query, table: str, event_ids: Iterable[str]) -> dict[str, int]:
    """{event_id: id of its first row in ``table``} for the event ids that have a row there,
    in one query. KeyError for a table that holds no bodies."""
    source = SOURCES[table]
    ids = sorted(set(event_ids))
    if not ids:
        return {}
    sql = (f"SELECT event_id, MIN(id) FROM {source.table} "
           "WHERE event_id IN (SELECT value FROM json_each(?)) GROUP BY event_id")
    return {str(eid): int(rid) for eid, rid in query(sql, (json.dumps(ids),)) if type(rid) is int}


def source_rows(query: Query, table: str, row_ids: Iterable[int]) -> dict[int, SourceRow]:
    """{id: SourceRow} of the given rows of ``table``, in one query by row id."""
    source = SOURCES[table]
    ids = sorted(set(row_ids))
    if not ids:
        return {}
    uri = f"({source.uri})"
    sql = (f"SELECT id, {_bounded(uri, MAX_HEADER_VALUE_BYTES)}, length(CAST({uri} AS BLOB)), {_time_sql(source)} "
           f"FROM {source.table} WHERE id IN (SELECT value FROM json_each(?))")
    return {int(rid): SourceRow(raw, size, stamp) for rid, raw, size, stamp in query(sql, (json.dumps(ids),))}


def archive_times(query: Query, body_ids: Iterable[int]) -> dict[int, bytes | None]:
    """{event_body_blobs id: its created_at as bytes} (None when NULL or too long to be a
    timestamp), in one query: the date of a ``tool_responses`` record."""
    ids = sorted(set(body_ids))
    if not ids:
        return {}
    sql = (f"SELECT id, {_bounded('created_at', MAX_STAMP_BYTES)} FROM event_body_blobs "
           "WHERE id IN (SELECT value FROM json_each(?))")
    return {int(rid): stamp for rid, stamp in query(sql, (json.dumps(ids),))}


__all__ = ["MAX_STAMP_BYTES", "Query", "SOURCES", "Source", "SourceRow", "archive_times", "first_rows", "source_rows"]
