"""The body index as public arrays: every archived body's row, in archive order.

``scan_index`` reads event_body_blobs and body_blocks through the native scans (no Python
object per row) in the caller's read transaction, and joins the key columns to the spans by
row id; ``BodyIndex`` holds the result: numpy arrays for the numbers and digests, a
``TextColumn`` per text key, and the blocks the kernel reads ahead.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from capsem_core import db, index, index_pages
from capsem_core.bodies.columns import Positions, TextColumn
from capsem_core.errors import LedgerError
from capsem_core.format import body_hash_text

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True, eq=False)
class BodyIndex:
    """Every event_body_blobs row, in archive order (block_offset, body_offset, id).

    ``id``, ``block_offset``, ``body_offset``, ``body_len``, ``original_bytes`` (int64),
    ``digest`` ((n, 32) uint8: the row's body_hash decoded; zero where it is malformed),
    ``hash_ok`` (False where body_hash is not "blake3:" + 64 lower-case hex digits),
    ``row_ok`` (False where a span or body_hash column holds another SQL type than it
    should: the row names no body), ``truncated`` (bool), and the keys ``event_id``,
    ``source_table``, ``direction``, ``content_type`` as TextColumns. ``blocks`` is
    body_blocks (block_offset, raw_len, disk_len arrays by offset), which every subset keeps.
    Positions (``index[positions]``, ``Ledger.read_bodies(positions, index=...)``) count
    rows of this order. A snapshot: it never changes as the ledger grows.
    """

    id: I64
    block_offset: I64
    body_offset: I64
    body_len: I64
    digest: npt.NDArray[np.uint8]
    hash_ok: Mask
    row_ok: Mask
    original_bytes: I64
    truncated: Mask
    event_id: TextColumn
    source_table: TextColumn
    direction: TextColumn
    content_type: TextColumn
    blocks: dict[str, I64]

    def __len__(self) -> int:
        return int(self.id.shape[0])

    def take(self, positions: Positions) -> BodyIndex:
        """The rows at ``positions`` (kept in the order given), with the same blocks."""
        positions = np.asarray(positions, np.intp)
        values: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            values[f.name] = v if f.name == "blocks" else (v.take(positions) if isinstance(v, TextColumn)
                                                             else v[positions])
        return BodyIndex(**values)

    def __getitem__(self, key: slice | npt.NDArray[Any]) -> BodyIndex:
        """``index[positions]``, ``index[mask]`` or ``index[a:b]``: the rows chosen."""
        if isinstance(key, slice):
            return self.take(np.arange(len(self))[key])
        key = np.asarray(key)
        return self.take(np.flatnonzero(key) if key.dtype == np.bool_ else key.astype(np.intp, copy=False))

    def key(self, i: int) -> tuple[str | None, str | None, str | None]:
        """(event_id, source_table, direction) of row i."""
        return self.event_id[i], self.source_table[i], self.direction[i]

    def hash_text(self, i: int) -> str:
        """Row i's body hash as the index writes it ("blake3:" + hex)."""
        return body_hash_text(bytes(self.digest[i]))

    def kernel_rows(self) -> dict[str, Any]:
        """The arrays the native verify kernel reads (the scan_bodies layout)."""
        return {"id": self.id, "block_offset": self.block_offset, "body_offset": self.body_offset,
                "body_len": self.body_len, "digest": self.digest, "hash_ok": self.hash_ok}


def _text(keys: dict[str, Any], name: str) -> TextColumn:
    return TextColumn(keys[name + "_data"], keys[name + "_offsets"], keys[name + "_null"])


def scan_index(db_path: db.PathArg, conn: sqlite3.Connection, *, threads: int = 0,
               pages: index_pages.HeldMap | None = None) -> BodyIndex:
    """The whole body index of the ledger at db_path, read through ``conn`` (inside its read
    transaction when it has one open, so the three scans see one snapshot; ``pages``: the
    caller's held map of session.db, used where it is that snapshot). LedgerError naming
    db_path when the index cannot be read."""
    # Where the file is the snapshot, one pass over its pages gives spans and keys alike.
    got = index_pages.scanned(db_path, conn, pages, keys=True) if index.page_scans() else None
    if got is not None:
        bodies, keys = got.bodies, got.keys
    else:
        bodies = index.scan_bodies(db_path, threads=threads, conn=conn)
    blocks = index.scan_blocks(db_path, conn=conn)
    if got is None:
        keys = index.scan_keys(db_path, conn=conn)
    body_id, key_id = bodies["id"], keys["id"]
    texts = {name: _text(keys, name) for name in ("event_id", "source_table", "direction", "content_type")}
    extra: dict[str, Any] = {"original_bytes": keys["original_bytes"], "truncated": keys["truncated"],
                             "row_ok": keys["row_ok"]}
    if not np.array_equal(body_id, key_id):
        # Keys come in rowid order, spans in archive order: line the keys up by row id.
        order = np.argsort(key_id, kind="stable")
        at = np.searchsorted(key_id, body_id, sorter=order)
        at = np.minimum(at, max(len(key_id) - 1, 0))
        if len(body_id) != len(key_id) or (len(body_id) and not np.array_equal(key_id[order[at]], body_id)):
            raise LedgerError("the body index changed while it was read: open the ledger again", db_path)
        pos = order[at]
        texts = {k: v.take(pos) for k, v in texts.items()}  # row numbers only: no bytes move
        extra = {k: v[pos] for k, v in extra.items()}
    return BodyIndex(id=body_id, block_offset=bodies["block_offset"], body_offset=bodies["body_offset"],
                     body_len=bodies["body_len"], digest=bodies["digest"], hash_ok=bodies["hash_ok"],
                     row_ok=extra["row_ok"], original_bytes=extra["original_bytes"], truncated=extra["truncated"],
                     event_id=texts["event_id"], source_table=texts["source_table"], direction=texts["direction"],
                     content_type=texts["content_type"], blocks=blocks)


__all__ = ["BodyIndex", "scan_index"]
