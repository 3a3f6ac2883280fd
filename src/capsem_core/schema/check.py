"""``check_schema``, "no migrations": a ``session.db`` written by an older or newer build is
refused with a message naming everything that does not match, never upgraded.

It reads only the catalog (``sqlite_master``, ``pragma_table_info``, ``user_version``) and
the transport marker row, never a table's pages, so it costs the same on any ledger size.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable

from capsem_core.errors import LedgerError, SchemaMismatch
from capsem_core.schema.create import table_columns
from capsem_core.schema.tables import TABLES
from capsem_core.schema.vocabulary import (
    LATER_ERA_TABLES, SECURITY_EVENT_TYPES, SECURITY_TABLES, TRANSPORT_SCHEMA_VERSION,
)


def required_columns(table: str) -> tuple[str, ...]:
    """Columns ``table`` must have for this build to read and write it: all of its v2 columns.

    This covers the reference's required-columns lists (body tables, transport_events) and
    every column the doctor, the reader and the writer touch. Extra columns are tolerated.
    """
    return table_columns(table)


# A security table's event_type list, however Capsem spelled the CHECK (quoted names, case).
_EVENT_TYPE_IN = re.compile(r"""["`\[]?\bevent_type["`\]]?\s+IN\s*\(([^)]*)\)""", re.IGNORECASE)
_SQL_STRING = re.compile(r"'((?:[^']|'')*)'")


def _event_type_list(table_sql: str) -> tuple[str, ...] | None:
    match = _EVENT_TYPE_IN.search(table_sql)
    if match is None:
        return None
    return tuple(v.replace("''", "'") for v in _SQL_STRING.findall(match.group(1)))


def _names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def _security_problems(table: str, sql: str, columns: set[str]) -> list[str]:
    problems: list[str] = []
    if "event_json" in columns:
        problems.append(f"{table} keeps its payload inline in event_json, which this build archives "
                        "in session.bodies (written by an older build)")
    listed = _event_type_list(sql)
    if listed is None:
        problems.append(f"{table} does not constrain event_type to a list (written by an older build)")
    elif set(listed) != set(SECURITY_EVENT_TYPES):
        missing = set(SECURITY_EVENT_TYPES) - set(listed)
        extra = set(listed) - set(SECURITY_EVENT_TYPES)
        era = ("an older list" if not extra else "a newer list" if not missing else "a different list")
        detail = "; ".join(part for part in (
            f"lacks {_names(missing)}" if missing else "",
            f"adds {_names(extra)}" if extra else "") if part)
        problems.append(f"{table} constrains event_type to {era} than this build's ({detail})")
    return problems


def _read_catalog(conn: sqlite3.Connection) -> tuple[dict[str, tuple[str, set[str]]], int]:
    """(table -> (CREATE sql, column names)) for every table, and ``PRAGMA user_version``."""
    tables: dict[str, tuple[str, set[str]]] = {}
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
        tables[name] = (sql or "", set())
    # One statement for every table's columns: the schema is small, the rows are not read.
    for table, column in conn.execute(
            "SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table'"):
        tables[table][1].add(column)
    user_version = conn.execute("PRAGMA user_version").fetchone()[0]
    return tables, int(user_version)


def version_problem(conn: sqlite3.Connection) -> str | None:
    """What is wrong with the transport marker row, if anything (one rowid lookup)."""
    row = conn.execute("SELECT version FROM transport_schema WHERE id = 1").fetchone()
    if row is None:
        return "transport_schema exists but carries no version row: the ledger was torn mid-stamp"
    version = row[0]
    if version == TRANSPORT_SCHEMA_VERSION and isinstance(version, int):
        return None
    if isinstance(version, int) and version > TRANSPORT_SCHEMA_VERSION:
        return (f"written by a newer build: unsupported transport schema version {version} "
                f"(this build knows {TRANSPORT_SCHEMA_VERSION})")
    return f"unsupported transport schema version {version!r} (this build knows {TRANSPORT_SCHEMA_VERSION})"


def _shape_problems(conn: sqlite3.Connection) -> list[str]:
    tables, user_version = _read_catalog(conn)
    if not tables:
        return ["empty database: it holds no tables at all, so it is not a session ledger"]
    known = [t for t in TABLES if t in tables]
    later = [t for t in LATER_ERA_TABLES if t in tables]
    if not known and not later:
        return [f"not a Capsem session ledger: it holds none of the session tables "
                f"(found {_names(list(tables)[:8])})"]

    problems: list[str] = []
    if later:
        problems.append(f"written by a newer build (archive format v3 or later): it has "
                        f"{_names(later)}, which this v2-era build does not know")
    if user_version != 0:
        problems.append(f"written by a newer build: PRAGMA user_version is {user_version}, "
                        "which v2-era session ledgers leave at 0")
    if "event_body_blobs" in tables and "body" in tables["event_body_blobs"][1]:
        problems.append("event_body_blobs keeps body bytes inline in a body column "
                        "(a v1-era ledger from before the session.bodies archive)")
    if "transport_schema" not in tables:
        problems.append("session ledger predates the transport ledger: transport_schema is missing")
    else:
        marker_problem = version_problem(conn)
        if marker_problem is not None:
            problems.append(marker_problem)
    missing_tables = [t for t in TABLES if t not in tables and t != "transport_schema"]
    if missing_tables:
        word = "table" if len(missing_tables) == 1 else "tables"
        problems.append(f"missing {word} {', '.join(missing_tables)}")
    for table in known:
        sql, columns = tables[table]
        lacking = [c for c in required_columns(table) if c not in columns]
        if lacking:
            word = "column" if len(lacking) == 1 else "columns"
            problems.append(f"table {table} lacks {word} {', '.join(lacking)}")
        if table in SECURITY_TABLES:
            problems.extend(_security_problems(table, sql, columns))
    return problems


def wrap_sqlite_error(exc: sqlite3.DatabaseError, path: os.PathLike[str] | str | None) -> Exception:
    code = getattr(exc, "sqlite_errorname", "")
    if code in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in str(exc):
        return SchemaMismatch(f"not a SQLite session ledger ({exc})", path)
    return LedgerError(f"cannot read the session.db schema: {exc}", path)


def check_schema(conn: sqlite3.Connection, path: os.PathLike[str] | str | None) -> None:
    """Refuse a ``session.db`` this build did not write the shape of ("no migrations").

    Raises ``SchemaMismatch`` naming ``path`` and every mismatch found: missing tables or
    columns (older build), a missing transport ledger or version row, an unknown transport
    version, security tables with an older event_type list or an inline ``event_json``,
    an inline v1-era ``body`` column, or a later era's markers (``archive_state``, a set
    ``user_version``). Reads only the schema and the one marker row, never table pages.
    """
    try:
        problems = _shape_problems(conn)
    except sqlite3.DatabaseError as exc:
        raise wrap_sqlite_error(exc, path) from exc
    if problems:
        raise SchemaMismatch("session.db does not have this build's v2 shape (no migrations): "
                             + "; ".join(problems), path)

