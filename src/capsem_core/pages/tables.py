"""What a native page scan of session.db checks before it runs: that the mapped file is the one
SQLite reads and the snapshot of the reader's transaction (``map_snapshot``, ``same_file``,
``HeldMap``; ``header_is_snapshot``, the header's half of that rule, serves the column
reader's map too), and which record column of a table's rows holds which declared column.

A scan of session.db's own pages (``_pages.PageFile.records``) reads record columns by number,
so before one runs, its caller asks here where each column it wants is stored, and whether
the table is one the scan may read at all: a plain rowid table (no WITHOUT ROWID, no
generated or hidden columns), declared with the types the caller expects, whose text the
database stores in UTF-8. Anything else answers None, and the caller reads the table with
SQL instead. A declared ``INTEGER PRIMARY KEY`` is the rowid (``_pages.ROWID``): SQLite stores
NULL in its record column. ``affinity`` is SQLite's rule from a declared type to a column's
affinity, for the readers that test or convert by it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence

from capsem_core import db
from capsem_core._native import _pages


def affinity(declared: str) -> str:
    """SQLite's column affinity of a declared type (the rules of "Datatypes In SQLite" §3.1)."""
    kind = declared.upper()
    if "INT" in kind:
        return "INTEGER"
    if "CHAR" in kind or "CLOB" in kind or "TEXT" in kind:
        return "TEXT"
    if "BLOB" in kind or not kind.strip():
        return "BLOB"
    if "REAL" in kind or "FLOA" in kind or "DOUB" in kind:
        return "REAL"
    return "NUMERIC"


def utf8(conn: sqlite3.Connection) -> bool:
    """Whether the database stores its texts in UTF-8 (a scan reads their bytes as stored)."""
    return bool(conn.execute("PRAGMA encoding").fetchone()[0] == "UTF-8")


def record_columns(conn: sqlite3.Connection, table: str, names: Sequence[str], integers: Collection[str],
                   *, plain_text: bool = True) -> list[tuple[int, str]] | None:
    """(record column, name) of ``names`` in record order (the rowid first), when ``table`` is
    a plain rowid table holding them, each declared INTEGER when in ``integers`` and TEXT
    otherwise (``plain_text``: with no COLLATE anywhere in the table, for callers that
    compare texts byte for byte); else None. ``id`` must then be the INTEGER PRIMARY KEY."""
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchone()
    if sql is None or not isinstance(sql[0], str) or "WITHOUT" in sql[0].upper():
        return None
    if plain_text and "COLLATE" in sql[0].upper():
        return None
    info = conn.execute("SELECT cid, name, type, pk, hidden FROM pragma_table_xinfo(?)", (table,)).fetchall()
    if any(hidden for *_rest, hidden in info):
        return None
    by_name = {name: (cid, str(kind).upper(), pk) for cid, name, kind, pk, _h in info}
    out = []
    for name in names:
        if name not in by_name:
            return None
        cid, kind, pk = by_name[name]
        if name == "id":
            if pk != 1 or kind != "INTEGER" or sum(1 for *_x, p, _h in info if p) != 1:
                return None
            out.append((_pages.ROWID, name))
        elif kind != ("INTEGER" if name in integers else "TEXT"):
            return None
        else:
            out.append((cid, name))
    return sorted(out)   # record order (ROWID, -1, first)


# What a map's header is compared on, as the PRAGMAs a transaction reads it (in this order).
SNAPSHOT_PRAGMAS = ("page_size", "page_count", "freelist_count", "schema_version")


def header_is_snapshot(header: Mapping[str, int] | None, pragma: Callable[[str], object]) -> bool:
    """Whether a mapped file's header (page size and count, freelist size, schema cookie) is the
    one a transaction reads, ``pragma(name)`` giving that transaction's value of each of
    SNAPSHOT_PRAGMAS (asked only when there is a header): else the map is not the file SQLite
    reads (replaced, or grown by a checkpoint since it was mapped), and a scan of it must not
    stand in for SQL. The one rule for both page readers: ``same_file`` feeds it from a sqlite3
    connection, ``columns.source`` from a column reader's ``Source``."""
    if header is None:
        return False
    return [pragma(p) for p in SNAPSHOT_PRAGMAS] == [header["page_size"], header["page_count"],
                                                     header["freelist_count"], header["schema_cookie"]]


def same_file(pages: _pages.PageFile, conn: sqlite3.Connection) -> bool:
    """Whether the mapped file's header is the one ``conn``'s snapshot reads
    (``header_is_snapshot``)."""
    return header_is_snapshot(pages.header(), lambda p: int(conn.execute(f"PRAGMA {p}").fetchone()[0]))


def root_page(conn: sqlite3.Connection, table: str) -> int | None:
    """The root page of ``table``'s tree, when sqlite_schema records a usable one."""
    row = conn.execute("SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchone()
    root = None if row is None else row[0]
    return root if isinstance(root, int) and not isinstance(root, bool) and 0 < root <= 0xFFFFFFFF else None


def reads_the_file(db_path: os.PathLike[str] | str, conn: sqlite3.Connection,
                   plan: db.ReadPlan | None = None) -> bool:
    """Whether ``conn``'s open read transaction reads the database file alone (it is read
    from first, so its snapshot is fixed): then the file's own pages are that snapshot."""
    conn.execute("SELECT COUNT(*) FROM sqlite_schema").fetchone()
    return conn.in_transaction and db.main_file_is_snapshot(db_path, plan)


def window_bytes() -> int:
    """The bytes of session.db each page walk and scan keeps resident: ``_pages.WINDOW_BYTES``,
    or ``CAPSEM_CORE_PAGE_WINDOW`` (bytes; 0: no bound) where set to a whole number."""
    text = os.environ.get("CAPSEM_CORE_PAGE_WINDOW", "").strip()
    return int(text) if text.isdigit() else _pages.WINDOW_BYTES


def mapped(db_path: os.PathLike[str] | str) -> _pages.PageFile | None:
    """session.db mapped read-only, or None when it cannot be (the SQL then says what is wrong)."""
    try:
        return _pages.PageFile(db_path, window=window_bytes())
    except OSError:
        return None


def map_snapshot(db_path: os.PathLike[str] | str, conn: sqlite3.Connection,
                 plan: db.ReadPlan | None = None) -> _pages.PageFile | None:
    """The mapped session.db when it is the snapshot of ``conn``'s open read transaction
    (which has read already: its snapshot is fixed) and its header is the one SQLite reads,
    else None; the caller closes it. A file too damaged to say is not mapped either: the SQL
    that reads it words the damage."""
    if not (conn.in_transaction and db.main_file_is_snapshot(db_path, plan)):
        return None
    pages = mapped(db_path)
    if pages is None:
        return None
    try:
        same = same_file(pages, conn)
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        same = False
    if not same:
        pages.close()
        return None
    return pages


class HeldMap:
    """session.db mapped once for a reader that reads it again and again (a ``Ledger``), so a
    scan opens nothing: ``for_snapshot(conn)`` gives the map when it is the snapshot of
    ``conn``'s read transaction, mapped anew only when the file has grown past it (a
    checkpoint of a live writer's commits). The caller serialises its calls and closes it."""

    def __init__(self, db_path: os.PathLike[str] | str) -> None:
        self.db_path = db_path
        self.file = mapped(db_path)

    def for_snapshot(self, conn: sqlite3.Connection) -> _pages.PageFile | None:
        if not reads_the_file(self.db_path, conn):
            return None
        if self.file is None or not same_file(self.file, conn):
            self.close()
            self.file = mapped(self.db_path)
            if self.file is not None and not same_file(self.file, conn):
                return None
        return self.file

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


__all__ = ["SNAPSHOT_PRAGMAS", "HeldMap", "affinity", "header_is_snapshot", "map_snapshot", "mapped", "reads_the_file",
           "record_columns", "root_page", "same_file", "utf8", "window_bytes"]
