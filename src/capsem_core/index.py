"""The body index as arrays: the native scans, opened the way ``capsem_core.db`` decides.

The native module takes an SQLite URI and a busy timeout; this module asks ``db`` for the
read plan of a path (refusing a -wal whose commits it would miss, unless the caller passes
its own plan) and hands the scan that plan's URI. A caller that already holds a connection
to the file (``check``: its read transaction serves the SQL checks too) passes it as
``conn``: the scan then runs on it, in that transaction, and opens nothing for a one-reader
scan; the native module falls back to the URI when the connection is not one it can share
(see ``_index.connection_shareable``). ``CAPSEM_CORE_SHARE_CONNECTION=0`` in the environment
forces that fallback (a test compares the two paths' reports). Inside such a transaction,
where the database file itself is the snapshot, the body scans read the file's own pages
natively (``index_pages``) and fall back to SQL wherever those could differ;
``CAPSEM_CORE_PAGE_SCANS=0`` forces the SQL.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from capsem_core import cores, db, index_pages
from capsem_core._native import _index, _pages
from capsem_core._native._index import PARALLEL_MIN_ROWS, parse_body_hash, sqlite_source_id, sqlite_version
from capsem_core.errors import LedgerError

__all__ = ["page_scans", "scan_bodies", "scan_blocks", "scan_keys", "parse_body_hash", "sqlite_version", "sqlite_source_id",
           "PARALLEL_MIN_ROWS"]


def _existing(db_path: db.PathArg) -> str:
    path = os.fsdecode(os.fspath(db_path))
    if not os.path.isfile(path):
        raise LedgerError("cannot open the body index: no such file", path)
    return path


def _shared(conn: sqlite3.Connection | None) -> sqlite3.Connection | None:
    return None if os.environ.get("CAPSEM_CORE_SHARE_CONNECTION") == "0" else conn


def page_scans() -> bool:
    """Whether body scans may read session.db's pages (``CAPSEM_CORE_PAGE_SCANS=0``: never)."""
    return os.environ.get("CAPSEM_CORE_PAGE_SCANS") != "0"


def scan_bodies(db_path: db.PathArg, *, threads: int = 0, plan: db.ReadPlan | None = None,
                conn: sqlite3.Connection | None = None,
                pages: _pages.PageFile | index_pages.HeldMap | None = None,
                alongside: index_pages.Alongside | None = None) -> dict[str, Any]:
    """Every event_body_blobs row in archive order as arrays (see the native scan_bodies).

    plan: the ReadPlan to open with (default: ``db.complete_plan(db_path)``, which refuses a
    -wal whose commits it cannot read). conn: the caller's connection to db_path, scanned
    on (inside its transaction) when the native module can share it; the caller uses it
    from no other thread until the scan returns. Inside conn's read transaction, where the
    database file is that transaction's snapshot, the rows are read from the file's own
    pages instead (``index_pages``: ``pages``, the caller's map of it or its ``HeldMap``, or
    one made here), as the SQL scan would give them; ``alongside`` then gets more of the rows' columns from
    the same pass (``index_pages.Alongside``)."""
    if page_scans():
        got = index_pages.scanned(db_path, conn, pages, keys=False, alongside=alongside)
        if got is not None:
            return got.bodies
    if plan is None:
        plan = db.complete_plan(os.fsdecode(os.fspath(db_path)))
    path = _existing(db_path)
    return _index.scan_bodies(plan.uri, busy_ms=db.busy_timeout_ms(), path=path, threads=cores.threads(threads),
                              conn=_shared(conn))


def scan_blocks(db_path: db.PathArg, *, plan: db.ReadPlan | None = None,
                conn: sqlite3.Connection | None = None) -> dict[str, Any]:
    """Every body_blocks row ordered by block_offset (block_offset, raw_len, disk_len). plan,
    conn: as for scan_bodies."""
    path = _existing(db_path)
    if plan is None:
        plan = db.complete_plan(path)
    return _index.scan_blocks(plan.uri, busy_ms=db.busy_timeout_ms(), path=path, conn=_shared(conn))


def scan_keys(db_path: db.PathArg, *, plan: db.ReadPlan | None = None,
              conn: sqlite3.Connection | None = None) -> dict[str, Any]:
    """The key columns of every event_body_blobs row in rowid order (id, event_id,
    source_table, direction, content_type as text columns, original_bytes, truncated; see
    the native scan_keys). plan, conn: as for scan_bodies."""
    path = _existing(db_path)
    if plan is None:
        plan = db.complete_plan(path)
    return _index.scan_keys(plan.uri, busy_ms=db.busy_timeout_ms(), path=path, conn=_shared(conn))
