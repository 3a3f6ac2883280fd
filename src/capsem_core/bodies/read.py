"""The bulk read: which bodies (a selection), in what batches, read by the verify kernel.

A selection (everything, one table, a list of (event_id, source_table, direction) keys, or
positions into a BodyIndex) resolves to sorted positions with numpy over the index arrays;
``plan_batches`` cuts them into runs of at most ``max_bytes`` body bytes, at block
boundaries where it can; ``read_batch`` hands one run to the native kernel, which inflates
each segment once, verifies every body and copies each verified body to its precomputed
slot of one buffer. What the caller asked for decides what damage does: ``raise`` (the
first failure's exception), ``skip`` (left out, listed in ``findings``) or ``report``
(kept in place, empty, ``ok`` False, listed).
"""

from __future__ import annotations

import mmap
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from capsem_core import verify
from capsem_core._native import _archive, _errors
from capsem_core.bodies.batch import BodyBatch
from capsem_core.bodies.body_index import BodyIndex
from capsem_core.bodies.columns import Positions
from capsem_core.errors import LedgerError
from capsem_core.format import MAX_BLOCK_RAW_BYTES
from capsem_core.schema.vocabulary import BODY_DIRECTIONS, BODY_SOURCE_TABLES

if TYPE_CHECKING:
    from capsem_core.snapshot import Snapshot

Errors = Literal["raise", "skip", "report"]
ERRORS: tuple[str, ...] = ("raise", "skip", "report")
Key = tuple[str, str, str]
Selection = None | str | Sequence[Key] | Sequence[int] | npt.NDArray[np.integer[Any]]

# Bodies past this many bytes in one batch start the next one (body_batches' default).
DEFAULT_BATCH_BYTES = 64 << 20
_KEY_LOOKUP = ("SELECT id FROM event_body_blobs WHERE event_id = ? AND source_table = ? AND direction = ?")


# Buffers this large are mapped with MAP_POPULATE: the kernel fills the page tables in one
# call, instead of one fault per page as the copy first touches it (and no transparent-huge
# -page compaction stalls, which numpy's madvise invites for large arrays).
_POPULATE_MIN = 1 << 20


def _region(size: int) -> mmap.mmap:
    """A fresh anonymous region of ``size`` bytes, its pages faulted in up front."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    try:
        return mmap.mmap(-1, size, flags=flags)
    except OSError as exc:   # as numpy's own allocations say it, not as an I/O error
        raise MemoryError(f"cannot allocate a batch buffer of {size:,} bytes: {exc.strerror}") from None


def new_buffer(size: int) -> npt.NDArray[np.uint8]:
    """A writable uint8 buffer of ``size`` bytes for a batch (its contents undefined)."""
    if size < _POPULATE_MIN:
        return np.empty(size, np.uint8)
    return np.frombuffer(_region(size), np.uint8)


class BufferPool:
    """Batch buffers that come back once their batch is gone, for a stream of batches
    (``body_batches``): a buffer returns to the pool when nothing holds it any more (not the
    batch, nor a memoryview of one of its bodies, nor an Arrow array lent its bytes), so a
    stream whose consumer drops each batch reuses the same one or two regions, faulted in
    once, instead of mapping fresh pages per batch. At most ``keep`` regions wait in the
    pool; a batch asked for while every region is held gets a new one."""

    def __init__(self, keep: int = 2) -> None:
        self._keep = keep
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self, size: int, capacity: int) -> npt.NDArray[np.uint8]:
        """A writable buffer of ``size`` bytes, from a region of at least ``capacity``
        (regions are sized for the stream's largest batch, so each serves every batch)."""
        if size < _POPULATE_MIN:
            return np.empty(size, np.uint8)
        with self._lock:
            fits = [r for r in self._free if len(r) >= size]
            region = min(fits, key=len) if fits else None
            if region is not None:
                self._free.remove(region)
        if region is None:
            region = _region(max(size, capacity))
        buffer = np.frombuffer(region, np.uint8, count=size)
        weakref.finalize(buffer, self._give_back, region)
        return buffer

    def _give_back(self, region: mmap.mmap) -> None:
        # Called as the last holder goes (its export of the region is released just after):
        # a region the pool does not keep is left to be freed with it.
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(region)


def check_errors(errors: str) -> None:
    if errors not in ERRORS:
        raise ValueError(f"errors is one of {', '.join(ERRORS)}, not {errors!r}")


def check_max_bytes(max_bytes: object, least: int = 1, name: str = "max_bytes") -> None:
    """A byte bound (``max_bytes=``, ``block_cache_bytes=``: ``name``) as given, checked: an
    int (not a bool) of at least ``least``; TypeError or ValueError naming it otherwise. NaN
    compared false with every total, so it read as no bound at all (the whole selection in
    one buffer), and inf as a cache without a bound."""
    if type(max_bytes) is not int:
        raise TypeError(f"{name} is an int, not {type(max_bytes).__name__}")
    if max_bytes < least:
        raise ValueError(f"{name} is at least {least}, not {max_bytes}")


def check_body_table(name: object) -> str:
    """``name`` when it is a table Capsem's schema lets event_body_blobs name, else ValueError
    listing them: a misspelt table must never read as "no bodies"."""
    if name not in BODY_SOURCE_TABLES:
        raise ValueError(f"not a body table: {name!r}; the body tables are {', '.join(BODY_SOURCE_TABLES)}")
    return str(name)


def check_body_key(source_table: object, direction: object) -> None:
    """ValueError for a table or a direction no body can have (see ``check_body_table``)."""
    check_body_table(source_table)
    if direction not in BODY_DIRECTIONS:
        raise ValueError(f"not a body direction: {direction!r}; the directions are {', '.join(BODY_DIRECTIONS)}")


def resolve(selection: Selection, idx: BodyIndex, conn: sqlite3.Connection, db_path: Path) -> Positions:
    """Sorted, distinct positions into ``idx`` of the bodies ``selection`` names.

    None: every body; a str: every body of that source_table (ValueError for a name that is
    not a body table); an integer array or a list
    of ints: those positions (IndexError outside the index); a list of (event_id,
    source_table, direction) keys: those bodies, looked up through ``conn`` (in the read
    transaction the index was scanned in) - KeyError for a key the index does not hold."""
    n = len(idx)
    if selection is None:
        return np.arange(n, dtype=np.intp)
    if isinstance(selection, str):
        check_body_table(selection)
        return np.flatnonzero(idx.source_table.equals(selection))
    if isinstance(selection, np.ndarray) or (isinstance(selection, Sequence) and len(selection)
                                              and not isinstance(selection[0], tuple)):
        pos = np.asarray(selection)
        if pos.dtype == np.bool_ or not np.issubdtype(pos.dtype, np.integer):
            raise TypeError("positions are integers (use index[mask] for a mask)")
        pos = pos.astype(np.intp, copy=False).reshape(-1)
        if pos.shape[0] and (pos.min() < 0 or pos.max() >= n):
            raise IndexError(f"a position is outside the {n}-row body index")
        return np.unique(pos)
    if isinstance(selection, Sequence):
        return _key_positions(selection, idx, conn, db_path)  # type: ignore[arg-type]
    raise TypeError(f"a body selection is None, a table name, keys or positions, not {type(selection).__name__}")


def _key_positions(keys: Sequence[Key], idx: BodyIndex, conn: sqlite3.Connection, db_path: Path) -> Positions:
    ids = np.empty(len(keys), np.int64)
    try:
        for k, key in enumerate(keys):
            if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(p, str) for p in key)):
                raise TypeError("a body key is (event_id, source_table, direction), three strings")
            row = conn.execute(_KEY_LOOKUP, key).fetchone()
            if row is None or type(row[0]) is not int:
                raise KeyError(key)
            ids[k] = row[0]
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"query failed: {exc}", db_path) from None
    order = np.argsort(idx.id, kind="stable")
    at = np.searchsorted(idx.id, ids, sorter=order)
    at = np.minimum(at, max(len(idx) - 1, 0))
    pos = order[at] if len(idx) else np.zeros(0, np.intp)
    missing = np.flatnonzero(idx.id[pos] != ids) if len(idx) else np.arange(len(keys))
    if missing.shape[0]:
        raise KeyError(keys[int(missing[0])])
    return np.unique(pos.astype(np.intp))


def in_block(idx: BodyIndex, positions: Positions) -> npt.NDArray[np.bool_]:
    """Per chosen row: whether its span lies inside a block body_blocks lists (within that
    block's raw_len). A batch is sized from the rows' own lengths, so only these may claim
    bytes: a forged index could otherwise claim 16 MiB per row of a block holding a few
    hundred bytes (a row naming a block no body_blocks row lists breaks its foreign key). The
    block's raw_len is read from disk too: one over the format's largest block claims nothing."""
    blocks = idx.blocks
    if not len(blocks):
        return np.zeros(positions.shape[0], np.bool_)
    blk = idx.block_offset[positions]
    at = np.minimum(np.searchsorted(blocks.block_offset, blk), len(blocks) - 1)
    off, lens, raw = idx.body_offset[positions], idx.body_len[positions], blocks.raw_len[at]
    listed = (blocks.block_offset[at] == blk) & (raw >= 0) & (raw <= MAX_BLOCK_RAW_BYTES)
    inside = (off >= 0) & (lens >= 0) & (off <= raw) & (lens <= raw - off)
    ok: npt.NDArray[np.bool_] = listed & inside & idx.row_ok[positions]
    return ok


def slot_lengths(idx: BodyIndex, positions: Positions) -> npt.NDArray[np.int64]:
    """Bytes each chosen body takes in a batch: its length, 0 for a row that names no body
    (a non-integer column, a span outside the block body_blocks lists for it)."""
    return np.where(in_block(idx, positions), idx.body_len[positions], 0)


def plan_batches(idx: BodyIndex, positions: Positions, max_bytes: int) -> list[tuple[int, int]]:
    """[start, end) runs of ``positions`` holding at most max_bytes body bytes each, cut at a
    block boundary when the run holds one (so a block is inflated once); a body larger than
    max_bytes is a batch of its own."""
    if max_bytes < 1:
        raise ValueError("max_bytes is at least 1")
    n = positions.shape[0]
    if n == 0:
        return []
    cum = np.cumsum(slot_lengths(idx, positions))
    blk = idx.block_offset[positions]
    runs = []
    start = 0
    while start < n:
        before = int(cum[start - 1]) if start else 0
        end = int(np.searchsorted(cum, before + max_bytes, side="right"))
        end = max(end, start + 1)
        if end < n and blk[end] == blk[end - 1]:
            first = int(np.searchsorted(blk, blk[end], side="left"))
            if first > start:
                end = first
        runs.append((start, end))
        start = end
    return runs


def _index_fault(idx: BodyIndex, i: int) -> verify.BodyFault:
    event_id, table, direction = idx.key(i)
    where = (int(idx.block_offset[i]), int(idx.body_offset[i]), int(idx.body_len[i]))
    if idx.row_ok[i]:
        return verify.BodyFault(int(idx.id[i]), event_id, table, direction, *where, None, "out_of_range",
                                f"{event_id} {table}/{direction}: body reference out of range for its block "
                                f"(block {where[0]}: body_blocks lists no such block, or a shorter one)")
    text = "a non-integer span or a non-text body_hash: the row names no body"
    return verify.BodyFault(int(idx.id[i]), event_id, table, direction, *where, None, "index",
                            f"{event_id} {table}/{direction}: event_body_blobs row {text}")


def fault_error(fault: verify.BodyFault, db_path: Path, bodies_path: Path) -> LedgerError:
    """The exception ``read_body`` raises for the damage a fault names (its class from the
    status table's kind), worded as the fault is."""
    if fault.kind == "index":
        return LedgerError(fault.message, db_path)
    for status in _errors.STATUSES:
        if status.kind == fault.kind and status.exception:
            cls = _errors.exception_class(status.code)
            if isinstance(cls, type) and issubclass(cls, LedgerError):
                return cls(fault.message, bodies_path)
    return LedgerError(fault.message, bodies_path)


class Scratch:
    """What batch after batch of one bulk read reuses: the kernel workers' own buffers (a
    block's raw bytes, the inflater's). Without them each batch mapped and faulted a block's
    worth of fresh pages per worker: 81,000 page faults and 0.2-0.5 s of system time for the
    1 GiB sample in 16 MiB batches, against 5,000 in one run."""

    def __init__(self, batch_bytes: int = 0) -> None:
        self.kernel = _archive.KernelBuffers()
        # The batches' own buffers, for a stream of them (0: every batch gets a fresh one).
        self.batches = BufferPool() if batch_bytes else None
        self.batch_bytes = batch_bytes


def _for_kernel(rows: BodyIndex, readable: npt.NDArray[np.bool_]) -> tuple[Positions, BodyIndex | None,
                                                                          list[verify.BodyFault]]:
    """The rows the kernel reads (``readable``: those naming a body in a block's bounds,
    ``in_block``), those rows (None when there are none), and the findings of the others."""
    named = np.flatnonzero(readable)
    findings = [_index_fault(rows, int(i)) for i in np.flatnonzero(~readable)]
    if not named.shape[0]:
        return named, None, findings
    return named, rows if named.shape[0] == len(rows) else rows.take(named), findings


def read_each(snapshot: Snapshot, idx: BodyIndex, positions: Positions, threads: int,
              scratch: Scratch) -> tuple[BodyIndex, list[bytes | None], list[verify.BodyFault]]:
    """The bodies at ``positions`` (sorted) as one bytes object each, which the kernel writes
    every verified body straight into (``Ledger.bodies``: no batch buffer between); None for
    a body that did not verify, with its finding (archive order)."""
    rows = idx.take(positions)
    datas: list[bytes | None] = [None] * len(rows)
    named, kernel_rows, findings = _for_kernel(rows, in_block(idx, positions))
    if kernel_rows is not None:
        done = verify.run(snapshot, verify.Part(kernel_rows, idx.blocks), threads=threads,
                          into=verify.Into(as_bytes=True, buffers=scratch.kernel))
        got = done.datas or []
        if named.shape[0] == len(rows):
            datas = got
        else:
            for at, data in zip(named.tolist(), got):
                datas[at] = data
        findings += done.faults
    findings.sort(key=lambda f: (f.block_offset, f.body_offset, f.row_id))
    return rows, datas, findings


def read_batch(snapshot: Snapshot, idx: BodyIndex, positions: Positions, errors: Errors, threads: int,
               scratch: Scratch | None = None) -> BodyBatch:
    """The bodies at ``positions`` (sorted) read by the kernel into one buffer (its workers
    borrowing ``scratch``'s buffers, when given), on ``snapshot``'s archive reader. Damage as
    ``errors`` says (see the module)."""
    # Every row, in order (the common case): the index itself, no copy of its arrays.
    whole = positions.shape[0] == len(idx) and (len(idx) == 0 or (positions[0] == 0 and positions[-1] == len(idx) - 1))
    rows = idx if whole else idx.take(positions)
    readable = in_block(idx, positions)
    lens = np.where(readable, idx.body_len[positions], 0)
    offsets = np.zeros(len(rows), np.int64)
    if len(rows) > 1:
        np.cumsum(lens[:-1], out=offsets[1:])
    size = int(lens.sum())
    pool = scratch.batches if scratch is not None else None
    buffer = pool.take(size, scratch.batch_bytes) if pool is not None and scratch is not None else new_buffer(size)
    named, kernel_rows, findings = _for_kernel(rows, readable)
    failed = np.flatnonzero(~readable)
    if kernel_rows is not None:
        done = verify.run(snapshot, verify.Part(kernel_rows, idx.blocks), threads=threads,
                          into=verify.Into(buffer, offsets[named], buffers=scratch.kernel if scratch else None))
        bad = np.flatnonzero(done.status)
        if bad.shape[0]:
            findings += done.faults
            failed = np.union1d(failed, named[bad])
    if failed.shape[0] and errors == "raise":
        first = min(findings, key=lambda f: (f.block_offset, f.body_offset, f.row_id))
        raise fault_error(first, snapshot.db_path, snapshot.bodies_path)
    findings.sort(key=lambda f: (f.block_offset, f.body_offset, f.row_id))
    ok = np.ones(len(rows), np.bool_)
    if failed.shape[0]:
        for i in failed.tolist():  # only the damaged: their slots never show unverified bytes
            buffer[offsets[i]:offsets[i] + lens[i]] = 0
        ok[failed] = False
        if errors == "skip":
            keep = np.flatnonzero(ok)
            rows, offsets, lens, ok = rows.take(keep), offsets[keep], lens[keep], ok[keep]
        else:
            lens = np.where(ok, lens, 0)
        buffer, offsets = close_gaps(buffer, offsets, lens)
    return BodyBatch(buffer, offsets, lens, rows, ok, findings)


def close_gaps(buffer: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
               lens: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The bodies moved down over the slots of those left out or emptied, so they lie end to
    end (``offsets[i + 1] == offsets[i] + lens[i]``, which Arrow's binary layout needs): one
    move per run of bodies already touching, only when a batch has damage."""
    n = offsets.shape[0]
    packed = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(lens[:-1], out=packed[1:])
    total = int(packed[-1] + lens[-1]) if n else 0
    ends = offsets + lens
    starts = np.concatenate(([0], np.flatnonzero(offsets[1:] != ends[:-1]) + 1)) if n else np.zeros(0, np.int64)
    stops = np.concatenate((starts[1:], [n])) if n else starts
    for a, b in zip(starts.tolist(), stops.tolist()):
        src, dst, size = int(offsets[a]), int(packed[a]), int(ends[b - 1] - offsets[a])
        if size and src != dst:
            buffer[dst:dst + size] = buffer[src:src + size]  # numpy copies overlapping moves safely
    return buffer[:total], packed


@dataclass(frozen=True, slots=True)
class BodyRecord:
    """One archived body and the index row that names it, as ``Ledger.bodies`` yields it.

    ``event_id``, ``source_table`` and ``direction`` are the row's key; ``content_type`` and
    ``original_bytes`` what the writer recorded (``truncated`` when it kept only a prefix of a
    body larger than the archive takes); ``data`` the bytes, already checked against the
    segment hashes and the row's body hash. A plain frozen value: building one costs the copy
    of ``data`` out of the inflated block, nothing more.
    """

    event_id: str
    source_table: str
    direction: str
    content_type: str | None
    original_bytes: int
    truncated: bool
    data: bytes


__all__ = ["DEFAULT_BATCH_BYTES", "ERRORS", "BodyRecord", "BufferPool", "Errors", "Selection", "check_errors",
           "check_max_bytes", "fault_error", "plan_batches", "read_batch", "read_each", "resolve", "slot_lengths"]
