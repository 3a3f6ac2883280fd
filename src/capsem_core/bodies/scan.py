"""The body index read out of a ``Snapshot``, natively: from session.db's own pages where the
file is the snapshot, else through SQLite's C API on the snapshot's own connection.

The page path (``pages/index.py``) reads the spans, digests and keys of event_body_blobs in one
pass over the table's tree, as the SQL scans would give them, and answers None wherever they
could differ; the SQL path (``capsem_core._native._index``) steps statements on the
snapshot's connection, inside its read transaction (the native module opens the plan's URI
itself when the connection is not one it can share). Either way no Python object is made per
row. ``CAPSEM_CORE_PAGE_SCANS=0`` forces the SQL; ``CAPSEM_CORE_SHARE_CONNECTION=0`` the
native module's own connection (tests compare the paths' answers).
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Any

import numpy as np

from capsem_core import cores, db
from capsem_core._native import _index
from capsem_core.bodies.body_index import BodyIndex, BodyKeys, Blocks
from capsem_core.bodies.columns import TextColumn
from capsem_core.errors import LedgerError
from capsem_core.pages.index import Alongside, read_index

if TYPE_CHECKING:
    from capsem_core.snapshot import Snapshot

KEY_TEXTS = ("event_id", "source_table", "direction", "content_type")


def page_scans() -> bool:
    """Whether body scans may read session.db's pages (``CAPSEM_CORE_PAGE_SCANS=0``: never)."""
    return os.environ.get("CAPSEM_CORE_PAGE_SCANS") != "0"


def _shared(conn: sqlite3.Connection) -> sqlite3.Connection | None:
    return None if os.environ.get("CAPSEM_CORE_SHARE_CONNECTION") == "0" else conn


def _sql(snapshot: Snapshot) -> dict[str, Any]:
    """What every native SQL scan takes: the plan's URI, the busy timeout, the file it names
    in an error and the snapshot's connection."""
    return {"busy_ms": db.busy_timeout_ms(), "path": os.fsdecode(snapshot.db_path), "conn": _shared(snapshot.conn)}


def scan_blocks(snapshot: Snapshot) -> Blocks:
    """Every body_blocks row ordered by block_offset."""
    return Blocks.of(_index.scan_blocks(snapshot.plan.uri, **_sql(snapshot)))


def scan_index(snapshot: Snapshot, *, keys: bool, threads: int = 0, alongside: Alongside | None = None) -> BodyIndex:
    """The body index of ``snapshot`` (``keys``: with the key columns). ``alongside``: text
    columns of event_body_blobs another reader wants coded in the same pass over the pages
    (left unread where the SQL path runs). LedgerError naming session.db when the index
    cannot be read."""
    got = (read_index(snapshot.pages, snapshot.conn, keys=keys, alongside=alongside)
           if snapshot.pages is not None and page_scans() else None)
    if got is not None:
        bodies, key_rows = got.bodies, got.keys
    else:
        bodies = _index.scan_bodies(snapshot.plan.uri, threads=cores.threads(threads), **_sql(snapshot))
    # Bodies before blocks: each body then names a block recorded at least as late as itself,
    # whichever snapshot each scan reads (a native scan on its own connection reads its own).
    blocks = scan_blocks(snapshot)
    if keys and got is None:
        key_rows = _index.scan_keys(snapshot.plan.uri, **_sql(snapshot))
    return BodyIndex(id=bodies["id"], block_offset=bodies["block_offset"], body_offset=bodies["body_offset"],
                     body_len=bodies["body_len"], digest=bodies["digest"], hash_ok=bodies["hash_ok"], blocks=blocks,
                     keys=_lined_up(bodies["id"], key_rows, snapshot.db_path) if keys else None)


def _lined_up(body_id: np.ndarray, key_rows: dict[str, Any], db_path: os.PathLike[str]) -> BodyKeys:
    """The keys (in rowid order) lined up with the spans (in archive order) by row id."""
    key_id = key_rows["id"]
    texts = {name: TextColumn(key_rows[name + "_data"], key_rows[name + "_offsets"], key_rows[name + "_null"])
             for name in KEY_TEXTS}
    rest = {"original_bytes": key_rows["original_bytes"], "truncated": key_rows["truncated"],
            "row_ok": key_rows["row_ok"]}
    if not np.array_equal(body_id, key_id):
        order = np.argsort(key_id, kind="stable")
        at = np.minimum(np.searchsorted(key_id, body_id, sorter=order), max(len(key_id) - 1, 0))
        if len(body_id) != len(key_id) or (len(body_id) and not np.array_equal(key_id[order[at]], body_id)):
            raise LedgerError("the body index changed while it was read: open the ledger again", db_path)
        pos = order[at]
        texts = {k: v.take(pos) for k, v in texts.items()}  # row numbers only: no bytes move
        rest = {k: v[pos] for k, v in rest.items()}
    return BodyKeys(texts["event_id"], texts["source_table"], texts["direction"], texts["content_type"],
                    rest["original_bytes"], rest["truncated"], rest["row_ok"])


__all__ = ["page_scans", "scan_blocks", "scan_index"]
