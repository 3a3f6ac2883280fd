"""The body index read from session.db's own pages, in one native pass.

``capsem_core.bodies.scan`` reads event_body_blobs through SQLite: the spans and digests, then
the keys, each stepping a statement row by row (about 0.3 and 0.5 s for a million rows on
one core). Where the database file is the reader's snapshot (no ``-wal`` holds a page:
``db.main_file_is_snapshot``), the same columns are read here from
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

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from capsem_core._native import _index, _pages
from capsem_core.pages import tables

TABLE = "event_body_blobs"
KEY_TEXTS = ("event_id", "source_table", "direction", "content_type")
INTEGERS = ("id", "original_bytes", "truncated", "block_offset", "body_offset", "body_len")
COLUMNS = ("id", *KEY_TEXTS, "original_bytes", "truncated", "body_hash", "block_offset", "body_offset", "body_len")
SPANS = ("block_offset", "body_offset", "body_len")
BODY_COLUMNS = ("id", "body_hash", *SPANS)


class PageIndex(NamedTuple):
    """The body index as both SQL scans lay it out: ``bodies`` as ``_index.scan_bodies`` (in
    archive order), ``keys`` as ``_index.scan_keys`` (in rowid order)."""

    bodies: dict[str, Any]
    keys: dict[str, Any]


@dataclass(slots=True)
class Alongside:
    """Text columns of event_body_blobs another reader wants from the same pass, as codes in
    the ``Codes`` it gives (``codes``: column name -> Codes; read only where those columns are
    plain TEXT, compared byte for byte). After the pass, ``rows`` and ``columns`` (name ->
    int64 codes, rowid order) and ``odd`` (the names holding a value of another kind) are
    set where it read them; ``rows`` stays None where it did not (the other reader then reads
    those columns itself, after the pass: its codes are the pass's meanwhile). ``keep``, when
    given, is applied to the columns as the pass ends, and ``columns`` holds what it returns:
    what the other reader keeps of them (so the rest need not live as long as the index)."""

    codes: dict[str, _pages.Codes]
    rows: int | None = None
    columns: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    odd: frozenset[str] = frozenset()
    keep: Callable[[dict[str, npt.NDArray[np.int64]]], dict[str, npt.NDArray[np.int64]]] | None = None


def _integer(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """SQLite's integer of a column, in place (the scan's own array): NULL reads as 0."""
    values[values == _pages.NULL_VALUE] = 0
    return values


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
    columns to code in the same pass."""
    if not tables.utf8(conn) or not tables.same_file(pages, conn):
        return None
    root = tables.root_page(conn, TABLE)
    wanted = COLUMNS if keys else BODY_COLUMNS
    columns = tables.record_columns(conn, TABLE, wanted, INTEGERS, plain_text=False)
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
        read = {name: values.pop(name) for name in extra_names}
        alongside.columns = alongside.keep(read) if alongside.keep is not None else read
        del read
        alongside.odd = frozenset(name for (_c, name), odd in zip(columns, scanned.odd) if odd and name in extra_names)
    del scanned   # from here each array has one holder: archive_order sorts it in place
    state, digest = values.pop("body_hash"), data["body_hash"]
    assert digest is not None
    key_rows: dict[str, Any] = {}
    if keys:
        row_ok = state >= 0
        for name in SPANS:
            row_ok &= values[name] != _pages.NULL_VALUE
        key_rows = {"id": values["id"].copy(), "original_bytes": _integer(values.pop("original_bytes")),
                    "truncated": _integer(values.pop("truncated")) != 0, "row_ok": row_ok}
        for name in KEY_TEXTS:
            for part, array in _text(values.pop(name), data[name]).items():
                key_rows[f"{name}_{part}"] = array
    bodies = {"id": values.pop("id"), **{name: _integer(values.pop(name)) for name in SPANS}, "digest": digest,
              "hash_ok": state == 1}
    del state, digest, data, values
    return PageIndex(_index.archive_order(bodies), key_rows)


def _alongside_columns(conn: sqlite3.Connection, alongside: Alongside | None) -> list[tuple[int, str]]:
    """(record column, name) of the alongside columns, where they are plain TEXT columns."""
    if alongside is None or not alongside.codes:
        return []
    return tables.record_columns(conn, TABLE, sorted(alongside.codes), (), plain_text=True) or []


__all__ = ["Alongside", "PageIndex", "read_index"]
