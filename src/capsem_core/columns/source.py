"""Opening a column reader's snapshot of session.db, and the map of the file it may read.

``open_source`` is a ``_columns.Source`` on the read-only URI ``db.py`` chooses (refusing a
``-wal`` whose commits cannot be read, as every reader does), with the one busy timeout.
``HeldFile`` is session.db mapped once for a reader that reads it again and again (a
Ledger's scans, an EventReader's pages), sparing each read its open, map and header check.
Each scan and each page of rows keeps a bounded window of the map resident and drops the
pages behind it (``pages.tables.window_bytes``: 32 MiB, ``CAPSEM_CORE_PAGE_WINDOW``), so
between reads the map holds next to nothing of the file. ``for_snapshot`` gives the map only
where it is the snapshot of the source's open read transaction, by the rule every page
reader follows (``db.main_file_is_snapshot`` once the transaction has read, and
``pages.tables.header_is_snapshot``: the mapped header equal to the one the transaction
reads), mapping the file anew when it has changed (a checkpoint grew it) and answering None
where the pages must not stand in for SQL. It is ``pages.tables.HeldMap``'s counterpart for a column
reader's ``Source`` and ``FileMap`` (the map this native module reads).
"""

from __future__ import annotations

import os
import threading

from capsem_core import db
from capsem_core.bodies.scan import page_scans
from capsem_core._native import _columns
from capsem_core.pages.tables import header_is_snapshot, window_bytes


def open_source(db_path: os.PathLike[str] | str) -> tuple[_columns.Source, db.ReadPlan]:
    """A Source on session.db (no transaction yet) and the plan it was opened with."""
    plan = db.complete_plan(db_path)
    return _columns.Source(plan.uri, db.busy_timeout_ms(), os.fspath(db_path)), plan


class HeldFile:
    """session.db mapped once for a reader that reads it again and again (see the module).
    Thread-safe; ``close`` drops the map (sources and streams reading it keep theirs)."""

    def __init__(self, db_path: os.PathLike[str] | str) -> None:
        self.db_path = os.fspath(db_path)
        self._file: _columns.FileMap | None = None
        self._lock = threading.Lock()

    def for_snapshot(self, source: _columns.Source, plan: db.ReadPlan) -> _columns.FileMap | None:
        """The map, when it is the snapshot of ``source``'s read transaction (which has read
        already); else None. ``CAPSEM_CORE_PAGE_SCANS=0`` answers None always."""
        if not page_scans() or not source.in_transaction or not db.main_file_is_snapshot(self.db_path, plan):
            return None

        def pragma(name: str) -> object:
            return source.fetch(f"PRAGMA {name}")[0][0]

        with self._lock:
            if self._file is not None and header_is_snapshot(self._file.header(), pragma):
                return self._file
            self._drop()
            try:
                self._file = _columns.FileMap(self.db_path, window=window_bytes())
            except OSError:
                return None  # SQL then says what is wrong with the file
            return self._file if header_is_snapshot(self._file.header(), pragma) else None

    def _drop(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        with self._lock:
            self._drop()


__all__ = ["HeldFile", "open_source"]
