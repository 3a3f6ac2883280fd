"""Creating a v2 ``session.db``: ``create_schema`` (idempotent, one transaction) and
``table_columns`` (each table's columns in DDL order, which the writer builds INSERTs from).
"""

from __future__ import annotations

import os
import sqlite3
from functools import lru_cache

from capsem_core import db
from capsem_core.errors import SchemaMismatch
from capsem_core.schema.tables import SCHEMA_SQL, SESSION_SQL, SESSION_TABLES, TABLES, TRANSPORT_SQL, statements

_SESSION_STATEMENTS = statements(SESSION_SQL)
_TRANSPORT_STATEMENTS = statements(TRANSPORT_SQL)
_TABLE_STATEMENTS = tuple(s for s in statements(SCHEMA_SQL) if s.lstrip().upper().startswith("CREATE TABLE"))


def _table_names(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def create_schema(conn: sqlite3.Connection, path: os.PathLike[str] | str | None = None) -> None:
    """Apply the v2 DDL to ``conn`` in one transaction; re-running it changes nothing.

    The transport batch runs only when ``transport_schema`` is absent, and then only on a
    ledger whose session tables hold no rows: a ledger with rows but no transport ledger has
    lost it, and recreating it empty would hide that. This does not vouch for tables that
    already existed with another shape; call ``check_schema`` after it.
    """
    nested = conn.in_transaction
    if nested:
        conn.execute("SAVEPOINT capsem_create_schema")
    else:
        # IMMEDIATE: two writers opening one new ledger must not both decide it is empty.
        conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SESSION_STATEMENTS:
            conn.execute(statement)
        if "transport_schema" not in _table_names(conn):
            for table in SESSION_TABLES:
                if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                    raise SchemaMismatch(
                        f"session ledger has rows in {table} but no transport ledger "
                        "(transport_schema is missing): refusing to recreate transport_events empty",
                        path)
            for statement in _TRANSPORT_STATEMENTS:
                conn.execute(statement)
    except BaseException:
        if nested:
            conn.execute("ROLLBACK TO capsem_create_schema")
            conn.execute("RELEASE capsem_create_schema")
        else:
            conn.execute("ROLLBACK")
        raise
    if nested:
        conn.execute("RELEASE capsem_create_schema")
    else:
        conn.execute("COMMIT")


@lru_cache(maxsize=1)
def _reference_columns() -> dict[str, tuple[str, ...]]:
    """Every table's column names in DDL order, read back from an in-memory database (its
    CREATE TABLE statements alone: the indexes add no column and most of the parsing)."""
    mem = db.connect_memory()
    try:
        for statement in _TABLE_STATEMENTS:
            mem.execute(statement)
        return {t: tuple(r[1] for r in mem.execute(f"PRAGMA table_xinfo({t})")) for t in TABLES}
    finally:
        mem.close()


def table_columns(table: str) -> tuple[str, ...]:
    """The columns of ``table`` in DDL order (``id`` first where the table has one)."""
    try:
        return _reference_columns()[table]
    except KeyError:
        raise KeyError(f"{table!r} is not a session.db table of this build") from None
