"""``ReadyCheck``: the cheap readiness probe of one open ``session.db``, whose full shape check
re-runs only when SQLite's ``schema_version`` cookie moves.
"""

from __future__ import annotations

import os
import sqlite3

from capsem_core.errors import SchemaMismatch
from capsem_core.schema.check import check_schema, version_problem, wrap_sqlite_error


class ReadyCheck:
    """Readiness of one open ``session.db``: its shape, re-checked only when the schema moves.

    ``ready()`` reads ``PRAGMA schema_version`` (a cookie in the database header, so O(1)
    whatever the ledger's size) and the transport marker row (one rowid lookup); the full
    shape check runs only when the cookie differs from the last successful check.
    ``full_checks`` counts how many full checks ran.
    """

    __slots__ = ("_conn", "path", "_checked_cookie", "full_checks")

    def __init__(self, conn: sqlite3.Connection, path: os.PathLike[str] | str | None) -> None:
        self._conn = conn
        self.path = path
        self._checked_cookie: int | None = None
        self.full_checks = 0

    def ready(self) -> None:
        """Return if the ledger has this build's shape; raise ``SchemaMismatch`` if not."""
        conn = self._conn
        try:
            cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
            if cookie == self._checked_cookie:
                # The shape is as checked; only the marker row can have changed under it.
                problem = version_problem(conn)
                if problem is None:
                    return
                self._checked_cookie = None
                raise SchemaMismatch("session.db does not have this build's v2 shape "
                                     f"(no migrations): {problem}", self.path)
        except sqlite3.DatabaseError as exc:
            raise wrap_sqlite_error(exc, self.path) from exc
        self.full_checks += 1
        check_schema(conn, self.path)
        self._checked_cookie = cookie
