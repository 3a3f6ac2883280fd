"""Where a column scan finds a table's values, and whether it may read them from the pages.

Everything here is asked of one ``_columns.Source`` inside its read transaction, so the plan,
the cursor checks and the rows all describe one snapshot. A table is one of the schema's
(``capsem_core.schema.TABLES``: anything else is a ValueError listing them); its columns
come from ``pragma_table_xinfo`` in declared order. For each column the plan keeps:

* where its value is: the record column (``cid``, for a table with no generated columns),
  or the rowid for an ``INTEGER PRIMARY KEY`` (SQLite stores NULL in its record column);
* whether it has REAL affinity: SQLite stores a REAL column's integral values as integers
  and converts them back when it reads them, and so must a reader of the pages;
* the storage class its declared affinity suggests, which types the column when it holds
  nothing but NULLs (or the table no rows): INTEGER and NUMERIC int64, REAL float64, TEXT
  utf8, BLOB (or none) binary.

The page path is allowed only for a plain rowid table (no WITHOUT ROWID, no hidden or
generated column) in a UTF-8 database; the caller adds the snapshot rule (``db.main_file_is_snapshot`` and the mapped
header matching the transaction's). Every other table is read through SQL, which orders
rows by the rowid, named by the table's INTEGER PRIMARY KEY or by ``rowid`` / ``_rowid_`` /
``oid`` where no column takes that name (a table shadowing all three is refused).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from capsem_core import schema
from capsem_core._native import _columns
from capsem_core.pages.tables import affinity

_AFFINITY_CLASS = {"INTEGER": _columns.CLASS_INTEGER, "NUMERIC": _columns.CLASS_INTEGER,
                   "REAL": _columns.CLASS_REAL, "TEXT": _columns.CLASS_TEXT, "BLOB": _columns.CLASS_BLOB}
_ROWID_NAMES = ("rowid", "_rowid_", "oid")


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a scan: its name, where its value is (``record``: the record column, or
    ``_columns.ROWID``), REAL affinity, and the class it takes when it holds only NULLs."""

    name: str
    record: int
    real: bool
    empty: int


@dataclass(frozen=True, slots=True)
class TablePlan:
    """A table as a scan reads it: the chosen columns in order, the rowid's SQL name, its
    tree's root page, and whether the page path may read it."""

    table: str
    columns: tuple[Column, ...]
    rowid: str
    root: int | None
    pages: bool

    def select_sql(self, after: bool, limit: bool = False) -> str:
        """The statement path's query: the columns, then the rowid, in rowid order (``?1``
        the position to start after; ``?2`` the row limit)."""
        rowid = quote(self.rowid)
        names = ", ".join([quote(c.name) for c in self.columns] + [rowid])
        where = f" WHERE {rowid} > ?1" if after else ""
        tail = f" LIMIT ?{2 if after else 1}" if limit else ""
        return f"SELECT {names} FROM {quote(self.table)}{where} ORDER BY {rowid}{tail}"


def quote(name: str) -> str:
    """An SQL identifier, double-quoted."""
    return '"' + name.replace('"', '""') + '"'


def check_table(table: object) -> str:
    """``table`` when it is a table of the schema; ValueError listing them otherwise."""
    if not isinstance(table, str) or table not in schema.TABLES:
        raise ValueError(f"not a table of the ledger: {table!r}; the tables are {', '.join(schema.TABLES)}")
    return table


def plan_table(source: _columns.Source, table: str, columns: Sequence[str] | None, utf8: bool) -> TablePlan:
    """The plan of ``table`` in ``source``'s snapshot (see the module). ``columns``: None for
    every column in declared order, else those names in that order (ValueError for a name
    that is not a column of the table, or one named twice)."""
    check_table(table)
    found = source.fetch("SELECT sql, rootpage FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,))
    if not found:
        raise ValueError(f"the ledger has no table {table!r}")
    sql, root = found[0]
    info = source.fetch("SELECT cid, name, type, pk, hidden FROM pragma_table_xinfo(?)", (table,))
    text = sql.upper() if isinstance(sql, str) else ""
    without_rowid = re.search(r"\)\s*WITHOUT\s+ROWID", text) is not None
    hidden = any(h for *_rest, h in info)
    keys = [row for row in info if row[3]]
    ipk = None
    if len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER" and not without_rowid \
            and not re.search(r"PRIMARY\s+KEY\s+DESC", text):
        ipk = keys[0][1]
    names = [str(row[1]) for row in info if not row[4]]
    if columns is None:
        chosen = names
    else:
        if isinstance(columns, str):
            raise TypeError("columns is a list of column names (or None for all)")
        chosen = [str(c) for c in columns]
        unknown = [c for c in chosen if c not in names]
        if unknown:
            raise ValueError(f"not a column of {table}: {', '.join(map(repr, unknown))}; its columns are "
                             + ", ".join(names))
        if len(set(chosen)) != len(chosen):
            raise ValueError("a column is named twice")
    by_name = {str(row[1]): (row[0] if type(row[0]) is int else -1, affinity(str(row[2] or ""))) for row in info}
    plan_columns = tuple(
        Column(name, _columns.ROWID if name == ipk else by_name[name][0], by_name[name][1] == "REAL",
               _AFFINITY_CLASS[by_name[name][1]])
        for name in chosen)
    if ipk is not None:
        rowid = str(ipk)
    else:
        lowered = {n.lower() for n in names}
        spare = [n for n in _ROWID_NAMES if n not in lowered]
        if without_rowid or not spare:
            raise ValueError(f"{table} has no rowid this reader can address (WITHOUT ROWID, or every name of the "
                             "rowid taken by a column)")
        rowid = spare[0]
    root_page = root if isinstance(root, int) and 0 < root <= 0xFFFFFFFF else None
    pages = bool(utf8 and not without_rowid and not hidden and root_page is not None)
    return TablePlan(table, plan_columns, rowid, root_page, pages)


__all__ = ["Column", "TablePlan", "affinity", "check_table", "plan_table", "quote"]
