"""Verify every body of a ledger: the native scan and kernel, turned into findings.

The native kernel (``_archive.verify_bodies``) reads every body back through its segment
hashes and its own hash and returns raw outcomes; this module scans the index, runs it,
and words each failure as a ``BodyFault`` labelled with the row's key, read through the
caller's connection (or a read-only one of its own). A BodyFault is one body's failure;
``check`` turns each into a finding of its report (``capsem_core.check.report.Finding``,
the package's one Finding type). ``Ledger.verify`` and ``check
--verify-bodies`` both come here, so their findings are the same.
"""

from __future__ import annotations

import collections
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from capsem_core import cores, db, index, index_pages
from capsem_core._native import _archive, _errors
from capsem_core.errors import LedgerError
from capsem_core.format import body_hash_text
from capsem_core.paths import archive_path_for

BodyFault = collections.namedtuple(
    "BodyFault",
    "row_id event_id source_table direction block_offset body_offset body_len segment_offset kind message")
BodyFault.__doc__ = ("One body that did not read back through its hashes: its event_body_blobs rowid, "
                     "event_id, source_table and direction (None when the row could not be labelled), "
                     "block_offset, body_offset and body_len as indexed, segment_offset (the failing "
                     "segment's file offset when a segment is at fault, else None), kind (the status "
                     "table's kind, e.g. body_hash) and message (reads like the doctor's).")

Labels = dict[int, tuple[str, str, str]]
_LABEL_CHUNK = 900  # below SQLite's default limit of host parameters per statement


def row_labels(conn: sqlite3.Connection, ids: Sequence[int], db_path: db.PathArg | None = None) -> Labels:
    """{rowid: (event_id, source_table, direction)} of the given event_body_blobs rows, read
    through ``conn``. LedgerError (naming db_path) when the index cannot be read."""
    labels: Labels = {}
    ids = [int(x) for x in ids]
    try:
        for k in range(0, len(ids), _LABEL_CHUNK):
            chunk = ids[k:k + _LABEL_CHUNK]
            q = ("SELECT id, event_id, source_table, direction FROM event_body_blobs WHERE id IN (%s)"
                 % ",".join("?" * len(chunk)))
            for rid, event_id, table, direction in conn.execute(q, chunk):
                labels[rid] = (event_id, table, direction)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read the body index: {exc}", db_path) from exc
    return labels


def _labels_of(ids: Sequence[int], db_path: db.PathArg | None, conn: sqlite3.Connection | None) -> Labels:
    if not len(ids):
        return {}
    if conn is not None:
        return row_labels(conn, ids, db_path)
    if db_path is None:
        return {}
    # The rows the scan already read, from the same file, with what the scan could read of
    # it (a -wal it could not was refused by the scan or is reported by check).
    own = db.connect_readonly(os.fspath(db_path), allow_unread_wal=True)
    try:
        return row_labels(own, ids, db_path)
    finally:
        own.close()


def findings_of(outcome: Any, bodies: dict[str, Any], db_path: db.PathArg | None = None,
                conn: sqlite3.Connection | None = None) -> list[BodyFault]:
    """A BodyFault for every body the kernel did not verify, in archive order, labelled through
    ``conn`` (else a read-only connection to db_path; neither: rows are named by id)."""
    status = outcome.status
    failing = np.flatnonzero(status)
    ids: list[int] = np.asarray(bodies["id"])[failing].tolist() if len(failing) else []
    labels = _labels_of(ids, db_path, conn)
    blk = bodies["block_offset"]; off = bodies["body_offset"]; ln = bodies["body_len"]; dig = bodies["digest"]
    findings = []
    for i in failing.tolist():
        rid = int(bodies["id"][i])
        event_id, table, direction = labels.get(rid, (None, None, None))
        code = int(status[i])
        segment_offset = None
        block = int(blk[i])
        if code in (_errors.CAPSEM_V_BODY_HASH, _errors.CAPSEM_V_BAD_HASH_TEXT, _errors.CAPSEM_V_SPAN):
            kind = _errors.kind(code)
            text = _errors.message(code, at=block, want=body_hash_text(bytes(dig[i])),
                                   got=body_hash_text(bytes(outcome.got[i])))
        else:
            fault = outcome.errors[int(outcome.err_index[i])]
            kind, text = fault.kind, fault.text
            if _errors.status(fault.code).at_segment:
                # The kernel's text names the segment; say which block holds it too.
                segment_offset = int(fault.at)
                if segment_offset != block:
                    text = _errors.IN_BLOCK_TEMPLATE.format(block=block, text=text)
        who = f"{event_id} {table}/{direction}" if event_id is not None else f"row {rid}"
        findings.append(BodyFault(rid, event_id, table, direction, block, int(off[i]), int(ln[i]),
                                segment_offset, kind, f"{who}: {text}"))
    return findings


def verify_bodies(bodies_path: db.PathArg, blocks: dict[str, Any], bodies: dict[str, Any], *, threads: int = 0,
                  progress: Callable[[int, int], None] | None = None, use_libdeflate: bool = True) -> Any:
    """The native kernel over scanned arrays (a VerifyOutcome); see _archive.verify_bodies."""
    return _archive.verify_bodies(bodies_path, blocks, bodies, cores.threads(threads), progress, use_libdeflate)


def verify_ledger(db_path: db.PathArg, bodies_path: db.PathArg | None = None, threads: int = 0,
                  progress: Callable[[int, int], None] | None = None, use_libdeflate: bool = True, *,
                  conn: sqlite3.Connection | None = None,
                  reader: _archive.ArchiveReader | None = None,
                  pages: index_pages.HeldMap | None = None) -> tuple[int, list[BodyFault]]:
    """Scan the body index of db_path and verify every body in bodies_path (default: the
    .bodies beside it). Returns (verified_count, findings). threads (0: one per core) is
    used by the index scan and by the verify workers alike. ``conn``: the caller's
    connection to db_path, on which the scans run and findings are labelled; ``reader``: the
    caller's open reader of the archive, whose map the kernel reads (nothing is opened again);
    ``pages``: the caller's held map of session.db, for the body scan (``index.scan_bodies``)."""
    # Bodies before blocks: each body then names a block recorded at least as late as itself
    # (see check/archive.py), whichever snapshot each scan reads.
    bodies = index.scan_bodies(db_path, threads=threads, conn=conn, pages=pages)
    n = bodies["id"].shape[0]
    if n == 0:
        return 0, []
    blocks = index.scan_blocks(db_path, conn=conn)
    if reader is not None:
        outcome = _archive.verify_bodies_with(reader, blocks, bodies, cores.threads(threads), progress,
                                              use_libdeflate)
    else:
        if bodies_path is None:
            bodies_path = archive_path_for(db_path)
        outcome = _archive.verify_bodies(bodies_path, blocks, bodies, cores.threads(threads), progress,
                                         use_libdeflate)
    findings = findings_of(outcome, bodies, db_path, conn)
    return n - len(findings), findings
