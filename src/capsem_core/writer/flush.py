"""The flush cycle's second half: the job, the background flush thread, the commit.

A flush takes everything buffered (``Pending``) into a ``Job`` once its segment is cut; the
job syncs the archive and commits its rows in one transaction, on the owner's thread or on a
worker (the automatic flush). A job that did not commit is restored in front of the buffers;
a job whose rows the schema refuses is committed again row by row (salvage), dropping only
the refused rows.

Exit paths (docs/reliability.md, "Interrupts"): whoever takes ``Job.claim`` runs the job,
once; ``Job.done`` is waited on instead of ``Thread.join``; ``Job.committed`` records that
COMMIT returned, so an interrupt after it never makes the rows go round twice.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from capsem_core.errors import LedgerError
from capsem_core.writer.archive import BodyArchiveWriter, SegmentWritten
from capsem_core.writer.rows import BODY_COLUMNS, BODY_INSERT_HEAD, Batch, BodyRow, insert_rows, values_sql

__all__ = ["Job", "Pending", "REJECTIONS", "join", "start"]

UPSERT_BLOCK = (
    "INSERT INTO body_blocks (block_offset, raw_len, disk_len, sealed_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (block_offset) DO UPDATE SET "
    # The extent never shrinks; sealed_at moves only when raw bytes were added, so an empty
    # FINAL segment does not make an old block look new to retention.
    "sealed_at = CASE WHEN excluded.raw_len > body_blocks.raw_len THEN excluded.sealed_at "
    "ELSE body_blocks.sealed_at END, raw_len = excluded.raw_len, disk_len = excluded.disk_len "
    "WHERE excluded.disk_len >= body_blocks.disk_len")

# What the schema's constraints (or bad values) raise for one row: salvage drops that row. A
# text SQLite cannot take as UTF-8 (a lone surrogate, as Event.row hands out bytes that were
# not UTF-8) is one such value: left out, it failed every flush, and close, for good.
REJECTIONS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError, sqlite3.DataError,
              OverflowError, UnicodeEncodeError)

Work = Callable[["Job"], None]


class Job:
    """One flush's worth of work, taken out of the buffers: segments to record, rows to commit."""

    __slots__ = ("segments", "body_rows", "batches", "buffered", "buffered_bytes", "unsynced", "stamp", "body_count",
                 "rejected", "error", "sync_error", "thread", "claim", "done", "committed")

    def __init__(self, segments: list[SegmentWritten], body_rows: list[BodyRow], batches: list[Batch],
                 buffered: int, buffered_bytes: int, unsynced: bool, stamp: str) -> None:
        self.segments = segments
        self.body_rows = body_rows
        self.batches = batches
        self.buffered = buffered
        self.buffered_bytes = buffered_bytes
        self.unsynced = unsynced
        self.stamp = stamp
        self.body_count = len(body_rows)
        self.rejected: list[tuple[str, str]] = []
        self.error: BaseException | None = None
        self.sync_error: LedgerError | None = None
        self.thread: threading.Thread | None = None
        # Whoever takes this lock runs the job: the worker, or the owner if the worker never
        # started (an interrupt between creating the job and starting its thread).
        self.claim = threading.Lock()
        # Set when the job has run. Waited on instead of Thread.join: an interrupted join
        # marks a live thread as stopped in CPython 3.11 (bpo-45274), and a later join would
        # then return while the worker is still inside its transaction.
        self.done = threading.Event()
        self.committed = False  # COMMIT returned (an interrupt may still follow it)


class Pending:
    """The work buffered for the next flush.

    Body rows are kept in staging order; the first ``rows_written`` of them name bytes already
    appended to the file (or spans committed earlier).
    """

    __slots__ = ("batches", "body_rows", "rows_written", "segments", "unsynced", "buffered", "buffered_bytes")

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.body_rows: list[BodyRow] = []
        self.rows_written = 0
        self.segments: list[SegmentWritten] = []
        self.unsynced = False
        self.buffered = 0         # rows and bodies
        self.buffered_bytes = 0   # staged body bytes and the texts and blobs of rows

    def empty(self) -> bool:
        return not (self.segments or self.body_rows or self.batches)

    def take(self, stamp: str, forget_batches: Callable[[], None]) -> Job:
        """Move everything buffered into a job (``forget_batches`` closes the tables' batches)."""
        job = Job(self.segments, self.body_rows, self.batches, self.buffered, self.buffered_bytes, self.unsynced, stamp)
        try:
            self.segments = []
            self.body_rows = []
            self.rows_written = 0
            self.batches = []
            forget_batches()
            self.buffered = 0
            self.buffered_bytes = 0
            self.unsynced = False
        except BaseException:
            # Interrupted half way: put everything back, as if the job was never taken.
            self.unsynced = job.unsynced
            self.segments, self.body_rows, self.rows_written = job.segments, job.body_rows, job.body_count
            self.batches, self.buffered, self.buffered_bytes = job.batches, job.buffered, job.buffered_bytes
            raise
        return job

    def restore(self, job: Job) -> None:
        """Put a job that did not commit back in front of the buffers, for the next flush."""
        self.unsynced = self.unsynced or bool(job.segments)  # first: never rows without a sync
        self.segments[:0] = job.segments
        self.body_rows[:0] = job.body_rows
        self.rows_written += len(job.body_rows)
        self.batches[:0] = job.batches
        self.buffered += job.buffered - (job.body_count - len(job.body_rows))
        # Their bytes count again (all of them, bodies dropped with a failed sync too: a
        # flush a little early, never memory held past flush_bytes).
        self.buffered_bytes += job.buffered_bytes


# --- running a job ----------------------------------------------------------------------------

def start(job: Job, work: Work) -> None:
    """Run ``job`` on a worker thread (the automatic flush)."""
    job.thread = threading.Thread(target=run, args=(job, work), name="capsem-ledger-flush", daemon=True)
    job.thread.start()


def run(job: Job, work: Work) -> None:
    """Run ``work(job)`` unless another thread claimed the job first (any thread)."""
    if job.claim.acquire(blocking=False):
        _run_claimed(job, work)
    # else the owner ran it already: this worker started too late


def _run_claimed(job: Job, work: Work) -> None:
    try:
        work(job)
    finally:
        job.done.set()


def join(job: Job, work: Work, db_path: Path) -> None:
    """Return once ``job`` has run: here, if its worker never started, else by waiting for it."""
    if job.claim.acquire(blocking=False):
        # Its worker never started: run the job here, once.
        _run_claimed(job, work)
        return
    while not job.done.wait(0.05):
        thread = job.thread
        if thread is None or thread.ident is None or not thread.is_alive():
            # Claimed here, but interrupted before it ran (the claim is taken outside
            # the try that sets ``done``): it never ran, so it goes back to the buffers.
            if job.error is None and not job.committed:
                job.error = LedgerError("a flush was interrupted before it ran; its rows are kept for the "
                                        "next flush", db_path)
            job.done.set()


def sync_and_commit(job: Job, archive: BodyArchiveWriter | None, conn: sqlite3.Connection | None,
                    per_statement: Callable[[int], int]) -> None:
    """Sync the archive, then commit the job's rows in one transaction; errors go to ``job.error``."""
    try:
        # Segments always mean a sync, whatever the flag says: rows never name bytes that
        # no returned fdatasync covers.
        if (job.unsynced or job.segments) and archive is not None:
            try:
                archive.sync()
            except LedgerError as e:
                # Rows must never name bytes that may not be on disk: commit the ledger
                # rows without them.
                job.sync_error = e
                job.segments = []
                job.body_rows = []
        assert conn is not None
        try:
            job.rejected = commit(conn, job, False, per_statement)
        except REJECTIONS:
            job.rejected = commit(conn, job, True, per_statement)
    except BaseException as e:  # noqa: BLE001 - handed to the owning thread by LedgerWriter._finish
        job.error = e


def commit(conn: sqlite3.Connection, job: Job, salvage: bool,
           per_statement: Callable[[int], int]) -> list[tuple[str, str]]:
    """One transaction: block upserts, then body rows, then ledger rows; the refused rows when salvaging."""
    rejected: list[tuple[str, str]] = []
    committing = False
    try:
        conn.execute("BEGIN")
        # Blocks before the body rows that reference them, body rows before ledger rows.
        if job.segments:
            conn.executemany(UPSERT_BLOCK, [(s.block_offset, s.raw_len, s.disk_len, job.stamp)
                                            for s in job.segments])
        if not salvage:
            if job.body_rows:
                # Every CHECK of event_body_blobs holds by construction (insert validated
                # event_id, event_type, table and direction; the writer derived the rest),
                # and SQLite re-evaluating its IN-lists costs more than the indexes do.
                conn.execute("PRAGMA ignore_check_constraints = ON")
                try:
                    insert_rows(conn, BODY_INSERT_HEAD, BODY_COLUMNS, job.body_rows, per_statement(BODY_COLUMNS))
                finally:
                    conn.execute("PRAGMA ignore_check_constraints = OFF")
            for batch in job.batches:
                insert_rows(conn, batch.head, len(batch.keys), batch.rows, per_statement(len(batch.keys)))
        else:
            _salvage(conn, job, rejected)
        committing = True
        conn.execute("COMMIT")
        job.committed = True
    except BaseException as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        elif committing and not isinstance(e, sqlite3.Error):
            # COMMIT returned and something struck before the flag was set: the rows
            # are in, and retrying them would insert the ledger rows twice.
            job.committed = True
        raise
    return rejected


def _salvage(conn: sqlite3.Connection, job: Job, rejected: list[tuple[str, str]]) -> None:
    """Insert row by row, each under a savepoint, noting the rows the schema refuses."""
    groups: list[tuple[str, int, str, list[BodyRow] | list[tuple[object, ...]]]] = [
        (BODY_INSERT_HEAD, BODY_COLUMNS, "event_body_blobs", job.body_rows)]
    groups += [(b.head, len(b.keys), b.table, b.rows) for b in job.batches]
    for head, width, table, rows in groups:
        sql = values_sql(head, width, 1)
        for values in rows:
            conn.execute("SAVEPOINT capsem_row")
            try:
                conn.execute(sql, values)
            except REJECTIONS as e:
                conn.execute("ROLLBACK TO capsem_row")
                rejected.append((table, str(e)))
            conn.execute("RELEASE capsem_row")
