"""What the columns tests compare with: a table's rows as ``SELECT *`` gives them, read with
the text rule the scans document (valid UTF-8 is ``str``, other text ``bytes``), and Arrow
data brought to the same Python values."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa

from capsem_core import schema
from capsem_core.ledger import Ledger


def text_or_bytes(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def select_star(db: Path, table: str, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Every row of ``table`` in rowid order, as the sqlite3 module reads it."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.text_factory = text_or_bytes
    try:
        names = "*" if columns is None else ", ".join(f'"{c}"' for c in columns)
        return conn.execute(f"SELECT {names} FROM {table} ORDER BY _rowid_").fetchall()
    finally:
        conn.close()


def same(a: object, b: object) -> bool:
    """Equal as values, a NaN equal to a NaN, and a float only to a float (1 is not 1.0)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return type(a) is type(b) and a == b


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for row in table.to_pylist()]


def assert_same_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w) and all(same(x, y) for x, y in zip(g, w)), (i, g, w)


def check_every_table(directory: Path, path: str | None = None) -> dict[str, str]:
    """Scan every table of the schema and compare it with SELECT *; returns each table's path."""
    from capsem_core.columns.scan import open_scan

    paths = {}
    db = directory / "session.db"
    with Ledger(directory):
        for table in schema.TABLES:
            scan = open_scan(db, table, path=path)
            paths[table] = scan.path
            assert_same_rows(rows_of(pa.table(scan)), select_star(db, table))
    return paths


def poke(db: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    """One statement on the file, with Capsem's CHECKs off (a hostile or damaged ledger)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(sql, params)
    finally:
        conn.close()
