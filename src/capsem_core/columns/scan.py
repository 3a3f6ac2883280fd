"""``Scan``: one table's rows as a stream of Arrow record batches, read in one snapshot.

``open_scan`` (``Ledger.scan``) opens a read-only connection of the scan's own
(``_columns.Source``, the URI ``db.py`` chooses), starts a read transaction, plans the table
(``columns.plan``), checks ``after`` in that snapshot (``columns.cursor``) and notes where the
snapshot ends. Then it picks the path:

* the pages, when the database file is the transaction's snapshot (``db.main_file_is_snapshot``
  after the transaction has read, and the mapped header equal to the one the transaction
  reads: page size and count, freelist, schema cookie) and the table is one the page reader
  takes: the native first pass reads every record header on all threads, and whatever it
  does not find as SQLite writes it sends the scan to
* SQLite's statements, inside the same transaction (a live writer's WAL, a damaged tree, a
  UTF-16 database, ``CAPSEM_CORE_PAGE_SCANS=0``).

Both measure each column's storage classes before the first batch, so the schema is fixed
before any row is handed out (see ``_native/columns/column_build.h`` for the types). The
pages are the default where both may run: on the million-body sample they read a table
several times faster than the statements (docs/performance.md, "Columns").

The stream is handed out once (``__arrow_c_stream__``); its batches (64k rows, or fewer once
a column holds 64 MiB) are filled ahead by native workers, a few at a time, and freed when
the consumer drops them. The transaction ends when the last batch is handed out or the
consumer releases the stream. After that, ``cursor`` stands after the last row of the snapshot:
``after=`` for the next scan (and, for an event table, for ``Ledger.events``), which then
delivers exactly the rows committed since.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from capsem_core import cores
from capsem_core._native import _columns
from capsem_core.columns import cursor as scan_cursor
from capsem_core.columns.plan import TablePlan, plan_table
from capsem_core.columns.source import HeldFile, open_source
from capsem_core.errors import CursorError, LedgerError
from capsem_core.events import cursor as events_cursor
from capsem_core.events.cursor import Mark

BATCH_ROWS = 1 << 16
BATCH_BYTES = 64 << 20


class Scan:
    """The rows of one table as Arrow record batches: an object with ``__arrow_c_stream__``
    that ``pyarrow.table``, ``polars.DataFrame``, DuckDB and every other Arrow PyCapsule
    consumer read directly. Made by ``Ledger.scan``; read once.

    ``table``, ``columns`` (names, in order), ``path`` ("pages" or "rows": how the rows are
    read), ``classes`` (per column, the storage classes its values hold), ``rows`` (handed
    out so far), ``cursor`` (see the module), ``close()``.
    """

    def __init__(self, db_path: str, table: TablePlan, stream: _columns.Stream, marks: Mapping[str, Mark] | None,
                 start: int | None, start_anchor: bytes | None, end: int | None, end_anchor: bytes | None) -> None:
        self._db_path = db_path
        self._plan = table
        self._stream: _columns.Stream | None = stream
        self._marks = dict(marks) if marks is not None else None
        self._start, self._start_anchor = start, start_anchor
        self._end, self._end_anchor = end, end_anchor
        self._handed_out = False
        self._final: tuple[int, int, int, bool] | None = None

    @property
    def table(self) -> str:
        return self._plan.table

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self._plan.columns)

    @property
    def path(self) -> str:
        """"pages" (read from the mapped file) or "rows" (through SQLite's statements)."""
        return str(self._live().path)

    @property
    def classes(self) -> dict[str, tuple[str, ...]]:
        """Per column, the storage classes its values hold: "null", "integer", "real", "text",
        "text_bytes" (text that is not UTF-8), "blob". One class (NULLs aside) is a plain
        Arrow type; several are a dense union."""
        masks = self._live().masks
        return {c.name: tuple(name for k, name in enumerate(_columns.CLASSES) if mask >> k & 1)
                for c, mask in zip(self._plan.columns, masks)}

    def _live(self) -> _columns.Stream:
        if self._stream is None:
            raise LedgerError("the scan is closed", self._db_path)
        return self._stream

    def __arrow_c_schema__(self) -> Any:
        """The stream's schema, an "arrow_schema" capsule (a struct of the columns)."""
        return self._live().schema()

    def __arrow_c_stream__(self, requested_schema: object = None) -> Any:
        """The rows as an "arrow_array_stream" capsule, once (a second call is a
        RuntimeError). ``requested_schema`` is not honoured: the stream has the one schema
        its values fix (as the PyCapsule protocol allows)."""
        capsule = self._live().export()
        self._handed_out = True
        return capsule

    def _progress(self) -> tuple[int, int, int, bool]:
        if self._final is not None:
            return self._final
        rows, batches, last, done, error = self._live().progress()
        if error is not None:
            raise LedgerError(f"the scan of {self.table} failed: {error}", self._db_path)
        return rows, batches, last, done

    @property
    def rows(self) -> int:
        """Rows handed out so far."""
        return self._progress()[0]

    @property
    def cursor(self) -> str:
        """The cursor after the rows handed out: after the snapshot's last row once the stream
        is consumed, where it started before any batch, else after the last batch handed out.
        An events cursor (``ev1.``) for an event table, a scan cursor (``sc1.``) otherwise."""
        _rows, batches, last, done = self._progress()
        if done:
            position, anchor = self._end, self._end_anchor
        elif batches == 0:
            position, anchor = self._start, self._start_anchor
        else:
            position, anchor = last, _anchor_now(self._db_path, self.table, last)
        if self._marks is None:
            return scan_cursor.encode(scan_cursor.ScanPosition(self.table, position, anchor))
        marks = dict(self._marks)
        if position is not None and position > 0:
            marks[self.table] = Mark(position, anchor)
        elif position is not None:
            raise LedgerError(f"row {position} of {self.table} cannot stand in an events cursor (ids start at 1)",
                              self._db_path)
        return events_cursor.encode(marks)

    def close(self) -> None:
        """Release the stream if it was never handed out (its transaction ends); a stream a
        consumer holds is the consumer's to release. Idempotent."""
        if self._stream is not None:
            self._final = self._progress()
            self._stream = None

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Scan({self.table!r}, {len(self.columns)} columns)"


def _anchor_now(db_path: str, table: str, position: int) -> bytes | None:
    """The anchor of a row read after the scan's snapshot ended (a partly consumed stream):
    rows at or before a snapshot's last position are never rewritten in a ledger, so this is
    the row the scan delivered."""
    source, _plan = open_source(db_path)
    try:
        source.begin()
        return scan_cursor.anchor_at(source, table, position)
    finally:
        source.close()


def _resolve_after(source: _columns.Source, table: TablePlan, after: str, db_path: str,
                   end: int | None) -> tuple[int | None, bytes | None, dict[str, Mark] | None]:
    """(position to start after, its anchor, the events cursor's marks for an event table)."""
    event = scan_cursor.is_event_table(table.table)
    events_cursor.check_after(after)
    if after == "start":
        return None, None, {} if event else None
    if after == "latest":
        return end, scan_cursor.anchor_at(source, table.table, end), {} if event else None
    if after.startswith(events_cursor.PREFIX):
        if not event:
            raise CursorError(f"an events cursor marks event tables, and {table.table} is not one: resume it with "
                              "its scan cursor (sc1.)", db_path)
        marks = events_cursor.decode(after, db_path)
        scan_cursor.check_marks(source, marks, db_path)
        mark = marks.get(table.table)
        return (mark.position, mark.anchor, marks) if mark else (None, None, marks)
    at = scan_cursor.decode(after, db_path)
    if at.table != table.table:
        raise CursorError(f"the cursor is of a scan of {at.table}, not of {table.table}", db_path)
    if event:
        raise CursorError(f"a scan of {table.table} resumes from an events cursor (ev1.)", db_path)
    scan_cursor.check_scan(source, at, db_path)
    return at.position, at.anchor, None


def open_scan(db_path: os.PathLike[str] | str, table: str, *, columns: Sequence[str] | None = None,
              after: str = "start", threads: int = 0, held: HeldFile | None = None, path: str | None = None,
              batch_rows: int = BATCH_ROWS, batch_bytes: int = BATCH_BYTES) -> Scan:
    """A ``Scan`` of ``table`` (see ``Ledger.scan``). ``held``: the caller's map of
    session.db, kept across scans (else the file is mapped for this one). ``path``: "rows"
    forces the statements, for measuring both paths. ``batch_rows``, ``batch_bytes``: where
    batches are cut (at least 1 each), for measuring a stream of many batches."""
    where = os.fspath(db_path)
    source, plan = open_source(where)
    held = held if held is not None else HeldFile(where)
    try:
        source.begin()
        utf8 = source.fetch("PRAGMA encoding")[0][0] == "UTF-8"
        table_plan = plan_table(source, table, columns, utf8)
        end = scan_cursor.latest(source, [table_plan.table])[table_plan.table]
        start, start_anchor, marks = _resolve_after(source, table_plan, after, where, end)
        end_anchor = scan_cursor.anchor_at(source, table_plan.table, end)
        file = held.for_snapshot(source, plan) if path != "rows" and table_plan.pages else None
        source.use_map(file)
        pages = file is not None
        names = [c.name for c in table_plan.columns]
        stream = source.stream(names, threads=cores.threads(threads), batch_rows=max(1, batch_rows),
                               batch_bytes=max(1, batch_bytes), end_txn=True)
        empties = [c.empty for c in table_plan.columns]
        planned = False
        if pages:
            assert table_plan.root is not None
            status = stream.plan_pages([c.record for c in table_plan.columns], [c.real for c in table_plan.columns],
                                       empties, table_plan.root, start)
            planned = status == "ok"
        if not planned:
            source.use_map(None)
            stream.plan_rows(table_plan.select_sql(start is not None), () if start is None else (start,), utf8,
                             empties)
    finally:
        source.close()  # the stream holds the connection and its transaction from here on
    return Scan(where, table_plan, stream, marks, start, start_anchor, end, end_anchor)


__all__ = ["BATCH_BYTES", "BATCH_ROWS", "Scan", "open_scan"]
