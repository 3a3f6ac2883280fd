"""The body index read from session.db's own pages, in one native pass.

``capsem_core.index`` reads event_body_blobs through SQLite: ``scan_bodies`` the spans and
digests, ``scan_keys`` the keys, each stepping a statement row by row (about 0.3 and 0.5 s
for a million rows on one core). Where the database file is the reader's snapshot (no
``-wal`` holds a page: ``db.main_file_is_snapshot``), the same columns are read here from
the mapped file's table tree (``_pages.PageFile.records``: no SQL, no object per row) into
both layouts at once, as the SQL scans would give them: a NULL integer reads as 0, a span
column that is not an INTEGER or a body_hash that is not a TEXT makes the row's ``row_ok``
False, a body_hash that is not "blake3:" + 64 lower-case hex digits gives a zero digest and
``hash_ok`` False. A value SQLite would convert on the way out (an integer in a key column,
a text in a span column) is one this pass does not read as SQL would, so then, as for a
table that is not a plain rowid table, a database not in UTF-8 or a damaged tree, it answers
None and the caller runs the SQL scans.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from capsem_core import db, page_tables
from capsem_core._native import _index, _pages

TABLE = "event_body_blobs"
KEY_TEXTS = ("event_id", "source_table", "direction", "content_type")
INTEGERS = ("id", "original_bytes", "truncated", "block_offset", "body_offset", "body_len")
COLUMNS = ("id", *KEY_TEXTS, "original_bytes", "truncated", "body_hash", "block_offset", "body_offset", "body_len")
SPANS = ("block_offset", "body_offset", "body_len")
BODY_COLUMNS = ("id", "body_hash", *SPANS)


@dataclass(frozen=True, slots=True)
class PageIndex:
    """The body index as both SQL scans lay it out: ``bodies`` as ``index.scan_bodies`` (in
    archive order), ``keys`` as ``index.scan_keys`` (in rowid order)."""

    bodies: dict[str, Any]
    keys: dict[str, Any]


class Alongside:
    """Text columns of event_body_blobs another reader wants from the same pass, as codes in
    the ``Codes`` it gives (``codes``: column name -> Codes; read only where those columns are
    plain TEXT, compared byte for byte). After the pass, ``rows`` and ``columns`` (name ->
    int64 codes, rowid order) and ``odd`` (the names holding a value of another kind) are
    set when it read them, and ``done`` is set either way (by whoever runs the pass, also when
    it does not run or falls back to SQL), so the other reader waits for it before it uses
    those Codes itself."""

    def __init__(self, codes: dict[str, _pages.Codes]) -> None:
        self.codes = codes
        self.rows: int | None = None
        self.columns: dict[str, npt.NDArray[np.int64]] = {}
        self.odd: frozenset[str] = frozenset()
        self.done = threading.Event()


def open_snapshot(db_path: os.PathLike[str] | str, conn: sqlite3.Connection) -> _pages.PageFile | None:
    """The mapped session.db when it is the snapshot of ``conn``'s open read transaction
    (which this reads from first, so the snapshot is fixed), else None; the caller closes it.
    A file that cannot be mapped is None too: the SQL scans then say what is wrong with it."""
    return _mapped(db_path) if _reads_the_file(db_path, conn) else None


class HeldMap:
    """session.db mapped once for a reader that scans it again and again (a ``Ledger``), so a
    scan opens nothing: ``for_snapshot(conn)`` gives the map when it is the snapshot of
    ``conn``'s read transaction, mapped anew only when the file has grown past it (a
    checkpoint of a live writer's commits). The caller serialises its calls and closes it."""

    def __init__(self, db_path: os.PathLike[str] | str) -> None:
        self.db_path = db_path
        self.file = _mapped(db_path)

    def for_snapshot(self, conn: sqlite3.Connection) -> _pages.PageFile | None:
        if not _reads_the_file(self.db_path, conn):
            return None
        if self.file is None or not page_tables.same_file(self.file, conn):
            self.close()
            self.file = _mapped(self.db_path)
        return self.file

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _mapped(db_path: os.PathLike[str] | str) -> _pages.PageFile | None:
    try:
        return _pages.PageFile(db_path)
    except OSError:
        return None


def _reads_the_file(db_path: os.PathLike[str] | str, conn: sqlite3.Connection) -> bool:
    """Whether ``conn``'s read transaction reads the database file alone (read from first, so
    its snapshot is fixed)."""
    conn.execute("SELECT COUNT(*) FROM sqlite_schema").fetchone()
    return conn.in_transaction and db.main_file_is_snapshot(db_path)


def _integer(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """SQLite's integer of a column: NULL reads as 0."""
    return np.where(values == _pages.NULL_VALUE, 0, values)


def _text(values: npt.NDArray[np.int64], data: npt.NDArray[np.uint8] | None) -> dict[str, Any]:
    """A TEXT column's (data, offsets, null), as scan_keys lays a text column out."""
    raw = data if data is not None else np.zeros(0, np.uint8)
    null = values < 0
    offsets = np.empty(values.shape[0] + 1, np.int64)
    np.copyto(offsets[:-1], np.where(null, -1 - values, values))
    offsets[-1] = raw.shape[0]
    return {"data": raw, "offsets": offsets, "null": null}


def read_index(pages: _pages.PageFile, conn: sqlite3.Connection, *, keys: bool = True,
               alongside: Alongside | None = None) -> PageIndex | None:
    """The body index from ``pages``, the mapped session.db that is the snapshot of ``conn``'s
    read transaction (``conn`` is read for the schema); None when the pages cannot give
    exactly what the SQL scans would (see the module). ``keys``: read the key columns too
    (else ``PageIndex.keys`` is empty: what scan_bodies alone needs). ``alongside``: more
    columns to code in the same pass (its ``done`` is the caller's to set)."""
    if not page_tables.utf8(conn) or not page_tables.same_file(pages, conn):
        return None
    root = page_tables.root_page(conn, TABLE)
    wanted = COLUMNS if keys else BODY_COLUMNS
    columns = page_tables.record_columns(conn, TABLE, wanted, INTEGERS, plain_text=False)
    if root is None or columns is None:
        return None
    kinds: dict[str, str | _pages.Codes] = {**{name: _pages.TEXT for name in KEY_TEXTS}, "body_hash": _pages.DIGEST}
    extra = _alongside_columns(conn, alongside)
    if extra and alongside is not None:
        columns = sorted(columns + extra)
        kinds.update(alongside.codes)
    scanned = pages.records(root, [(cid, kinds.get(name)) for cid, name in columns])
    extra_names = {name for _c, name in extra}
    if scanned.status != "ok" or any(odd for (_c, name), odd in zip(columns, scanned.odd) if name not in extra_names):
        return None
    values = {name: v for (_c, name), v in zip(columns, scanned.values)}
    data = {name: d for (_c, name), d in zip(columns, scanned.data)}
    if extra and alongside is not None:
        alongside.rows = int(scanned.rows)
        alongside.columns = {name: values[name] for name in extra_names}
        alongside.odd = frozenset(name for (_c, name), odd in zip(columns, scanned.odd) if odd and name in extra_names)
    state, digest = values["body_hash"], data["body_hash"]
    assert digest is not None
    ids = values["id"]
    spans = {name: _integer(values[name]) for name in SPANS}
    bodies = {"id": ids, **spans, "digest": digest, "hash_ok": state == 1}
    if not keys:
        return PageIndex(_index.archive_order(bodies), {})
    row_ok = state >= 0
    for name in SPANS:
        row_ok &= values[name] != _pages.NULL_VALUE
    key_rows: dict[str, Any] = {"id": ids.copy(), "original_bytes": _integer(values["original_bytes"]),
                                "truncated": _integer(values["truncated"]) != 0, "row_ok": row_ok}
    for name in KEY_TEXTS:
        for part, array in _text(values[name], data[name]).items():
            key_rows[f"{name}_{part}"] = array
    return PageIndex(_index.archive_order(bodies), key_rows)


def _alongside_columns(conn: sqlite3.Connection, alongside: Alongside | None) -> list[tuple[int, str]]:
    """(record column, name) of the alongside columns, where they are plain TEXT columns."""
    if alongside is None or not alongside.codes:
        return []
    return page_tables.record_columns(conn, TABLE, sorted(alongside.codes), (), plain_text=True) or []


def scanned(db_path: os.PathLike[str] | str, conn: sqlite3.Connection | None,
            pages: _pages.PageFile | HeldMap | None, *, keys: bool,
            alongside: Alongside | None = None) -> PageIndex | None:
    """``read_index`` where it can run: on ``pages`` (the caller's mapped snapshot of
    ``conn``'s transaction, or its ``HeldMap`` when that is the snapshot), else on session.db
    mapped here when it is that snapshot; None without a read transaction on ``conn`` or
    when the pages cannot serve (the SQL scans then run)."""
    if conn is None or not conn.in_transaction:
        return None
    if isinstance(pages, HeldMap):
        held = pages.for_snapshot(conn)
        return read_index(held, conn, keys=keys, alongside=alongside) if held is not None else None
    if pages is not None:
        return read_index(pages, conn, keys=keys, alongside=alongside)
    mapped = open_snapshot(db_path, conn)
    if mapped is None:
        return None
    try:
        return read_index(mapped, conn, keys=keys, alongside=alongside)
    finally:
        mapped.close()


__all__ = ["Alongside", "HeldMap", "PageIndex", "open_snapshot", "read_index", "scanned"]
