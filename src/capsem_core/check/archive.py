"""The body archive check: the body index against itself and against session.bodies.

Trusting neither the index nor the file, it bounds every body_blocks value before any sum
(so no sum wraps int64), finds bodies naming no recorded block or running past their
block's raw bytes, blocks inside the file header or overlapping each other, a missing,
short or foreign archive, and walks every recorded extent's segment headers (nothing is
inflated). What needs no body row (``walk_body_archive``) runs before the body index is read;
the body rows are then counted against the blocks in one native pass
(``_index.spans_against_blocks``), and nothing makes a Python object per body. The archive is
opened once, by the snapshot (``Snapshot.archive``: its open checks the file header), and the
extent walk is kept there for the verify kernel.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from capsem_core._native import _errors, _index
from capsem_core._native._archive import FILE_HEADER_BYTES, MAX_BLOCK_RAW_BYTES
from capsem_core.bodies.body_index import Blocks, BodyIndex
from capsem_core.check.report import ERROR, CheckResult, Finding
from capsem_core.errors import ArchiveError, LedgerError
from capsem_core.snapshot import Snapshot

BODY_INDEX_TABLES: tuple[str, ...] = ("body_blocks", "event_body_blobs")
# The largest block offset or extent length the archive check does arithmetic on: any two
# add up without wrapping int64, and no archive comes near it. A larger value is a finding.
MAX_EXTENT_BYTES = (1 << 62) - 1
Column = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def has_body_index(tables: set[str]) -> bool:
    """Whether the ledger has the body index (a ledger from before the archive has not)."""
    return all(t in tables for t in BODY_INDEX_TABLES)


class ArchiveWalk(NamedTuple):
    """What the archive check finds from body_blocks and session.bodies alone, before the body
    rows are read: findings on the block rows (``rows``), then on the blocks against each
    other, the file and its extents (``file``), and the counts they give."""

    blocks: Blocks
    rows: CheckResult
    file: CheckResult
    counts: dict[str, int | None]


def walk_body_archive(snapshot: Snapshot, blocks: Blocks, *, rules: bool = False) -> ArchiveWalk:
    """The part of the archive check that needs no body row: ``blocks`` (the snapshot's
    body_blocks) bounded, against each other and against session.bodies, every extent's
    segment headers walked. A check runs it while the body index is still being read (from a
    cold cache, until the end of session.db); with ``rules`` (every body will be read back)
    zlib's rules are walked over the payloads meanwhile, ahead of the verify kernel."""
    k_off, k_raw, k_disk = blocks.block_offset, blocks.raw_len, blocks.disk_len
    rows, file = CheckResult("body_archive", ""), CheckResult("body_archive", "")
    # Every value is bounded before numpy adds it to another, so no sum can wrap int64: a
    # block row out of bounds is its own finding and takes no part in the sums and walks below.
    sane = _check_block_rows(k_off, k_raw, k_disk, rows)
    s_off, s_disk = k_off[sane], k_disk[sane]
    s_end = s_off + s_disk
    blocks_end = int(s_end.max()) if len(s_off) else 0
    counts: dict[str, int | None] = {"blocks": len(k_off), "blocks_end": blocks_end, "archive_bytes": None,
                                     "extents_walked": 0}
    walked = ArchiveWalk(blocks, rows, file, counts)

    # The blocks against each other: none may start inside the file header or inside the
    # extent of the block before it (the doctor does not look at this).
    for i in np.flatnonzero(s_off < FILE_HEADER_BYTES).tolist():
        off = int(s_off[i])
        file.add(Finding("block_in_file_header", ERROR,
                         f"block at offset {off} starts inside the {FILE_HEADER_BYTES}-byte file header",
                         location={"block_offset": off}))
    for i in (np.flatnonzero(s_off[1:] < s_end[:-1]) + 1).tolist():
        off, prev = int(s_off[i]), int(s_off[i - 1])
        file.add(Finding("block_overlap", ERROR,
                         f"block at offset {off} starts inside the block at offset {prev}, "
                         f"which ends at {int(s_end[i - 1])}",
                         location={"block_offset": off}))

    # The file against the index.
    bodies_path = snapshot.bodies_path
    try:
        st = os.lstat(bodies_path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise LedgerError(f"cannot stat: {exc.strerror}", bodies_path) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        file.add(Finding("archive_not_regular", ERROR,
                         f"session.bodies is {what}; a ledger's archive must be a regular file beside session.db"))
        return walked
    size = None if st is None else st.st_size
    if size is None:
        if len(k_off) > 0:
            file.add(Finding("archive_missing", ERROR, f"session.bodies is missing and {len(k_off)} blocks are recorded"))
        return walked
    counts["archive_bytes"] = size
    if size < blocks_end:
        file.add(Finding("archive_short", ERROR,
                         f"session.bodies is {size} bytes but its last recorded block ends at {blocks_end}"))
        return walked
    try:
        # The one open of session.bodies: the native open checks the file header.
        snapshot.archive()
    except ArchiveError as exc:
        file.add(Finding("bad_file_header", ERROR, f"{bodies_path} is not a capsem body archive ({exc.detail})"))
        return walked
    counts["extents_walked"] = _walk_extents(snapshot, blocks, sane, file, rules)
    return walked


def check_body_archive(snapshot: Snapshot, index: BodyIndex | None, result: CheckResult,
                       walked: ArchiveWalk | None = None) -> bool:
    """Fill ``result`` with every disagreement of ``index`` (the snapshot's, None for a ledger
    with no body index) with itself and with the file; True when nothing was found, so the
    bodies may be read back. ``walked``: ``walk_body_archive`` run earlier in the snapshot
    (taken when its blocks are the index's, else walked again here)."""
    if index is None:
        result.add(Finding("no_body_index", ERROR, "No body index: this ledger predates the body archive"))
        return False
    if walked is None or not _same_blocks(walked.blocks, index.blocks):
        walked = walk_body_archive(snapshot, index.blocks)
    _carry(walked.rows, result)
    counts = walked.counts
    result.counts.update(bodies=len(index), blocks=counts["blocks"], blocks_end=counts["blocks_end"],
                         archive_bytes=None, extents_walked=0)

    # The index against itself: every body names a recorded block and fits in its raw bytes
    # (one native pass: at a million rows numpy's masks and gathers cost 35 ms and 40 MB).
    dangling, stray, overruns = _index.spans_against_blocks(
        index.blocks.block_offset, index.blocks.raw_len, index.block_offset, index.body_offset, index.body_len,
        MAX_BLOCK_RAW_BYTES)
    if dangling:
        result.add(Finding("dangling_block", ERROR,
                           f"{dangling} bodies name a block body_blocks does not record", count=dangling))
    if stray:
        result.add(Finding("span_out_of_range", ERROR,
                           f"{stray} bodies record a span no block can hold (body_offset and body_len must "
                           f"each lie in 0..{MAX_BLOCK_RAW_BYTES}, a block's most raw bytes)", count=stray))
    if overruns:
        result.add(Finding("body_past_raw_len", ERROR,
                           f"{overruns} bodies run past the end of their block's raw bytes", count=overruns))

    _carry(walked.file, result)
    result.counts.update(archive_bytes=counts["archive_bytes"], extents_walked=counts["extents_walked"])
    return result.findings_total == 0


def _same_blocks(a: Blocks, b: Blocks) -> bool:
    return a is b or (np.array_equal(a.block_offset, b.block_offset) and np.array_equal(a.raw_len, b.raw_len)
                      and np.array_equal(a.disk_len, b.disk_len))


def _carry(found: CheckResult, result: CheckResult) -> None:
    """``found``'s findings into ``result``, as if added there in the same order (those past
    ``found``'s own limit were only counted: so are they here)."""
    for finding in found.findings:
        result.add(finding)
    result.findings_total += found.findings_total - len(found.findings)


def _check_block_rows(k_off: Column, k_raw: Column, k_disk: Column, result: CheckResult) -> Mask:
    """A finding for every body_blocks value outside its bounds; returns the mask of rows
    within them. A block holds at most MAX_BLOCK_RAW_BYTES raw bytes; an offset or extent
    length must lie in 0..MAX_EXTENT_BYTES, so any offset plus length fits in int64 (a value
    in bounds but past the file's end is found against the file's size, not here)."""
    bad_off = (k_off < 0) | (k_off > MAX_EXTENT_BYTES)
    bad_raw = (k_raw < 0) | (k_raw > MAX_BLOCK_RAW_BYTES)
    bad_disk = (k_disk < 0) | (k_disk > MAX_EXTENT_BYTES)
    bad = bad_off | bad_raw | bad_disk
    for i in np.flatnonzero(bad).tolist():
        off = int(k_off[i])
        if bad_off[i]:
            where = "before the start of session.bodies" if off < 0 else "beyond the end of any archive"
            result.add(Finding("block_out_of_range", ERROR,
                               f"block at offset {off} starts {where} (block offsets lie in 0..{MAX_EXTENT_BYTES})",
                               location={"block_offset": off}))
        if bad_raw[i]:
            result.add(Finding("block_out_of_range", ERROR,
                               f"block at offset {off} records raw_len {int(k_raw[i])}, outside "
                               f"0..{MAX_BLOCK_RAW_BYTES} (a block's most raw bytes)",
                               location={"block_offset": off}))
        if bad_disk[i]:
            result.add(Finding("block_out_of_range", ERROR,
                               f"block at offset {off} records disk_len {int(k_disk[i])}, outside "
                               f"0..{MAX_EXTENT_BYTES}", location={"block_offset": off}))
    return ~bad


def _walk_extents(snapshot: Snapshot, blocks: Blocks, sane: Mask, result: CheckResult, rules: bool) -> int:
    """Every recorded extent within bounds must be a well-formed segment chain ending exactly
    at its ``disk_len``, holding exactly its ``raw_len``, its empty segments what an empty
    segment is (headers only, and an empty FINAL segment's few payload bytes: nothing a body
    reaches is inflated).
    One native pass; the segment headers it parsed are kept for the verify kernel. Returns
    how many extents walked sound."""
    sound = blocks.take(sane)
    k_off, k_raw, k_disk = sound.block_offset, sound.raw_len, sound.disk_len
    walk = snapshot.walk_extents(sound, rules=rules)
    failed = np.zeros(len(k_off), dtype=bool)
    for i, exc in walk.failures:
        failed[i] = True
        off, disk_len = int(k_off[i]), int(k_disk[i])
        result.add(Finding("bad_extent", ERROR,
                           f"block at offset {off} (extent of {disk_len} bytes): {exc.detail}",
                           location={"block_offset": off, "kind": kind_of(exc)}))
    for i, at, many in walk.empty_faults:
        off = int(k_off[i])
        some = "an empty segment" if many == 1 else f"{many} empty segments"
        result.add(Finding("bad_empty_segment", ERROR,
                           f"block at offset {off} holds {some} unlike one (the first at offset {at}): a hash "
                           "other than BLAKE3 of no bytes, or a FINAL payload that is not a whole deflate stream "
                           "yielding nothing; no body reaches it, so no "
                           "read back shows it", location={"block_offset": off, "segment_offset": at}))
    for i in np.flatnonzero(~failed & (walk.raw_len != k_raw)).tolist():
        off = int(k_off[i])
        result.add(Finding("raw_len_mismatch", ERROR,
                           f"block at offset {off} records raw_len {int(k_raw[i])} but its segments hold "
                           f"{int(walk.raw_len[i])} raw bytes", location={"block_offset": off}))
    return int(len(k_off) - len(walk.failures))


def _table_kinds() -> dict[str, str]:
    """{exception class name: finding kind} from the native status table, whose first row
    naming an exception gives its kind (the table owns every kind a check reports)."""
    kinds: dict[str, str] = {}
    for row in _errors.STATUSES:
        if row.exception is not None:
            kinds.setdefault(row.exception, row.kind)
    return kinds


_KINDS = _table_kinds()


def kind_of(exc: ArchiveError) -> str:
    """The finding kind of an archive error, as the status table words it."""
    return _KINDS.get(type(exc).__name__, "archive")


__all__ = ["BODY_INDEX_TABLES", "MAX_EXTENT_BYTES", "ArchiveWalk", "check_body_archive", "has_body_index", "kind_of",
           "walk_body_archive"]
