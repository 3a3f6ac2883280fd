"""The body side of a ledger writer: staging bodies into the archive, cutting segments, retiring it.

``Staging`` owns the ``BodyArchiveWriter`` of a ledger and what the writer knows of it: the open
block's spans (in-block dedup), when the block opened, the block bodies are staged into and the
last segment recorded. It turns bodies into ``event_body_blobs`` rows in ``Pending``, cuts
segments and closes blocks (the flush cycle's first step, Write: docs/format.md), and takes the
archive out of service when an append, a sync or an interrupt leaves it unusable, keeping only
rows whose bytes are whole and synced.

Exit paths (docs/reliability.md, "Interrupts"): an exception escaping a segment cut is
reconciled by ``_interrupted`` against ``archive.last_written``; ``retire`` judges by what this
writer recorded, never by the archive's counters.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

from capsem_core import format as fmt
from capsem_core._native._blake3 import digest as _blake3_digest
from capsem_core.errors import BlockFull, LedgerError, SymlinkRefused
from capsem_core.writer.archive import BodyArchiveWriter, SegmentWritten
from capsem_core.writer.dedup import CommittedSpans, Span
from capsem_core.writer.flush import Pending
from capsem_core.writer.rows import ROW_BLOCK, ROW_LEN, ROW_OFFSET, Body

__all__ = ["Counts", "Staging"]


class Counts:
    """What a writer did with the bodies and rows it was given (``LedgerWriter``'s counters)."""

    __slots__ = ("bodies_stored", "bodies_deduplicated", "bodies_deduplicated_in_block",
                 "bodies_deduplicated_in_archive", "bodies_dropped", "bodies_committed", "rows_committed",
                 "rows_rejected", "flushes")

    def __init__(self) -> None:
        self.bodies_stored = 0
        self.bodies_deduplicated = 0
        self.bodies_deduplicated_in_block = 0
        self.bodies_deduplicated_in_archive = 0
        self.bodies_dropped = 0
        self.bodies_committed = 0
        self.rows_committed = 0
        self.rows_rejected = 0
        self.flushes = 0


class Staging:
    """The archive of one writer and the bookkeeping that keeps its rows honest.

    ``join`` waits for the writer's background flush: retiring must not pull the archive
    from under a flush that is syncing it.
    """

    __slots__ = ("archive", "out_of_service", "_bodies_path", "_pending", "_counts", "_spans", "_join",
                 "_close_every_flush", "_guard", "_block_spans", "_block_opened_at", "_staging_block", "_last_recorded")

    def __init__(self, bodies_path: Path, pending: Pending, counts: Counts, spans: CommittedSpans,
                 join: Callable[[], None], close_every_flush: bool, guard: Callable[[], None]) -> None:
        self.archive: BodyArchiveWriter | None = None
        self.out_of_service: str | None = None
        self._bodies_path = bodies_path
        self._pending = pending
        self._counts = counts
        self._spans = spans
        self._join = join
        self._close_every_flush = close_every_flush
        self._guard = guard  # raises when this writer may no longer write (its lock was lost)
        self._block_spans: dict[bytes, Span] = {}
        self._block_opened_at: float | None = None
        # What the ledger itself knows of the archive, for retire after an interrupt: the
        # block bodies are being staged into, and the last segment recorded in Pending.
        self._staging_block: int | None = None
        self._last_recorded: SegmentWritten | None = None

    # --- open -----------------------------------------------------------------------------

    def open(self, conn: sqlite3.Connection, codec: int) -> None:
        """Capsem's open-time check: never append to an archive the index does not fit."""
        try:
            indexed_end = conn.execute("SELECT MAX(block_offset + disk_len) FROM body_blocks").fetchone()[0] or 0
        except sqlite3.DatabaseError as e:
            self._retired(f"body_blocks is unreadable ({e}); this writer stores no bodies")
            return
        self._spans.load(conn)
        try:
            size = os.lstat(self._bodies_path).st_size
        except FileNotFoundError:
            size = 0
        if size < indexed_end:
            self._retired(
                f"session body index names bytes past the end of the archive: blocks end at {indexed_end} but "
                f"{self._bodies_path.name} holds {size} bytes; this writer stores no bodies and leaves the file "
                "as it is (rows naming the missing bytes fail their hash checks rather than answer wrongly)")
            return
        try:
            self.archive = BodyArchiveWriter(self._bodies_path, codec=codec)
        except SymlinkRefused:
            raise
        except LedgerError as e:
            self._retired(f"the body archive cannot be appended to ({e.detail}); this writer stores "
                          "no bodies and leaves the file as it is")

    def _retired(self, reason: str) -> None:
        self.out_of_service = reason
        warnings.warn(f"{self._bodies_path}: {reason}", RuntimeWarning, stacklevel=3)

    # --- staging --------------------------------------------------------------------------

    def stage_bodies(self, table: str, row: Mapping[str, object], bodies: tuple[Body, ...], now: float,
                     created_at: str) -> None:
        """Truncate, hash, deduplicate and stage ``bodies`` of ``row``; their rows join ``Pending``."""
        archive = self.archive
        counts = self._counts
        pending = self._pending
        event_id = row["event_id"]
        assert isinstance(event_id, str)  # Tables.check_bodies
        trace_id = row.get("trace_id")
        turn_id = row.get("turn_id")
        rows = pending.body_rows
        spans = self._block_spans
        for body in bodies:
            data = body.data
            received = len(data)
            if not received:
                continue
            if archive is None:
                counts.bodies_dropped += 1
                continue
            if archive.block_offset is not None and (archive.wants_close or self._block_stale(now)):
                archive = self.close_block()
                if archive is None:
                    counts.bodies_dropped += 1
                    continue
            stored = data if received <= fmt.MAX_BODY_BLOB_BYTES else data[:fmt.MAX_BODY_BLOB_BYTES]
            stored_bytes = len(stored)
            declared = body.original_bytes or 0
            original = declared if declared > received else received
            digest = _blake3_digest(stored)
            span = spans.get(digest)
            if span is not None:
                counts.bodies_deduplicated += 1
                counts.bodies_deduplicated_in_block += 1
            else:
                if stored_bytes >= fmt.MIN_ARCHIVE_DEDUP_BYTES:
                    span = self._spans.lookup(digest, stored_bytes)
                if span is not None:
                    counts.bodies_deduplicated += 1
                    counts.bodies_deduplicated_in_archive += 1
                else:
                    span = self._stage(archive, stored, now)
                    if span is None:
                        archive = self.archive
                        counts.bodies_dropped += 1
                        continue
                    spans[digest] = span
                    counts.bodies_stored += 1
                    pending.buffered_bytes += stored_bytes
            rows.append((event_id, body.event_type, table, body.direction, body.content_type, original,
                         stored_bytes, 1 if original > stored_bytes else 0, "blake3:" + digest.hex(),
                         span[0], span[1], span[2], trace_id, turn_id, created_at))
            pending.buffered += 1

    def _stage(self, archive: BodyArchiveWriter, stored: bytes, now: float) -> Span | None:
        """Stage into the open block (closing it on BlockFull); None if the body is dropped."""
        opening = archive.block_offset is None
        try:
            span = archive.stage(stored)
        except BlockFull:
            if self.close_block() is None:
                return None
            opening = True
            try:
                span = archive.stage(stored)
            except LedgerError as e:
                self._stage_failed(archive, e)
                return None
        except LedgerError as e:
            self._stage_failed(archive, e)
            return None
        if opening:
            self._block_opened_at, self._staging_block = now, span[0]
        return span

    def _stage_failed(self, archive: BodyArchiveWriter, error: LedgerError) -> None:
        if archive.poisoned:
            self.retire(f"staging a body failed ({error.detail})")

    def _block_stale(self, now: float) -> bool:
        # A clock that went backwards counts as not stale.
        opened = self._block_opened_at
        return opened is not None and now - opened >= fmt.MAX_BLOCK_AGE_SECONDS

    # --- segments -----------------------------------------------------------------------

    def close_block(self) -> BodyArchiveWriter | None:
        """Write the open block's FINAL segment; the archive, or None if that retired it."""
        archive = self.archive
        assert archive is not None
        self._guard()  # an insert may close a full block between flushes
        if not self._cut(archive, archive.close_block, f"closing block {archive.block_offset}"):
            return None
        self._block_spans.clear()
        self._block_opened_at = None
        return archive

    def cut_segment(self, now: float) -> None:
        """The flush cycle's first step: close the block if due, else flush a segment."""
        archive = self.archive
        if archive is None:
            return
        if archive.block_offset is not None and (
                self._close_every_flush or archive.wants_close or self._block_stale(now)):
            self.close_block()
            return
        self._cut(archive, archive.flush_segment, "appending a segment")

    def _cut(self, archive: BodyArchiveWriter, cut: Callable[[], SegmentWritten | None], what: str) -> bool:
        """Run one segment cut and record it; False when its failure retired the archive."""
        try:
            written = cut()
            if written is not None:
                self._record(written)
            self._pending.rows_written = len(self._pending.body_rows)
        except LedgerError as e:
            self.retire(f"{what} failed ({e.detail})")
            return False
        except BaseException:
            self._interrupted(archive)
            raise
        return True

    def _record(self, written: SegmentWritten) -> None:
        """A segment is on disk: it needs a sync, then its block row joins the next commit."""
        pending = self._pending
        pending.unsynced = True
        pending.segments.append(written)
        self._last_recorded = written

    def _interrupted(self, archive: BodyArchiveWriter) -> None:
        """An exception (KeyboardInterrupt, SIGTERM's, any) escaped a segment cut.

        If the record was completed before it struck, record it as the cut would have (its
        rows are whole); otherwise the archive poisoned itself and the rows of the lost
        segment stay beyond ``rows_written``, where ``retire`` drops them. Either way no
        further segment is cut by this writer.
        """
        last = archive.last_written
        if last is not None and last is not self._last_recorded:
            self._record(last)
            self._pending.rows_written = len(self._pending.body_rows)
        archive.poison()

    # --- retire -------------------------------------------------------------------------

    def retire(self, reason: str) -> None:
        """Take the archive out of service, keeping only rows whose bytes are whole and synced."""
        archive = self.archive
        assert archive is not None
        pending = self._pending
        self._join()  # a background flush may be syncing this file
        # Judge by what this writer recorded, not by the archive's counters: after an
        # interrupt the two can differ, and only recorded segments get a block row.
        open_block = archive.block_offset
        if open_block is None:
            open_block = self._staging_block
        last = self._last_recorded
        safe_raw = last.raw_len if last is not None and last.block_offset == open_block else 0
        body_rows = pending.body_rows
        held = len(body_rows)
        kept = body_rows[:pending.rows_written]
        kept.extend(r for r in body_rows[pending.rows_written:]
                    if r[ROW_BLOCK] != open_block or r[ROW_OFFSET] + r[ROW_LEN] <= safe_raw)
        if pending.unsynced:
            try:
                archive.sync()
                pending.unsynced = False
            except LedgerError:
                kept = []
                pending.segments.clear()
                pending.unsynced = False
        self._counts.bodies_dropped += held - len(kept)
        pending.buffered -= held - len(kept)
        body_rows[:] = kept  # in place: a staging loop may hold the list
        pending.rows_written = len(kept)
        archive.abandon()
        archive.close()
        self.archive = None
        self._block_spans.clear()
        self._block_opened_at = None
        self._retired(f"{reason}; this writer stores no more bodies")

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()
