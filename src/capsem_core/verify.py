"""Bodies read back through their hashes: the one way the verify kernel is run and its failures
worded.

``run(snapshot, part)`` hands a part of a snapshot's body index (``Part``: rows in archive
order and the blocks they name; by default every body) to the native kernel, on the
snapshot's archive reader: each segment inflated once, segment and body hashes checked, on
every core with the GIL released. Optionally the same pass hands the verified bytes out
(``Into``: into one buffer at given offsets, or into one bytes object each). Every body that
did not verify becomes a ``BodyFault``, labelled with its row's key read through the
snapshot's connection. ``check --verify-bodies`` (through ``check/incremental.py``),
``Ledger.verify``, the bulk reads and a fleet's block ranges all come here, so their faults
read the same.
"""

from __future__ import annotations

import collections
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from capsem_core import cores
from capsem_core._native import _archive, _errors
from capsem_core.bodies.body_index import BodyIndex, Blocks
from capsem_core.errors import LedgerError
from capsem_core.format import body_hash_text

if TYPE_CHECKING:
    from capsem_core.snapshot import Snapshot

BodyFault = collections.namedtuple(
    "BodyFault",
    "row_id event_id source_table direction block_offset body_offset body_len segment_offset kind message")
BodyFault.__doc__ = ("One body that did not read back through its hashes: its event_body_blobs rowid, "
                     "event_id, source_table and direction (None when the row could not be labelled), "
                     "block_offset, body_offset and body_len as indexed, segment_offset (the failing "
                     "segment's file offset when a segment is at fault, else None), kind (the status "
                     "table's kind, e.g. body_hash) and message (reads like the doctor's).")

Labels = dict[int, tuple[str, str, str]]
Progress = Callable[[int, int], None]
_LABEL_CHUNK = 900  # below SQLite's default limit of host parameters per statement


@dataclass(frozen=True, slots=True)
class Part:
    """What one kernel run reads: index rows in archive order and the blocks they name (read
    ahead). ``whole``: every block of the snapshot, whose extent walk the kernel then reuses."""

    rows: BodyIndex
    blocks: Blocks
    whole: bool = False


@dataclass(frozen=True, slots=True)
class Into:
    """Where a run hands the verified bytes out: ``buffer`` at ``offsets`` (one per row), or,
    with ``as_bytes``, one bytes object per row. ``buffers``: the kernel workers' working
    buffers, lent run after run by one bulk read."""

    buffer: npt.NDArray[np.uint8] | None = None
    offsets: npt.NDArray[np.int64] | None = None
    as_bytes: bool = False
    buffers: _archive.KernelBuffers | None = None


@dataclass(frozen=True, slots=True)
class Verified:
    """A run's result: ``status`` per row (0: verified), its faults in archive order, and with
    ``Into(as_bytes=True)`` each row's bytes (None where it did not verify)."""

    status: npt.NDArray[np.uint8]
    faults: list[BodyFault]
    datas: list[bytes | None] | None = None

    @property
    def read_back(self) -> int:
        """Rows handed to the kernel."""
        return int(self.status.shape[0])

    @property
    def verified(self) -> int:
        """Rows that read back through their hashes."""
        return int(self.status.shape[0] - np.count_nonzero(self.status))


def whole(snapshot: Snapshot) -> Part:
    """Every body of the snapshot's index, and every block."""
    index = snapshot.index()
    return Part(index, index.blocks, whole=True)


def run(snapshot: Snapshot, part: Part | None = None, *, threads: int = 0, progress: Progress | None = None,
        into: Into | None = None, use_libdeflate: bool = True,
        read: _archive.VerifyOutcome | None = None) -> Verified:
    """Read ``part`` (default: every body) back through its hashes on ``snapshot``'s archive
    reader, and word every failure (see the module). ``threads``: 0 is the thread budget
    (``capsem_core.cores``); ``progress(bytes_done, bodies_done)`` is called a few times a
    second (one that also has ``begin(total_bytes, total_bodies)`` is told the totals first).
    ``use_libdeflate=False`` streams every deflate segment through zlib alone, the reference the
    fast path must agree with (tests and benchmarks compare the two). ``read``: what
    ``read_back`` returned for the whole of this snapshot, worded here instead of reading
    again."""
    part = part if part is not None else whole(snapshot)
    rows = part.rows
    if len(rows) == 0:
        return Verified(np.zeros(0, np.uint8), [], [] if into is not None and into.as_bytes else None)
    if read is not None:
        if not part.whole or into is not None:
            raise ValueError("a read_back outcome is the whole snapshot's, handed nowhere")
        faults = _faults(read, rows, snapshot.conn, snapshot.db_path) if read.status.any() else []
        return Verified(read.status, faults)
    _tell_totals(progress, rows)
    walk = snapshot.walk if part.whole else None
    datas: list[bytes | None] | None = None
    if into is not None and into.as_bytes:
        outcome, datas = _archive.verify_bodies_into_bytes(snapshot.archive(), part.blocks.arrays(),
                                                           rows.kernel_rows(), cores.threads(threads), use_libdeflate,
                                                           buffers=into.buffers)
    elif into is not None:
        outcome = _kernel(snapshot, part, threads, progress, use_libdeflate, walk, out=into.buffer,
                          out_offset=into.offsets, buffers=into.buffers)
    else:
        outcome = _kernel(snapshot, part, threads, progress, use_libdeflate, walk)
    faults = _faults(outcome, rows, snapshot.conn, snapshot.db_path) if outcome.status.any() else []
    return Verified(outcome.status, faults, datas)


def read_back(snapshot: Snapshot, *, threads: int = 0,
              progress: Progress | None = None) -> _archive.VerifyOutcome | None:
    """Every body of the snapshot read back by the kernel before its extents are walked (the
    kernel walks each block's segments itself, as for any part), unworded: ``run(snapshot,
    read=...)`` words it once the archive check has found the index and the file in agreement.
    A check does this where session.bodies is the larger file of the pair: the kernel's read is
    then the one stream of it, and the walk after it finds the file cached, where the walk
    first read it at the disk's pace while the kernel waited. The kernel bounds every header
    it reads, so an archive the check later finds damaged is read safely, and its outcome is
    dropped. ``progress`` as for ``run``; ``end()``, when it has one, is not called."""
    part = whole(snapshot)
    if len(part.rows) == 0:
        return None
    _tell_totals(progress, part.rows)
    return _kernel(snapshot, part, threads, progress, True, None)


def _tell_totals(progress: Progress | None, rows: BodyIndex) -> None:
    """A progress callback that has ``begin`` is told the bytes and bodies to come."""
    begin = getattr(progress, "begin", None)
    if begin is not None:
        begin(int(rows.body_len.sum()), len(rows))


def _kernel(snapshot: Snapshot, part: Part, threads: int, progress: Progress | None, use_libdeflate: bool,
            walk: _archive.ExtentWalk | None, **out: Any) -> _archive.VerifyOutcome:
    """The native kernel over ``part`` on the snapshot's archive reader (``out``: where it
    hands the verified bytes, see ``Into``)."""
    return _archive.verify_bodies_with(snapshot.archive(), part.blocks.arrays(), part.rows.kernel_rows(),
                                       cores.threads(threads), progress, use_libdeflate, walk, **out)


def verify_ledger(db_path: os.PathLike[str] | str, *, threads: int = 0, progress: Progress | None = None,
                  use_libdeflate: bool = True) -> tuple[int, list[BodyFault]]:
    """Every body of the ledger whose session.db is ``db_path`` read back through its hashes:
    (bodies verified, faults). Opens the ledger's snapshot for the one ``run``; raises
    LedgerError when it cannot be read at all."""
    from capsem_core.snapshot import Snapshot

    with Snapshot.open(db_path) as snapshot:
        done = run(snapshot, threads=threads, progress=progress, use_libdeflate=use_libdeflate)
    return done.verified, done.faults


def row_labels(conn: sqlite3.Connection, ids: Sequence[int], db_path: object = None) -> Labels:
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
        raise LedgerError(f"cannot read the body index: {exc}", db_path) from exc   # type: ignore[arg-type]
    return labels


def _faults(outcome: Any, rows: BodyIndex, conn: sqlite3.Connection, db_path: object) -> list[BodyFault]:
    """A BodyFault for every row the kernel did not verify, in archive order, labelled through
    ``conn``."""
    status = outcome.status
    failing = np.flatnonzero(status)
    labels = row_labels(conn, rows.id[failing].tolist(), db_path)
    faults = []
    for i in failing.tolist():
        rid = int(rows.id[i])
        event_id, table, direction = labels.get(rid, (None, None, None))
        code = int(status[i])
        segment_offset = None
        block = int(rows.block_offset[i])
        if code in (_errors.CAPSEM_V_BODY_HASH, _errors.CAPSEM_V_BAD_HASH_TEXT, _errors.CAPSEM_V_SPAN):
            kind = _errors.kind(code)
            text = _errors.message(code, at=block, want=body_hash_text(bytes(rows.digest[i])),
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
        faults.append(BodyFault(rid, event_id, table, direction, block, int(rows.body_offset[i]),
                                int(rows.body_len[i]), segment_offset, kind, f"{who}: {text}"))
    return faults


__all__ = ["BodyFault", "Into", "Part", "Verified", "read_back", "row_labels", "run", "verify_ledger", "whole"]
