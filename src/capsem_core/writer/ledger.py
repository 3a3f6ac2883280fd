"""``LedgerWriter``: the one writer of a ledger directory, composed of its collaborators.

It owns the writer lock (``lock.WriterLock``), the SQLite connection and the public surface
(insert, flush, wait, close); the work is done by ``rows.Tables`` (what a row may be),
``staging.Staging`` (bodies into the archive, segments, retire), ``dedup.CommittedSpans``
(cross-block dedup) and ``flush`` (the job, its background thread, the commit). The flush
cycle is Capsem's: cut the segment, fdatasync, then one transaction; no index row ever
names bytes that are not synced.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from capsem_core import db, schema
from capsem_core.errors import LedgerError, RowRejected, SchemaMismatch
from capsem_core.format import CODEC_NAMES
from capsem_core.paths import SESSION_BODIES, SESSION_DB, archive_path_for, is_real_dir, refuse_symlink
from capsem_core.writer import flush
from capsem_core.writer.archive import BodyArchiveWriter, codec_id
from capsem_core.writer.dedup import CommittedSpans
from capsem_core.writer.flush import Job, Pending
from capsem_core.writer.lock import WriterLock, lock_wait, require_own_file
from capsem_core.writer.rows import ROWS_PER_STATEMENT, Body, Stamper, Tables
from capsem_core.writer.staging import Counts, Staging

__all__ = ["LedgerWriter"]

_LOCK_RETRY_SECONDS = 0.02
_OPEN_RETRIES = 50
_T = TypeVar("_T")
# The row values insert counts towards flush_bytes (exact types: a set lookup, not isinstance).
_SIZED = frozenset((str, bytes, bytearray))


def _ledger_directory(path: os.PathLike[str] | str) -> Path:
    """The ledger directory named by ``path``: the directory, or its session.db (as ``Ledger`` takes).
    ``""`` is refused: it would write a ledger into the current directory unnamed."""
    if os.fspath(path) == "":
        raise LedgerError("the ledger directory is empty (\"\" is not the current directory): name one")
    p = Path(path)
    if p.name == SESSION_DB and not is_real_dir(p):
        return p.parent
    return p


def _retrying(step: Callable[[], _T]) -> _T:
    """``step()``, retried while SQLite says the file is locked or busy (Capsem's 50 x 20 ms)."""
    for attempt in range(_OPEN_RETRIES):
        try:
            return step()
        except sqlite3.OperationalError as e:
            if attempt + 1 == _OPEN_RETRIES or not ("locked" in str(e) or "busy" in str(e)):
                raise
            time.sleep(_LOCK_RETRY_SECONDS)
    raise AssertionError("unreachable")


def _configure(conn: sqlite3.Connection, durable: bool) -> None:
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'NORMAL' if durable else 'OFF'}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA mmap_size = 268435456")
    # Large flushes touch many index pages; a bigger cache keeps them warm.
    conn.execute("PRAGMA cache_size = -65536")


def _connect(db_path: Path, durable: bool = True) -> sqlite3.Connection:
    """The writer's connection: a file that is not new checked first, then WAL, then the
    schema created when the file is new. ``durable=False``: SQLite syncs nothing until the
    writer closes (see LedgerWriter)."""
    # Background flushes commit from a worker thread, one at a time, never concurrently
    # with the owner's use of the connection.
    conn = db.connect_readwrite(db_path, create=True, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {db.busy_timeout_ms()}")
        fresh = _retrying(lambda: conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0)
        if not fresh:
            # Before any PRAGMA that writes (journal_mode = WAL rewrites the file header): a
            # SQLite file that is not a ledger is refused exactly as it was found.
            schema.check_schema(conn, db_path)
        _retrying(lambda: _configure(conn, durable))
        if fresh:
            schema.create_schema(conn, db_path)
            schema.check_schema(conn, db_path)
    except sqlite3.DatabaseError as e:
        conn.close()
        if "not a database" in str(e):
            raise SchemaMismatch(f"not a SQLite session ledger ({e})", db_path) from e
        raise LedgerError(f"cannot open session.db for writing: {e}", db_path) from e
    except BaseException:
        conn.close()
        raise
    return conn


class LedgerWriter:
    """The one writer of a ledger directory: rows into ``session.db``, bodies into ``session.bodies``.

    ``insert`` buffers a row and stages its bodies; ``flush`` runs Capsem's flush cycle
    (segment or FINAL segment, fdatasync, then one transaction: ``body_blocks`` upserts,
    ``event_body_blobs`` rows, the buffered rows) and returns once it committed; ``close``
    closes the open block, flushes, syncs, checkpoints the WAL and releases the writer lock.
    Buffered work is flushed by itself every ``flush_rows`` rows+bodies or ``flush_bytes``
    staged bytes (bodies, and the texts and blobs of rows): that flush cuts its segment at once
    and leaves the fdatasync and the transaction to a worker thread while inserts go on (one at
    a time; ``wait()`` joins it, and ``flush``/``close`` always do). Its errors surface at the
    next insert that flushes, at ``wait``, ``flush`` or ``close``.

    ``durable=False`` (a ledger nothing reads before it is closed: a sample) commits without
    SQLite's syncs: a commit's checkpoint then writes its pages without waiting for the disk
    (a million-body ledger's random-key indexes dirty tens of thousands of scattered pages a
    commit); the archive is still synced before the rows naming it commit, and ``close``
    checkpoints with a sync, so the closed ledger is on disk as a durable one is. A crash
    before ``close`` may leave it torn.

    ``directory`` is the ledger directory or its ``session.db``; the directory is created if
    missing, and refused (SymlinkRefused) if it, session.db, session.bodies or the lock file
    is a symbolic link. The lock is Capsem's flock on ``session.db-writer.lock`` plus one on
    the directory itself (``capsem_core.writer.lock``); a second writer gets WriterBusy after
    ``lock_timeout`` seconds, and a writer whose lock file was deleted or replaced refuses
    its next flush with WriterLockLost.

    Bodies are stored unless the archive is out of service (``archive_out_of_service`` says
    why: the index names bytes past the end of the archive, the archive's header is not a v2
    header, or an append or sync failed); rows are written either way. One thread uses a
    writer; the lock keeps other writers, in this process or another, off the ledger.
    """

    def __init__(self, directory: os.PathLike[str] | str, *, codec: str | int = "deflate",
                 clock: Callable[[], float] | None = None,
                 on_close: Callable[[LedgerWriter], object] | None = None,
                 close_every_flush: bool = False,
                 flush_rows: int = 50_000, flush_bytes: int = 64 << 20,
                 lock_timeout: float = 1.0, durable: bool = True) -> None:
        self._codec = codec_id(codec)
        lock_timeout = lock_wait(lock_timeout)
        self._clock = clock if clock is not None else time.time
        self._on_close = on_close
        self._flush_rows = max(1, flush_rows)
        self._flush_bytes = max(1, flush_bytes)
        self._durable = durable
        self._directory = _ledger_directory(directory)
        self._db_path = self._directory / SESSION_DB
        self._bodies_path = archive_path_for(self._db_path)
        self._closed = True
        self._closing = False   # close() runs the last flush
        self._lock: WriterLock | None = None
        self._conn: sqlite3.Connection | None = None
        self._job: Job | None = None
        self._stamp = Stamper()
        self._pending = Pending()
        self._counts = Counts()
        self._spans = CommittedSpans()
        self._staging = Staging(self._bodies_path, self._pending, self._counts, self._spans, self._join_job,
                                close_every_flush, self._check_lock)

        # The reader's rules, before anything is created: a link is refused, never followed.
        refuse_symlink(self._directory, "session directory")
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LedgerError(f"cannot create the ledger directory: {e.strerror or e}", self._directory) from e
        require_own_file(self._db_path, SESSION_DB)
        require_own_file(self._bodies_path, SESSION_BODIES)
        self._lock = WriterLock.take(self._db_path, lock_timeout)
        try:
            self._conn = _connect(self._db_path, durable)
            self._max_variables = self._conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
            self._spans.attach(db.connect_readonly(self._db_path, isolation_level=None, check_same_thread=True))
            self._staging.open(self._conn, self._codec)
        except BaseException:
            self._release()
            raise
        self._closed = False
        self._tables = Tables(schema.table_columns, schema.TABLES, schema.BODY_SOURCE_TABLES,
                              schema.BODY_EVENT_TYPES)

    # --- properties ---------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def db_path(self) -> Path:
        return self._db_path

    @property
    def bodies_path(self) -> Path:
        return self._bodies_path

    @property
    def codec(self) -> str:
        return CODEC_NAMES[self._codec]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def archive(self) -> BodyArchiveWriter | None:
        """The archive appender, or None while bodies are out of service."""
        return self._staging.archive

    @property
    def archive_out_of_service(self) -> str | None:
        """Why bodies are no longer stored, or None while they are."""
        return self._staging.out_of_service

    @property
    def buffered_rows(self) -> int:
        """Rows and bodies waiting for the next flush."""
        return self._pending.buffered

    @property
    def committing(self) -> bool:
        """A background flush is running."""
        return self._job is not None

    # The counters (``Counts``): what became of the bodies and rows given to ``insert``.

    @property
    def bodies_stored(self) -> int:
        return self._counts.bodies_stored

    @property
    def bodies_deduplicated(self) -> int:
        return self._counts.bodies_deduplicated

    @property
    def bodies_deduplicated_in_block(self) -> int:
        return self._counts.bodies_deduplicated_in_block

    @property
    def bodies_deduplicated_in_archive(self) -> int:
        return self._counts.bodies_deduplicated_in_archive

    @property
    def bodies_dropped(self) -> int:
        return self._counts.bodies_dropped

    @property
    def bodies_committed(self) -> int:
        return self._counts.bodies_committed

    @property
    def rows_committed(self) -> int:
        return self._counts.rows_committed

    @property
    def rows_rejected(self) -> int:
        return self._counts.rows_rejected

    @property
    def flushes(self) -> int:
        return self._counts.flushes

    # --- insert -------------------------------------------------------------------------

    def insert(self, table: str, row: Mapping[str, object], bodies: Iterable[Body] = ()) -> None:
        """Buffer one ledger row of ``table`` and stage its bodies for the next flush.

        Bodies become ``event_body_blobs`` rows keyed ``(event_id, table, direction)``; a row
        without an ``event_id`` gets a fresh one (12 lowercase hex). Empty bodies are skipped.
        Raises ValueError for a table, column, event id or body field the ledger cannot hold.
        """
        if self._closed:
            raise LedgerError("the ledger writer is closed", self._db_path)
        tables = self._tables
        spec = tables.specs.get(table) or tables.spec(table)
        if spec.has_event_id and row.get("event_id") is None:
            row = dict(row)
            row["event_id"] = secrets.token_hex(6)
        staged: tuple[Body, ...] = ()
        if bodies:
            staged = tuple(bodies)
            if staged:
                tables.check_bodies(spec, row, staged)
        pending = self._pending
        keys = tuple(row)
        batch = spec.batch
        if batch is None or batch.keys != keys:
            batch = tables.batch_for(spec, keys, pending.batches)
        values: tuple[Any, ...] = tuple(row.values())
        batch.rows.append(values)
        pending.buffered += 1
        # A row's texts and blobs count towards flush_bytes as bodies do: by rows alone, 50 000
        # rows of a megabyte each were held before the first flush.
        pending.buffered_bytes += sum([len(v) for v in values if type(v) in _SIZED])
        if staged:
            now = self._clock()
            self._staging.stage_bodies(table, row, staged, now, self._stamp(now))
        if pending.buffered >= self._flush_rows or pending.buffered_bytes >= self._flush_bytes:
            self._flush_in_background()

    # --- flush --------------------------------------------------------------------------

    def flush(self) -> None:
        """One flush cycle: bytes on disk and synced, then one transaction for every row.

        Waits for a background flush in progress first. If the transaction fails, nothing is
        forgotten: the same segments and rows are retried by the next flush (the block upsert
        is monotone, so the grown extent lands once). Rows that the schema's constraints
        refuse are dropped, the others committed, and RowRejected says how many and why the
        first was refused.
        """
        if self._closed:
            raise LedgerError("the ledger writer is closed", self._db_path)
        self._reap()
        job = self._take_work()
        if job is not None:
            flush.run(job, self._work)
            self._finish(job)

    def wait(self) -> None:
        """Wait until a background flush (started by a full buffer) has committed.

        Raises what that flush raised; rows it could not commit are back in the buffers.
        """
        if self._closed:
            raise LedgerError("the ledger writer is closed", self._db_path)
        self._reap()

    def _flush_in_background(self) -> None:
        """The automatic flush: the same cycle, committed by a worker while staging goes on.

        The segment is cut here, so the archive bytes are exactly those of a synchronous
        flush; only the fdatasync and the transaction overlap the caller's next inserts.
        """
        self._reap()
        job = self._take_work()
        if job is None:
            return
        self._job = job  # first: whatever interrupts from here, _join_job finds and runs the job
        self._spans.committing(job.body_rows)
        flush.start(job, self._work)

    def _check_lock(self) -> None:
        """Before each flush writes: WriterLockLost if the lock file was deleted or replaced."""
        if self._lock is not None:
            self._lock.check()

    def _take_work(self) -> Job | None:
        """Cut the segment (the flush cycle's first step, Write) and move everything buffered
        into a job."""
        self._check_lock()
        now = self._clock()
        self._staging.cut_segment(now)
        if self._pending.empty():
            return None
        return self._pending.take(self._stamp(now), self._tables.forget_batches)

    def _work(self, job: Job) -> None:
        # The archive and the connection are read when the job runs, on whichever thread.
        flush.sync_and_commit(job, self._staging.archive, self._conn, self._rows_per_statement)

    def _rows_per_statement(self, width: int) -> int:
        return max(1, min(ROWS_PER_STATEMENT, self._max_variables // width))

    def _join_job(self) -> None:
        job = self._job
        if job is not None:
            flush.join(job, self._work, self._db_path)

    def _reap(self) -> None:
        """Wait for the background flush, if any, and take its outcome."""
        job = self._job
        if job is not None:
            self._join_job()
            self._finish(job)

    def _finish(self, job: Job) -> None:
        counts = self._counts
        self._job = None
        self._spans.settled()
        if job.sync_error is not None:
            counts.bodies_dropped += job.body_count
            if self._staging.archive is not None:
                self._staging.retire(f"fdatasync failed ({job.sync_error.detail})")
        if job.error is not None and not job.committed:
            self._pending.restore(job)
            if isinstance(job.error, sqlite3.Error):
                # Close's flush is the last: nothing is retried after it.
                fate = ("the writer is closing, so they are lost" if self._closing
                        else "they are kept and retried by the next flush")
                raise LedgerError(f"flush did not commit ({job.error}); its rows and bodies were not written and "
                                  f"{fate}", self._db_path) from job.error
            raise job.error
        rejected = job.rejected
        refused_bodies = sum(1 for table, _ in rejected if table == "event_body_blobs")
        refused_rows = len(rejected) - refused_bodies
        counts.bodies_dropped += refused_bodies
        counts.rows_rejected += refused_rows
        counts.bodies_committed += len(job.body_rows) - refused_bodies
        counts.rows_committed += job.buffered - job.body_count - refused_rows
        counts.flushes += 1
        self._spans.committed(job.body_rows)
        if job.error is not None:
            raise job.error  # it struck after COMMIT: the rows are counted as committed
        if rejected:
            table, why = rejected[0]
            raise RowRejected(f"session.db refused {len(rejected)} rows, which were dropped (the others were "
                              f"committed); first: a {table} row: {why}", self._db_path)

    # --- close --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the open block, flush, sync, checkpoint the WAL and release the writer lock.

        Idempotent. ``on_close(self)`` runs after everything is released, only on success.
        """
        if self._closed:
            return
        error: BaseException | None = None
        staging = self._staging
        self._closing = True
        try:
            if staging.archive is not None and staging.archive.block_offset is not None:
                staging.close_block()
            self.flush()
        except BaseException as e:  # noqa: BLE001 - the files are released before it is re-raised
            error = e
            self._counts.bodies_dropped += len(self._pending.body_rows)
        try:
            self._join_job()  # a background flush must not share the connection with what follows
            if staging.archive is not None:
                staging.archive.sync()
            # A writer that lost its lock writes nothing more, not even the checkpoint.
            if self._conn is not None and self._lock is not None and self._lock.lost is None:
                if not self._durable:   # the one sync of a ledger written without: this checkpoint's
                    self._conn.execute("PRAGMA synchronous = NORMAL")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except (LedgerError, sqlite3.Error) as e:
            error = error or e
        finally:
            self._release()
        if error is not None:
            raise error
        if self._on_close is not None:
            self._on_close(self)

    def _release(self) -> None:
        self._closed = True
        self._join_job()
        self._job = None
        self._spans.close()
        self._staging.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"LedgerWriter({str(self._directory)!r}, codec={self.codec!r}, closed={self._closed}, "
                f"buffered={self._pending.buffered})")
