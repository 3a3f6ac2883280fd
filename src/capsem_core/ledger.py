"""Reading a ledger: the session.db + session.bodies pair as one unit.

``Ledger`` opens both halves (refusing a missing half, symlinks, a foreign archive header
and a schema from another build), answers ``ready()`` cheaply, returns verified bodies,
walks bodies in archive order with each segment inflated once, and copies, forks or
deletes the pair together.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from capsem_core import cores, db, schema
from capsem_core import pair as _pair
from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.bodies import read as _bulk
from capsem_core.bodies.read import BodyRecord
from capsem_core.bodies.batch import BodyBatch
from capsem_core.bodies.body_index import BodyIndex
from capsem_core.check.incremental import VerifyOptions, VerifyResult, parse_duration, verify_part
from capsem_core.check.subset import Subset
from capsem_core.columns.scan import Scan, open_scan
from capsem_core.columns.source import HeldFile
from capsem_core.errors import LedgerError
from capsem_core.snapshot import Snapshot
from capsem_core.events import DEFAULT_POLL_S, MAX_LIMIT, EventPage, EventReader
from capsem_core.export import warc as _warc_export
from capsem_core.export.warc_summary import WarcSummary
from capsem_core.format import FILE_HEADER_BYTES
from capsem_core.pages.tables import HeldMap
from capsem_core.paths import (
    SESSION_BODIES,
    SESSION_DB,
    ledger_paths,
    require_regular_file,
)

# read_body's cache of inflated blocks: a few dozen blocks of the usual 1-3 MiB.
DEFAULT_BLOCK_CACHE_BYTES = 32 << 20
# bodies() reads in batches this large: the memory it holds, whatever the ledger's size.
_BODIES_BATCH_BYTES = 16 << 20


# The longest wait between two looks at a caught-up ledger that follow() takes.
_MAX_POLL_S = 86400.0


class Ledger:
    """A read-only view of one ledger pair (session.db and session.bodies), opened together.

    ``Ledger(path)`` takes the ledger directory or its session.db. Opening checks that both
    files are regular files (SymlinkRefused for a symbolic link, LedgerError naming the file
    for a missing or foreign one), that the schema is this build's (SchemaMismatch) and that
    session.bodies starts with a version-2 archive header (BadFileHeader); it costs a few
    small reads and one memory map, never a scan of the tables or the archive. The ledger
    holds one read-only SQLite connection, one descriptor and one map of session.bodies until
    ``close()`` (or the end of a ``with`` block) releases them; any read after that raises
    LedgerError. Thread-safe: the archive reader is used under a lock, so concurrent reads
    of one Ledger take turns (each bulk read runs the kernel's own threads); open one Ledger
    per thread to read in parallel.

    ``block_cache_bytes`` bounds ``read_body``'s cache of inflated blocks (default 32 MiB;
    0 keeps one block, as Capsem's reader does): a read landing in a cached block inflates
    nothing it has already inflated.

    ``threads=0``, in every method that takes it, is the thread budget of
    ``capsem_core.cores``: one per core this process may use (its CPU affinity), unless
    ``CAPSEM_CORE_THREADS`` or ``cores.limit`` narrows it; anything but an int from 0 to
    ``cores.MAX_THREADS`` is a TypeError or ValueError.
    """

    def __init__(self, path: os.PathLike[str] | str, *, block_cache_bytes: int = DEFAULT_BLOCK_CACHE_BYTES):
        _bulk.check_max_bytes(block_cache_bytes, least=0, name="block_cache_bytes")
        self._closed = False
        self._events: EventReader | None = None
        self._columns_file: HeldFile | None = None
        self.db_path, self.bodies_path = ledger_paths(path)
        self.directory = self.db_path.parent
        require_regular_file(self.db_path, SESSION_DB)
        require_regular_file(self.bodies_path, SESSION_BODIES)
        # A -wal whose commits cannot be read here (read-only media, no -shm) is refused in
        # one line naming it: the main file alone would answer with a stale ledger.
        self._read_plan = db.complete_plan(self.db_path)
        self._conn = db.connect_readonly(self.db_path, plan=self._read_plan)
        try:
            schema.check_schema(self._conn, self.db_path)
            self._ready = schema.ReadyCheck(self._conn, self.db_path)
            self._archive = _archive.ArchiveReader(str(self.bodies_path), block_cache_bytes)
            # session.db's own pages, for index scans where the file is the snapshot: mapped
            # once here, so a scan opens nothing.
            self._pages = HeldMap(self.db_path)
        except BaseException:
            self._conn.close()
            raise
        self._lock = threading.Lock()

    def close(self) -> None:
        """Release the SQLite connection, and session.bodies' map and descriptor.

        Idempotent and cheap; waits for a read in progress on another thread to finish.
        Every later read raises LedgerError ("ledger is closed").
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._archive.close()
                self._pages.close()
                if self._events is not None:
                    self._events.close()
                if self._columns_file is not None:
                    self._columns_file.close()
            finally:
                self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once ``close()`` has run."""
        return self._closed

    def _live(self) -> None:
        if self._closed:
            raise LedgerError("ledger is closed: open it again to read it", self.db_path)

    def ready(self) -> None:
        """Check, cheaply, that the ledger still has this build's shape.

        Raises SchemaMismatch when a table or column the reader needs is gone or changed, and
        LedgerError when the ledger is closed. Reads only the schema (no table pages), so it
        can be called before every request.
        """
        with self._lock:
            self._live()
            self._ready.ready()

    def _query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        # The caller holds self._lock: close() frees the connection under it.
        self._live()
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"query failed: {exc}", self.db_path) from None

    def _checked_row(self, event_id: object, block_offset: object, body_offset: object, body_len: object,
                     body_hash: object) -> tuple[int, int, int, str]:
        # session.db tables are not STRICT: a hostile index can hold text or floats anywhere.
        if not all(type(v) is int for v in (block_offset, body_offset, body_len)) or not isinstance(body_hash, str):
            raise LedgerError(f"event_body_blobs row of {event_id!r} has a non-integer span or a non-text body_hash",
                              self.db_path)
        return block_offset, body_offset, body_len, body_hash  # type: ignore[return-value]

    def _refresh_archive(self) -> None:
        # Under the lock: a session.bodies renamed over since open is opened anew.
        self._live()
        if self._archive.file_was_replaced():
            fresh = _archive.ArchiveReader(str(self.bodies_path), self._archive.cache_bytes,
                                           use_libdeflate=self._archive.uses_libdeflate)
            self._archive.close()  # its map and descriptor name the replaced file
            self._archive = fresh

    def _read_span(self, event_id: str, block_offset: int, body_offset: int, body_len: int, body_hash: str) -> bytes:
        # Hold the lock across the whole read: the archive cursor is shared state.
        self._refresh_archive()
        # One native call: read, inflate, check the segment hashes and the body hash (the row's
        # text parsed once into its digest; a malformed text matches no bytes).
        return self._archive.read_verified(block_offset, body_offset, body_len, body_hash, event_id)

    def read_body(self, event_id: str, source_table: str, direction: str) -> bytes:
        """The verified bytes of one body (segment hashes and the body hash checked).

        Raises TypeError for an event_id not a str; ValueError for a table or direction no
        body can have; KeyError when the index has no such body; BodyHashMismatch, IntegrityError or
        another ArchiveError (naming the block and, where one is at fault, the segment) when
        the archive does not hold what the index says; LedgerError for a malformed index row
        or a closed ledger. Costs one indexed lookup and inflating the body's block up to the
        body's end (a later body of the same block reuses what is already inflated).
        """
        if not isinstance(event_id, str):   # bytes would find a BLOB event_id, an int an INTEGER one
            raise TypeError(f"event_id is a str, not {type(event_id).__name__}")
        _bulk.check_body_key(source_table, direction)
        # The lookup too under the lock: a close() on another thread must not free the
        # connection while SQLite is stepping this query (a segfault in the sqlite3 module).
        with self._lock:
            rows = self._query(
                "SELECT block_offset, body_offset, body_len, body_hash FROM event_body_blobs "
                "WHERE event_id = ? AND source_table = ? AND direction = ?",
                (event_id, source_table, direction))
            if not rows:
                raise KeyError((event_id, source_table, direction))
            block_offset, body_offset, body_len, body_hash = self._checked_row(event_id, *rows[0])
            return self._read_span(event_id, block_offset, body_offset, body_len, body_hash)

    @contextmanager
    def _snapshot(self) -> Iterator[Snapshot]:
        """One read transaction on the ledger's connection, its map and its archive reader
        (refreshed to the file's committed extent), under the lock."""
        with self._lock:
            self._refresh_archive()
            with Snapshot.within(self.db_path, self._read_plan, self._conn, self._pages, self._archive) as snapshot:
                yield snapshot

    def index(self, *, threads: int = 0) -> BodyIndex:
        """The body index as public numpy arrays (``capsem_core.bodies.BodyIndex``): every
        event_body_blobs row in archive order, its span, digest and keys, and body_blocks.

        One read transaction, native scans (no Python object per row; ``threads`` readers,
        0: one per core). Costs about 100 bytes of memory per body plus its key texts.
        Raises LedgerError when the index cannot be read or the ledger is closed."""
        with self._snapshot() as snapshot:
            return snapshot.index(keys=True, threads=cores.checked(threads))

    def _plan(self, selection: _bulk.Selection, index: BodyIndex | None,
              threads: int) -> tuple[BodyIndex, np.ndarray]:
        with self._snapshot() as snapshot:
            idx = index if index is not None else snapshot.index(keys=True, threads=threads)
            return idx, _bulk.resolve(selection, idx, self._conn, self.db_path)

    def _read_run(self, idx: BodyIndex, positions: np.ndarray, errors: _bulk.Errors, threads: int,
                  scratch: _bulk.Scratch | None = None) -> BodyBatch:
        with self._snapshot() as snapshot:
            return _bulk.read_batch(snapshot, idx, positions, errors, threads, scratch)

    def read_bodies(self, selection: _bulk.Selection = None, *, errors: _bulk.Errors = "raise",
                    max_bytes: int | None = None, threads: int = 0, index: BodyIndex | None = None) -> BodyBatch:
        """The chosen bodies, verified, in one buffer (a ``capsem_core.bodies.BodyBatch``).

        ``selection``: None (every body), a source_table name, a list of (event_id,
        source_table, direction) keys, or positions into ``index`` (an integer array; by
        default into a fresh ``self.index()``, so pass the index the positions came from).
        Bodies come in archive order, each once. The native kernel reads them: each segment
        inflated once, segment and body hashes checked, every body copied to its slot of one
        buffer, on ``threads`` threads (0: one per core) with the GIL released.

        ``errors``: "raise" raises what ``read_body`` would for the first damaged body;
        "skip" leaves damaged bodies out; "report" keeps them in place, empty, with
        ``batch.ok[i]`` False; both list them in ``batch.findings``. ``max_bytes``: ValueError
        when the selection holds more body bytes (read it with ``body_batches``); None or an
        int of at least 0 (TypeError or ValueError otherwise: NaN is no bound). Memory: the
        index, one buffer the size of all the chosen bodies (fresh at each call), and one
        block per thread. Raises ValueError
        for a table name that is not a body table, KeyError for a key the index does not hold, IndexError for a position outside it, LedgerError
        when the index cannot be read or the ledger is closed."""
        _bulk.check_errors(errors)
        if max_bytes is not None:
            _bulk.check_max_bytes(max_bytes, least=0)
        threads = cores.checked(threads)
        idx, positions = self._plan(selection, index, threads)
        if max_bytes is not None:
            total = int(_bulk.slot_lengths(idx, positions).sum())
            if total > max_bytes:
                raise ValueError(f"the selection holds {total} body bytes, more than max_bytes={max_bytes}: "
                                 "read it with body_batches()")
        return self._read_run(idx, positions, errors, threads)

    def body_batches(self, selection: _bulk.Selection = None, *, errors: _bulk.Errors = "raise",
                     max_bytes: int = _bulk.DEFAULT_BATCH_BYTES, threads: int = 0,
                     index: BodyIndex | None = None) -> Iterator[BodyBatch]:
        """``read_bodies`` in batches of at most ``max_bytes`` body bytes (default 64 MiB), for
        selections larger than memory should hold: a generator of BodyBatch, in archive order.
        ``max_bytes`` is an int of at least 1 (TypeError or ValueError otherwise).

        The index is scanned and the selection resolved once, first; batches are cut at block
        boundaries where they can be (a block is then inflated once), and a body larger than
        max_bytes is a batch of its own (a body is at most 16 MiB). A batch's buffer comes back
        to a pool of two once nothing holds it (the batch, a view of one of its bodies, an
        Arrow array of its bytes): a stream whose consumer drops each batch writes into the
        same pages batch after batch. Peak memory: the index, the batches the caller still
        holds (two when each is dropped before the next), and one block per thread. With
        errors="raise" the batch holding the first damaged body raises (the batches before it
        were yielded)."""
        _bulk.check_errors(errors)
        _bulk.check_max_bytes(max_bytes)
        threads = cores.checked(threads)
        idx, positions = self._plan(selection, index, threads)
        runs = _bulk.plan_batches(idx, positions, max_bytes)
        # The pool's regions are sized for this stream's largest batch, not for max_bytes.
        largest = max((int(_bulk.slot_lengths(idx, positions[a:b]).sum()) for a, b in runs), default=0)
        scratch = _bulk.Scratch(batch_bytes=largest)
        for start, end in runs:
            yield self._read_run(idx, positions[start:end], errors, threads, scratch)

    def bodies_of(self, event_id: str) -> list[tuple[str, str, str | None, int]]:
        """(source_table, direction, content_type, body_len) of every body the index names
        for ``event_id``, ordered by table and direction. One indexed lookup. LedgerError
        when the query fails or the ledger is closed; TypeError for an event_id not a str."""
        if not isinstance(event_id, str):
            raise TypeError(f"event_id is a str, not {type(event_id).__name__}")
        with self._lock:
            rows = self._query("SELECT source_table, direction, content_type, body_len FROM event_body_blobs "
                               "WHERE event_id = ? ORDER BY source_table, direction", (event_id,))
        return [(str(t), str(d), None if c is None else str(c), int(n) if type(n) is int else -1)
                for t, d, c, n in rows]

    def bodies(self, source_table: str | None = None, *, threads: int = 0) -> Iterator[BodyRecord]:
        """Every body (of ``source_table`` only, when given) in archive order, verified.

        Read in batches as ``body_batches`` plans them (16 MiB at a time, each segment
        inflated once, on ``threads`` kernel threads, 0: one per core), the kernel writing
        each verified body straight into the bytes object it is handed out as, so memory
        stays at the index plus one batch whatever the ledger's size. Raises what
        ``read_body`` raises, at the body concerned (the bodies before it have been yielded),
        and LedgerError when the ledger is closed."""
        threads = cores.checked(threads)
        idx, positions = self._plan(source_table, None, threads)
        scratch = _bulk.Scratch()
        for start, end in _bulk.plan_batches(idx, positions, _BODIES_BATCH_BYTES):
            with self._snapshot() as snapshot:
                rows, datas, findings = _bulk.read_each(snapshot, idx, positions[start:end], threads, scratch)
            failed = {(f.block_offset, f.body_offset, f.row_id): f for f in findings}
            for i, data in enumerate(datas):
                if data is None:
                    fault = failed[(int(rows.block_offset[i]), int(rows.body_offset[i]), int(rows.id[i]))]
                    raise _bulk.fault_error(fault, self.db_path, self.bodies_path)
                yield BodyRecord(rows.event_id[i], rows.source_table[i], rows.direction[i],  # type: ignore[arg-type]
                                 rows.content_type[i], int(rows.original_bytes[i]), bool(rows.truncated[i]), data)

    def export_warc(self, destination: _warc_export.Destination, *, level: int = _warc_export.DEFAULT_LEVEL,
                    threads: int = 0, max_bytes: int = _warc_export.DEFAULT_BATCH_BYTES) -> WarcSummary:
        """Every body as a WARC 1.1 ``resource`` record, in one gzip member each, between an
        opening and a closing ``warcinfo`` record: what warcio, pywb and FastWARC read, in
        Capsem's own export's format (docs/export.md).

        ``destination``: a binary file object (written, not closed), or a path written under
        the output-path policy (``capsem_core.outputs.output_stream``: a temporary file renamed
        over the name only once the closing record is written, nothing left behind on any
        failure; a device or FIFO written into; ``-`` standard output). Bodies are read in
        archive order through the verify kernel, ``max_bytes`` of body bytes at a time, and
        compressed at libdeflate ``level`` (0..12) on ``threads`` threads (0: one per core).
        A body that cannot be described honestly (no source row, an unreadable timestamp, a
        URI or header with a line break, bytes that fail their hash or do not read back) is
        skipped and counted by reason, the walk going on. Returns a ``WarcSummary``.

        Raises ValueError for a bad level, thread count or max_bytes; LedgerError when the
        index cannot be read, the ledger directory's name cannot be a record id's, the
        destination is refused, or the ledger is closed; OSError when writing fails."""
        def query(sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
            with self._lock:
                return self._query(sql, tuple(params))

        return _warc_export.export_warc(self, destination, query, level=level, threads=threads, max_bytes=max_bytes)

    def verify(self, *, threads: int = 0, progress: Callable[[int, int], None] | None = None,
               incremental: bool = False, subset: str | Subset | None = None,
               max_age: float | str | None = None) -> VerifyResult:
        """Every body read back through its segment and body hashes by the native kernel.

        Returns (verified_count, faults): one ``capsem_core.verify.BodyFault`` per body that
        failed, in archive order; damage is a fault, not an exception. A fault names the
        row's id, event_id, source_table and direction, its block offset, body offset and
        length, (where a segment is at fault) the segment offset, a kind and a message. ``threads=0`` uses all cores; ``progress(bytes, bodies)`` is
        called a few times a second. Costs one pass over the index and inflating every
        block once. Raises LedgerError when the index cannot be read or the ledger is closed.

        Runs on the ledger's own connection and archive map (nothing is opened again), so
        other reads of this Ledger wait for it.

        Less than every block, as ``check --verify-bodies`` does
        (``capsem_core.check.incremental``): ``incremental=True`` reads back only blocks the
        verification record (in the user cache) does not vouch for, and proves the others
        unchanged by one hash of their on-disk bytes (a recorded block whose bytes changed is
        a ``block_changed`` fault with no row: row_id None); ``max_age`` (seconds, or a
        duration such as "7d") reads back blocks verified longer ago; ``subset`` ("n/t", "x%"
        or a ``Subset``) reads only part of the blocks. The result then also says, in
        ``.coverage``, what was verified fully, proven unchanged and skipped. ValueError for
        a subset or duration that does not parse, or max_age without incremental.
        """
        threads = cores.checked(threads)
        if not incremental and subset is None and max_age is None:
            # One read transaction for the scans and the labels of failing rows (the body scan
            # then reads session.db's pages where the file is that snapshot).
            with self._snapshot() as snapshot:
                done = _verify.run(snapshot, threads=threads, progress=progress)
            return VerifyResult(done.verified, done.faults)
        options = VerifyOptions(incremental=incremental,
                                subset=Subset.parse(subset) if isinstance(subset, str) else subset,
                                max_age=parse_duration(max_age) if isinstance(max_age, str) else max_age)
        with self._snapshot() as snapshot:
            outcome = verify_part(snapshot, options, threads=threads, progress=progress)
        if outcome.pending is not None:
            outcome.pending.commit()
        return VerifyResult(outcome.verified, outcome.faults, outcome.coverage)

    def _event_reader(self) -> EventReader:
        with self._lock:
            self._live()
            if self._events is None:
                self._events = EventReader(self.db_path)  # its own connection: its own snapshots
            return self._events

    def events(self, tables: Iterable[str] | str | None = None, after: str = "start", limit: int = 100) -> EventPage:
        """The next page of events of ``tables`` (a name, names, or None: every event table).

        ``after`` is "start", "latest" (everything committed now: an empty page whose cursor
        tails the ledger) or the ``cursor`` of an earlier page. ``limit`` is clamped to
        1..1000. The page is read in one read transaction: across pages every committed row
        of the chosen tables is delivered exactly once, in id order per table; within a page
        tables are merged by time. Raises CursorError for a cursor that is not one, was
        edited, is of another ledger or stands past the ledger's last row; ValueError for a
        table that is not an event table; LedgerError when session.db cannot be read, the
        ledger is closed, or the page would begin with a row holding a value larger than 32
        MiB (the pages before it end just before it, so every event before it is delivered).
        Costs a few indexed lookups per table plus the rows delivered.
        """
        return self._event_reader().page(tables, after, limit)

    def follow(self, tables: Iterable[str] | str | None = None, after: str = "start", limit: int = MAX_LIMIT,
               poll: float = DEFAULT_POLL_S, stop: Callable[[], bool] | None = None) -> Iterator[EventPage]:
        """Pages of events as they are committed: ``events`` repeated, waiting while caught up.

        Yields only pages that hold events; once caught up it checks ``PRAGMA data_version``
        every ``poll`` seconds (no table is read until another connection commits). Runs until
        ``stop()`` returns True (checked between pages and at every poll) or the caller stops
        iterating; the last page's ``cursor`` resumes exactly after what was yielded.
        ``poll`` is a number of seconds, more than 0 and at most a day (ValueError otherwise,
        now rather than at the first wait).
        """
        if type(poll) not in (int, float) or not 0 < poll <= _MAX_POLL_S:
            raise ValueError(f"poll is seconds, more than 0 and at most {_MAX_POLL_S}, not {poll!r}")
        return self._event_reader().follow(tables, after, limit, poll, stop)

    def scan(self, table: str, *, columns: Sequence[str] | None = None, after: str = "start",
             threads: int = 0) -> Scan:
        """The rows of ``table`` (any table of the schema) as Arrow record batches, read in one
        snapshot: a ``capsem_core.columns.Scan``, whose ``__arrow_c_stream__`` pyarrow, polars
        and DuckDB read directly (``pyarrow.table(ledger.scan("net_events"))``), in rowid order.

        ``columns``: None for every column in declared order, else those names in that order.
        ``after``: "start", "latest" or a cursor (a scan's ``cursor``; for an event table an
        events cursor, ``Ledger.events``' too): only rows committed after it. Values are
        SQLite's own: INTEGER int64, REAL float64, TEXT utf8 (text that is not UTF-8 binary),
        BLOB binary, NULL a null; a column holding several storage classes is a dense union
        of them (docs/api.md, "Columns"). Batches of 64k rows are filled ahead natively on
        ``threads`` threads (0: one per core) and freed as the consumer drops them. Once the
        stream is consumed, ``cursor`` stands after its last row. Raises ValueError for a
        table or column that is not the ledger's, CursorError for a cursor that is not one,
        was edited, is of another table or ledger, LedgerError when session.db cannot be
        read or the ledger is closed. The scan opens its own read-only connection: it does
        not wait for, or hold up, the Ledger's other reads.
        """
        with self._lock:
            self._live()
            if self._columns_file is None:
                self._columns_file = HeldFile(self.db_path)
            held = self._columns_file
        return open_scan(self.db_path, table, columns=columns, after=after, threads=cores.checked(threads), held=held)

    def committed_extent(self) -> int:
        """Bytes of session.bodies the index vouches for: the end of the last recorded block.

        One aggregate over body_blocks (one row per block, so cheap); at least the file
        header's 16 bytes. Raises LedgerError when the query fails or the ledger is closed.
        """
        with self._lock:
            (end,) = self._query("SELECT COALESCE(MAX(block_offset + disk_len), 0) FROM body_blocks")[0]
        return max(int(end), FILE_HEADER_BYTES)

    # -- the pair as one unit -------------------------------------------------------------

    def copy_to(self, destination: os.PathLike[str] | str) -> Ledger:
        """Copy the pair into an empty or new directory and return the copy, opened.

        session.db is copied first through SQLite's backup API (a consistent snapshot even
        while a writer appends) and must pass ``PRAGMA quick_check``; session.bodies is then
        copied up to the extent that snapshot commits, so a torn tail never travels.
        ``destination`` follows the output-path policy (``capsem_core.outputs``): made when
        missing but never its parent, never a link; a failed copy leaves nothing there.
        Costs a full copy of both files and one quick_check of the copy. Raises LedgerError
        when a ledger file already exists at the destination, the policy refuses it
        (SymlinkRefused for a link), the copy fails quick_check, session.bodies is shorter
        than its index commits, or this ledger is closed.
        """
        with self._lock:
            self._live()
            _pair.copy_pair(self._conn, self.db_path, self.bodies_path, Path(destination))
        return Ledger(destination)

    def fork(self, destination: os.PathLike[str] | str) -> Ledger:
        """A copy meant to live on as its own session: a new writer may append to it.

        Same cost and errors as ``copy_to``, which it is today."""
        return self.copy_to(destination)

    def delete(self) -> None:
        """Remove the pair and its sidecars together; refused while a writer holds the ledger.

        Raises WriterBusy when a writer holds the ledger's lock. Works on a closed Ledger too
        (it needs only the directory); close it first, or the open handles keep the deleted
        files' space in use until they are released.
        """
        _pair.delete_ledger(self.directory)


def copy_ledger(source: os.PathLike[str] | str, destination: os.PathLike[str] | str) -> Path:
    """Copy a ledger pair (see ``Ledger.copy_to``); returns the destination directory."""
    with Ledger(source) as ledger:
        ledger.copy_to(destination).close()
    return Path(destination)


delete_ledger = _pair.delete_ledger

__all__ = ["BodyRecord", "Ledger", "copy_ledger", "delete_ledger", "ledger_paths"]
