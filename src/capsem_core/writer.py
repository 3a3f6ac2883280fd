"""Writing a Capsem session ledger: the ``session.bodies`` appender and the ledger writer.

This module owns the write side of a ledger:

* ``BodyArchiveWriter`` (in ``capsem_core.archive_writer``, re-exported here) appends to one
  ``session.bodies`` file (archive format version 2).
* ``LedgerWriter`` owns a whole ledger directory (``session.db`` + ``session.bodies``): the
  writer lock, the SQLite connection, the schema, buffering of ledger rows, staging of their
  bodies (truncation, hashing, deduplication) and the flush cycle that puts archive bytes on
  disk and syncs them before any index row naming them commits.

Codec 1 is Capsem's raw deflate; codec 2 (zstd) is this project's opt-in extension, which
Capsem cannot read. ``docs/format.md`` describes both.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import secrets
import sqlite3
import stat
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from capsem_core import db
from capsem_core import format as fmt
from capsem_core._native._blake3 import digest as _blake3_digest
from capsem_core.archive_writer import ZSTD_WINDOW_LOG, BodyArchiveWriter  # noqa: F401 - re-exported
from capsem_core.archive_writer import SegmentWritten, codec_id
from capsem_core.format import CODEC_NAMES
from capsem_core.errors import BlockFull, LedgerError, SymlinkRefused, WriterBusy

__all__ = [
    "Body",
    "BodyArchiveWriter",
    "LedgerWriter",
    "SegmentWritten",
    "codec_id",
    "ledger_timestamp",
]


# --- the ledger writer ------------------------------------------------------------------------

BODY_DIRECTIONS = frozenset(("request", "response", "payload", "stdout", "stderr"))
_HEX12 = re.compile(r"[0-9a-f]{12}")

# Tables the ledger writer fills itself (the body index) or never writes (the version marker).
_WRITER_OWNED_TABLES = frozenset(("body_blocks", "event_body_blobs", "transport_schema"))

_UPSERT_BLOCK = (
    "INSERT INTO body_blocks (block_offset, raw_len, disk_len, sealed_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (block_offset) DO UPDATE SET "
    # The extent never shrinks; sealed_at moves only when raw bytes were added, so an empty
    # FINAL segment does not make an old block look new to retention.
    "sealed_at = CASE WHEN excluded.raw_len > body_blocks.raw_len THEN excluded.sealed_at "
    "ELSE body_blocks.sealed_at END, raw_len = excluded.raw_len, disk_len = excluded.disk_len "
    "WHERE excluded.disk_len >= body_blocks.disk_len")

_BODY_INSERT_HEAD = (
    "INSERT OR REPLACE INTO event_body_blobs (event_id, event_type, source_table, direction, content_type, "
    "original_bytes, stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, trace_id, "
    "turn_id, created_at) VALUES ")
_BODY_COLUMNS = 15
# Rows per INSERT statement. SQLite rebuilds a CHECK's IN-list once per statement run, so one
# statement carrying many rows checks them for a fraction of the per-row cost.
_ROWS_PER_STATEMENT = 64

_LOOKUP_COMMITTED = ("SELECT block_offset, body_offset, body_len FROM event_body_blobs "
                     "WHERE body_hash = ? AND body_len = ? LIMIT 1")

# Positions in a staged event_body_blobs row (the tuple _INSERT_BODY binds).
_ROW_BLOCK, _ROW_OFFSET, _ROW_LEN = 9, 10, 11

_FILTER_BITS_LOG = 25  # 4 MiB of filter: ~0.5% false positives at 1M bodies, still useful at 10M

_LOCK_RETRY_SECONDS = 0.02
_OPEN_RETRIES = 50


@dataclass(slots=True)
class Body:
    """One captured body of a ledger row: what ``LedgerWriter.insert`` archives."""

    direction: str
    data: bytes
    event_type: str
    content_type: str | None = None
    original_bytes: int | None = None


def _second_prefix(seconds: int) -> str:
    t = time.gmtime(seconds)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}."


def ledger_timestamp(epoch_seconds: float) -> str:
    """RFC 3339 UTC to the microsecond, fixed width: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    seconds, micros = divmod(round(epoch_seconds * 1_000_000), 1_000_000)
    return f"{_second_prefix(seconds)}{micros:06d}Z"


class _Batch:
    """Buffered rows of one table sharing one column list, inserted together at the flush."""

    __slots__ = ("table", "keys", "head", "rows")

    def __init__(self, table: str, keys: tuple[str, ...], head: str) -> None:
        self.table = table
        self.keys = keys
        self.head = head  # "INSERT INTO table (columns) VALUES "
        self.rows: list[tuple[Any, ...]] = []


def _values_sql(head: str, width: int, rows: int) -> str:
    group = "(" + ", ".join("?" * width) + ")"
    return head + ", ".join([group] * rows)


def _insert_rows(conn: sqlite3.Connection, head: str, width: int, rows: list[tuple[Any, ...]],
                 per_statement: int) -> None:
    """Insert ``rows`` with multi-row VALUES statements of ``per_statement`` rows (and one remainder)."""
    if not rows:
        return
    k = max(1, min(per_statement, len(rows)))
    full = len(rows) - len(rows) % k
    if full:
        chain = itertools.chain.from_iterable
        conn.executemany(_values_sql(head, width, k),
                         (tuple(chain(rows[i:i + k])) for i in range(0, full, k)))
    if full < len(rows):
        rest = rows[full:]
        conn.execute(_values_sql(head, width, len(rest)), tuple(itertools.chain.from_iterable(rest)))


class _TableSpec:
    __slots__ = ("name", "columns", "has_event_id", "carries_bodies", "statements", "batch")

    def __init__(self, name: str, columns: tuple[str, ...], carries_bodies: bool) -> None:
        self.name = name
        self.columns = frozenset(columns)
        self.has_event_id = "event_id" in self.columns
        self.carries_bodies = carries_bodies
        self.statements: dict[tuple[str, ...], str] = {}
        self.batch: _Batch | None = None


class _CommittedHashes:
    """A Bloom filter over the body hashes of committed rows of 512 bytes or more.

    Cross-block dedup asks the index (``event_body_blobs`` by ``body_hash``) for a committed
    span; this filter answers "certainly not committed" for most new bodies without that
    query. It has no false negatives, so the answers are exactly what the index lookup gives,
    in a fixed 4 MiB however many bodies the ledger holds.
    """

    __slots__ = ("_bits",)
    _MASK = (1 << _FILTER_BITS_LOG) - 1

    def __init__(self) -> None:
        self._bits = bytearray(1 << (_FILTER_BITS_LOG - 3))

    @classmethod
    def _positions(cls, key: int) -> tuple[int, int, int]:
        # BLAKE3 output is uniform, so three slices of its first 64 bits are independent enough.
        mask = cls._MASK
        return key & mask, (key >> 25) & mask, (key >> 39) & mask

    def add_hash_text(self, body_hash: str) -> None:
        """Record ``blake3:<hex>`` (as stored in the index)."""
        bits = self._bits
        for p in self._positions(int(body_hash[7:23], 16)):
            bits[p >> 3] |= 1 << (p & 7)

    def may_hold(self, digest: bytes) -> bool:
        bits = self._bits
        a, b, c = self._positions(int.from_bytes(digest[:8], "big"))
        return bool(bits[a >> 3] & (1 << (a & 7)) and bits[b >> 3] & (1 << (b & 7))
                    and bits[c >> 3] & (1 << (c & 7)))


class _Job:
    """One flush's worth of work, taken out of the buffers: segments to record, rows to commit."""

    __slots__ = ("segments", "body_rows", "batches", "buffered", "unsynced", "stamp", "body_count",
                 "rejected", "error", "sync_error", "thread", "claim", "done", "committed")

    def __init__(self, segments: list[SegmentWritten], body_rows: list[tuple[Any, ...]], batches: list[_Batch],
                 buffered: int, unsynced: bool, stamp: str) -> None:
        self.segments = segments
        self.body_rows = body_rows
        self.batches = batches
        self.buffered = buffered
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


_REJECTIONS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError, sqlite3.DataError,
               OverflowError)


def _refuse_symlink(path: Path, what: str) -> None:
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise SymlinkRefused(f"{what} is a symlink; a ledger is written only through its own files", path)
    except FileNotFoundError:
        pass


class LedgerWriter:
    """The one writer of a ledger directory: rows into ``session.db``, bodies into ``session.bodies``.

    ``insert`` buffers a row and stages its bodies; ``flush`` runs Capsem's flush cycle
    (segment or FINAL segment, fdatasync, then one transaction: ``body_blocks`` upserts,
    ``event_body_blobs`` rows, the buffered rows) and returns once it committed; ``close``
    closes the open block, flushes, syncs, checkpoints the WAL and releases the writer lock.
    Buffered work is flushed by itself every ``flush_rows`` rows+bodies or ``flush_bytes``
    staged body bytes: that flush cuts its segment at once and leaves the fdatasync and the
    transaction to a worker thread while inserts go on (one at a time; ``wait()`` joins it,
    and ``flush``/``close`` always do). Its errors surface at the next insert that flushes,
    at ``wait``, ``flush`` or ``close``.

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
                 lock_timeout: float = 1.0) -> None:
        from capsem_core import schema

        self._codec = codec_id(codec)
        self._clock = clock if clock is not None else time.time
        self._on_close = on_close
        self._close_every_flush = close_every_flush
        self._flush_rows = max(1, flush_rows)
        self._flush_bytes = max(1, flush_bytes)
        self._directory = Path(directory)
        self._db_path = self._directory / "session.db"
        self._bodies_path = fmt.archive_path_for(self._db_path)
        self._closed = True
        self._lock_fd = -1
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._job: _Job | None = None
        # Spans of bodies >= 512 bytes whose rows a background flush is committing right now:
        # for cross-block dedup they count as committed (their bytes are written and synced
        # before that commit), so dedup does not depend on when the commit lands.
        self._inflight: dict[str, tuple[int, int, int]] = {}
        self._archive: BodyArchiveWriter | None = None
        self.archive_out_of_service: str | None = None

        # Buffered work. Body rows are kept in staging order; the first _rows_written of
        # them name bytes already appended to the file (or spans committed earlier).
        self._batches: list[_Batch] = []
        self._specs: dict[str, _TableSpec] = {}
        self._buffered = 0
        self._buffered_bytes = 0
        self._body_rows: list[tuple[Any, ...]] = []
        self._rows_written = 0
        self._segments: list[SegmentWritten] = []
        self._unsynced = False
        self._block_spans: dict[bytes, tuple[int, int, int]] = {}
        self._committed = _CommittedHashes()
        self._block_opened_at: float | None = None
        # What the ledger itself knows of the archive, for _retire after an interrupt: the
        # block bodies are being staged into, and the last segment recorded in _segments.
        self._staging_block: int | None = None
        self._last_recorded: SegmentWritten | None = None
        self._stamp_second = -1
        self._stamp_prefix = ""

        self.bodies_stored = 0
        self.bodies_deduplicated = 0
        self.bodies_deduplicated_in_block = 0
        self.bodies_deduplicated_in_archive = 0
        self.bodies_dropped = 0
        self.bodies_committed = 0
        self.rows_committed = 0
        self.rows_rejected = 0
        self.flushes = 0

        self._directory.mkdir(parents=True, exist_ok=True)
        _refuse_symlink(self._db_path, "session.db")
        _refuse_symlink(self._bodies_path, "session.bodies")
        self._lock_fd = self._take_lock(lock_timeout)
        try:
            self._conn = self._connect(schema)
            self._max_variables = self._conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
            self._reader = db.connect_readonly(self._db_path, isolation_level=None, check_same_thread=True)
            self._open_archive()
        except BaseException:
            self._release()
            raise
        self._closed = False
        self._table_columns = schema.table_columns
        self._tables = frozenset(schema.TABLES) - _WRITER_OWNED_TABLES
        self._body_tables = frozenset(schema.BODY_SOURCE_TABLES)
        self._body_event_types = frozenset(schema.BODY_EVENT_TYPES)

    # --- open -----------------------------------------------------------------------------

    def _take_lock(self, timeout: float) -> int:
        lock_path = Path(f"{self._db_path}-writer.lock")
        _refuse_symlink(lock_path, "session.db-writer.lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise LedgerError(f"io: cannot open the writer lock: {e.strerror or e}", lock_path) from e
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                # A closing writer may still be finishing: give it a moment before refusing.
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise WriterBusy(
                        f"ledger {self._directory} already has a writer ({lock_path.name} is held); a ledger "
                        "has exactly one writer, because its body archive cannot survive two appenders",
                        self._db_path) from None
                time.sleep(_LOCK_RETRY_SECONDS)

    def _connect(self, schema: Any) -> sqlite3.Connection:
        # Background flushes commit from a worker thread, one at a time, never concurrently
        # with this thread's use of the connection.
        conn = db.connect_readwrite(self._db_path, create=True, check_same_thread=False)
        try:
            for attempt in range(_OPEN_RETRIES):
                try:
                    conn.execute(f"PRAGMA busy_timeout = {db.busy_timeout_ms()}")
                    conn.execute("PRAGMA journal_mode = WAL")
                    conn.execute("PRAGMA synchronous = NORMAL")
                    conn.execute("PRAGMA foreign_keys = ON")
                    conn.execute("PRAGMA mmap_size = 268435456")
                    # Large flushes touch many index pages; a bigger cache keeps them warm.
                    conn.execute("PRAGMA cache_size = -65536")
                    fresh = conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0
                    break
                except sqlite3.OperationalError as e:
                    if attempt + 1 == _OPEN_RETRIES or not ("locked" in str(e) or "busy" in str(e)):
                        raise
                    time.sleep(_LOCK_RETRY_SECONDS)
            if fresh:
                schema.create_schema(conn, self._db_path)
            schema.check_schema(conn, self._db_path)
        except sqlite3.DatabaseError as e:
            conn.close()
            if "not a database" in str(e):
                raise fmt.SchemaMismatch(f"not a SQLite session ledger ({e})", self._db_path) from e
            raise LedgerError(f"cannot open session.db for writing: {e}", self._db_path) from e
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_archive(self) -> None:
        """Capsem's open-time check: never append to an archive the index does not fit."""
        assert self._conn is not None
        try:
            indexed_end = self._conn.execute(
                "SELECT MAX(block_offset + disk_len) FROM body_blocks").fetchone()[0] or 0
        except sqlite3.DatabaseError as e:
            self._out_of_service(f"body_blocks is unreadable ({e}); this writer stores no bodies")
            return
        add = self._committed.add_hash_text
        for (body_hash,) in self._conn.execute("SELECT body_hash FROM event_body_blobs WHERE body_len >= ?",
                                               (fmt.MIN_ARCHIVE_DEDUP_BYTES,)):
            if isinstance(body_hash, str) and len(body_hash) == 71:
                add(body_hash)
        try:
            size = os.lstat(self._bodies_path).st_size
        except FileNotFoundError:
            size = 0
        if size < indexed_end:
            self._out_of_service(
                f"session body index names bytes past the end of the archive: blocks end at {indexed_end} but "
                f"{self._bodies_path.name} holds {size} bytes; this writer stores no bodies and leaves the file "
                "as it is (rows naming the missing bytes fail their hash checks rather than answer wrongly)")
            return
        try:
            self._archive = BodyArchiveWriter(self._bodies_path, codec=self._codec)
        except SymlinkRefused:
            raise
        except LedgerError as e:
            self._out_of_service(f"the body archive cannot be appended to ({e.detail}); this writer stores "
                                 "no bodies and leaves the file as it is")

    def _out_of_service(self, reason: str) -> None:
        self.archive_out_of_service = reason
        warnings.warn(f"{self._bodies_path}: {reason}", RuntimeWarning, stacklevel=3)

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
        return self._archive

    @property
    def buffered_rows(self) -> int:
        """Rows and bodies waiting for the next flush."""
        return self._buffered

    # --- timestamps ---------------------------------------------------------------------

    def _stamp(self, now: float) -> str:
        micros = round(now * 1_000_000)
        second, fraction = divmod(micros, 1_000_000)
        if second != self._stamp_second:
            # Most stamps of a busy second share their prefix: format it once.
            self._stamp_prefix = _second_prefix(second)
            self._stamp_second = second
        return f"{self._stamp_prefix}{fraction:06d}Z"

    # --- insert -------------------------------------------------------------------------

    def _spec(self, table: str) -> _TableSpec:
        spec = self._specs.get(table)
        if spec is None:
            if table not in self._tables:
                raise ValueError(f"{table!r} is not a session.db table this writer fills "
                                 "(body_blocks and event_body_blobs are written from bodies)")
            spec = self._specs[table] = _TableSpec(table, self._table_columns(table), table in self._body_tables)
        return spec

    def _batch_for(self, spec: _TableSpec, keys: tuple[str, ...]) -> _Batch:
        head = spec.statements.get(keys)
        if head is None:
            if not keys:
                raise ValueError(f"a {spec.name} row needs at least one column")
            unknown = [k for k in keys if k not in spec.columns]
            if unknown:
                raise ValueError(f"{spec.name} has no column {', '.join(map(repr, unknown))}")
            head = spec.statements[keys] = f"INSERT INTO {spec.name} ({', '.join(keys)}) VALUES "
        batch = _Batch(spec.name, keys, head)
        self._batches.append(batch)
        spec.batch = batch
        return batch

    def insert(self, table: str, row: Mapping[str, object], bodies: Iterable[Body] = ()) -> None:
        """Buffer one ledger row of ``table`` and stage its bodies for the next flush.

        Bodies become ``event_body_blobs`` rows keyed ``(event_id, table, direction)``; a row
        without an ``event_id`` gets a fresh one (12 lowercase hex). Empty bodies are skipped.
        Raises ValueError for a table, column, event id or body field the ledger cannot hold.
        """
        if self._closed:
            raise LedgerError("the ledger writer is closed", self._db_path)
        spec = self._specs.get(table) or self._spec(table)
        if spec.has_event_id and row.get("event_id") is None:
            row = dict(row)
            row["event_id"] = secrets.token_hex(6)
        if bodies:
            bodies = tuple(bodies)
            if bodies:
                self._check_bodies(spec, row, bodies)
        keys = tuple(row)
        batch = spec.batch
        if batch is None or batch.keys != keys:
            batch = self._batch_for(spec, keys)
        batch.rows.append(tuple(row.values()))
        self._buffered += 1
        if bodies:
            self._stage_bodies(table, row, bodies)
        if self._buffered >= self._flush_rows or self._buffered_bytes >= self._flush_bytes:
            self._flush_in_background()

    def _check_bodies(self, spec: _TableSpec, row: Mapping[str, object], bodies: tuple[Body, ...]) -> None:
        if not spec.carries_bodies:
            raise ValueError(f"{spec.name} rows carry no archived bodies (event_body_blobs.source_table allows "
                             f"{', '.join(sorted(self._body_tables))})")
        event_id = row.get("event_id")
        if not isinstance(event_id, str) or _HEX12.fullmatch(event_id) is None:
            raise ValueError(f"a body's event_id must be 12 lowercase hex characters, not {event_id!r}")
        for body in bodies:
            if not isinstance(body.data, (bytes, bytearray, memoryview)):
                raise ValueError(f"a body's data must be bytes, not {type(body.data).__name__}")
            if body.direction not in BODY_DIRECTIONS:
                raise ValueError(f"body direction {body.direction!r} is not one of {sorted(BODY_DIRECTIONS)}")
            if body.event_type not in self._body_event_types:
                raise ValueError(f"body event_type {body.event_type!r} is not an event_body_blobs event type")
            if body.original_bytes is not None and body.original_bytes < 0:
                raise ValueError("a body's original_bytes cannot be negative")

    def _stage_bodies(self, table: str, row: Mapping[str, object], bodies: tuple[Body, ...]) -> None:
        archive = self._archive
        now = self._clock()
        created_at = self._stamp(now)
        event_id = row["event_id"]
        trace_id = row.get("trace_id")
        turn_id = row.get("turn_id")
        rows = self._body_rows
        spans = self._block_spans
        for body in bodies:
            data = body.data
            received = len(data)
            if not received:
                continue
            if archive is None:
                self.bodies_dropped += 1
                continue
            if archive.block_offset is not None and (archive.wants_close or self._block_stale(now)):
                archive = self._close_block()
                if archive is None:
                    self.bodies_dropped += 1
                    continue
            stored = data if received <= fmt.MAX_BODY_BLOB_BYTES else data[:fmt.MAX_BODY_BLOB_BYTES]
            stored_bytes = len(stored)
            declared = body.original_bytes or 0
            original = declared if declared > received else received
            digest = _blake3_digest(stored)
            span = spans.get(digest)
            if span is not None:
                self.bodies_deduplicated += 1
                self.bodies_deduplicated_in_block += 1
            else:
                if stored_bytes >= fmt.MIN_ARCHIVE_DEDUP_BYTES:
                    span = self._committed_span(digest, stored_bytes)
                if span is not None:
                    self.bodies_deduplicated += 1
                    self.bodies_deduplicated_in_archive += 1
                else:
                    span = self._stage(archive, stored, now)
                    if span is None:
                        archive = self._archive
                        self.bodies_dropped += 1
                        continue
                    spans[digest] = span
                    self.bodies_stored += 1
                    self._buffered_bytes += stored_bytes
            rows.append((event_id, body.event_type, table, body.direction, body.content_type, original,
                         stored_bytes, 1 if original > stored_bytes else 0, "blake3:" + digest.hex(),
                         span[0], span[1], span[2], trace_id, turn_id, created_at))
            self._buffered += 1

    def _committed_span(self, digest: bytes, size: int) -> tuple[int, int, int] | None:
        """A committed span holding exactly these bytes (cross-block dedup), if the index has one."""
        assert self._reader is not None
        if not self._committed.may_hold(digest):
            return None
        body_hash = "blake3:" + digest.hex()
        try:
            found = self._reader.execute(_LOOKUP_COMMITTED, (body_hash, size)).fetchone()
        except sqlite3.Error:
            # A failed lookup only costs a second copy of the body.
            found = None
        if found is None and self._inflight:
            span = self._inflight.get(body_hash)
            if span is not None and span[2] == size:
                return span
        return found

    def _stage(self, archive: BodyArchiveWriter, stored: bytes, now: float) -> tuple[int, int, int] | None:
        """Stage into the open block (closing it on BlockFull); None if the body is dropped."""
        opening = archive.block_offset is None
        try:
            span = archive.stage(stored)
        except BlockFull:
            if self._close_block() is None:
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
            self._retire(f"staging a body failed ({error.detail})")

    def _block_stale(self, now: float) -> bool:
        # A clock that went backwards counts as not stale.
        opened = self._block_opened_at
        return opened is not None and now - opened >= fmt.MAX_BLOCK_AGE_SECONDS

    # --- segments -----------------------------------------------------------------------

    def _close_block(self) -> BodyArchiveWriter | None:
        """Write the open block's FINAL segment; the archive, or None if that retired it."""
        archive = self._archive
        assert archive is not None
        try:
            written = archive.close_block()
            if written is not None:
                self._record(written)
            self._rows_written = len(self._body_rows)
        except LedgerError as e:
            self._retire(f"closing block {archive.block_offset} failed ({e.detail})")
            return None
        except BaseException:
            self._interrupted(archive)
            raise
        self._block_spans.clear()
        self._block_opened_at = None
        return archive

    def _cut_segment(self, now: float) -> None:
        """Step 2 of the flush cycle: close the block if due, else flush a segment."""
        archive = self._archive
        if archive is None:
            return
        if archive.block_offset is not None and (
                self._close_every_flush or archive.wants_close or self._block_stale(now)):
            self._close_block()
            return
        try:
            written = archive.flush_segment()
            if written is not None:
                self._record(written)
            self._rows_written = len(self._body_rows)
        except LedgerError as e:
            self._retire(f"appending a segment failed ({e.detail})")
            return
        except BaseException:
            self._interrupted(archive)
            raise

    def _record(self, written: SegmentWritten) -> None:
        """A segment is on disk: it needs a sync, then its block row joins the next commit."""
        self._unsynced = True
        self._segments.append(written)
        self._last_recorded = written

    def _interrupted(self, archive: BodyArchiveWriter) -> None:
        """An exception (KeyboardInterrupt, SIGTERM's, any) escaped a segment cut.

        If the record was completed before it struck, record it as the cut would have (its
        rows are whole); otherwise the archive poisoned itself and the rows of the lost
        segment stay beyond ``_rows_written``, where ``_retire`` drops them. Either way no
        further segment is cut by this writer.
        """
        last = archive.last_written
        if last is not None and last is not self._last_recorded:
            self._record(last)
            self._rows_written = len(self._body_rows)
        archive.poison()

    def _retire(self, reason: str) -> None:
        """Take the archive out of service, keeping only rows whose bytes are whole and synced."""
        archive = self._archive
        assert archive is not None
        self._join_job()  # a background flush may be syncing this file
        # Judge by what this writer recorded, not by the archive's counters: after an
        # interrupt the two can differ, and only recorded segments get a block row.
        open_block = archive.block_offset
        if open_block is None:
            open_block = self._staging_block
        last = self._last_recorded
        safe_raw = last.raw_len if last is not None and last.block_offset == open_block else 0
        held = len(self._body_rows)
        kept = self._body_rows[:self._rows_written]
        kept.extend(r for r in self._body_rows[self._rows_written:]
                    if r[_ROW_BLOCK] != open_block or r[_ROW_OFFSET] + r[_ROW_LEN] <= safe_raw)
        if self._unsynced:
            try:
                archive.sync()
                self._unsynced = False
            except LedgerError:
                kept = []
                self._segments.clear()
                self._unsynced = False
        self.bodies_dropped += held - len(kept)
        self._buffered -= held - len(kept)
        self._body_rows[:] = kept  # in place: a staging loop may hold the list
        self._rows_written = len(kept)
        archive.abandon()
        archive.close()
        self._archive = None
        self._block_spans.clear()
        self._block_opened_at = None
        self._out_of_service(f"{reason}; this writer stores no more bodies")

    # --- flush --------------------------------------------------------------------------

    def flush(self) -> None:
        """One flush cycle: bytes on disk and synced, then one transaction for every row.

        Waits for a background flush in progress first. If the transaction fails, nothing is
        forgotten: the same segments and rows are retried by the next flush (the block upsert
        is monotone, so the grown extent lands once). Rows that the schema's constraints
        refuse are dropped, the others committed, and RowRejected says which.
        """
        if self._closed:
            raise LedgerError("the ledger writer is closed", self._db_path)
        self._reap()
        job = self._take_work()
        if job is not None:
            self._run(job)
            self._finish(job)

    def wait(self) -> None:
        """Wait until a background flush (started by a full buffer) has committed.

        Raises what that flush raised; rows it could not commit are back in the buffers.
        """
        if self._closed:
            raise LedgerError("the ledger writer is closed", self._db_path)
        self._reap()

    @property
    def committing(self) -> bool:
        """A background flush is running."""
        return self._job is not None

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
        floor = fmt.MIN_ARCHIVE_DEDUP_BYTES
        inflight = self._inflight
        add = self._committed.add_hash_text
        for r in job.body_rows:
            if r[_ROW_LEN] >= floor:
                add(r[8])
                inflight.setdefault(r[8], (r[_ROW_BLOCK], r[_ROW_OFFSET], r[_ROW_LEN]))
        job.thread = threading.Thread(target=self._run, args=(job,), name="capsem-ledger-flush", daemon=True)
        job.thread.start()

    def _take_work(self) -> _Job | None:
        """Cut the segment (step 2 of the cycle) and move everything buffered into a job."""
        now = self._clock()
        self._cut_segment(now)
        if not (self._segments or self._body_rows or self._batches):
            return None
        job = _Job(self._segments, self._body_rows, self._batches, self._buffered, self._unsynced, self._stamp(now))
        try:
            self._segments = []
            self._body_rows = []
            self._rows_written = 0
            self._batches = []
            for spec in self._specs.values():
                spec.batch = None
            self._buffered = 0
            self._buffered_bytes = 0
            self._unsynced = False
        except BaseException:
            # Interrupted half way: put everything back, as if the job was never taken.
            self._unsynced = job.unsynced
            self._segments, self._body_rows, self._rows_written = job.segments, job.body_rows, job.body_count
            self._batches, self._buffered = job.batches, job.buffered
            raise
        return job

    def _run(self, job: _Job) -> None:
        """Sync the archive, then commit the job's rows in one transaction (any thread)."""
        if job.claim.acquire(blocking=False):
            self._run_claimed(job)
        # else the owner ran it already: this worker started too late

    def _run_claimed(self, job: _Job) -> None:
        try:
            self._sync_and_commit(job)
        finally:
            job.done.set()

    def _sync_and_commit(self, job: _Job) -> None:
        try:
            # Segments always mean a sync, whatever the flag says: rows never name bytes that
            # no returned fdatasync covers.
            if (job.unsynced or job.segments) and self._archive is not None:
                try:
                    self._archive.sync()
                except LedgerError as e:
                    # Rows must never name bytes that may not be on disk: commit the ledger
                    # rows without them.
                    job.sync_error = e
                    job.segments = []
                    job.body_rows = []
            try:
                job.rejected = self._commit(job, salvage=False)
            except _REJECTIONS:
                job.rejected = self._commit(job, salvage=True)
        except BaseException as e:  # noqa: BLE001 - handed to the owning thread by _finish
            job.error = e

    def _join_job(self) -> None:
        job = self._job
        if job is None:
            return
        if job.claim.acquire(blocking=False):
            # Its worker never started: run the job here, once.
            self._run_claimed(job)
            return
        while not job.done.wait(0.05):
            thread = job.thread
            if thread is None or thread.ident is None or not thread.is_alive():
                # Claimed here, but interrupted before it ran (the claim is taken outside
                # the try that sets ``done``): it never ran, so it goes back to the buffers.
                if job.error is None and not job.committed:
                    job.error = LedgerError("a flush was interrupted before it ran; its rows are kept for the "
                                            "next flush", self._db_path)
                job.done.set()

    def _reap(self) -> None:
        """Wait for the background flush, if any, and take its outcome."""
        job = self._job
        if job is not None:
            self._join_job()
            self._finish(job)

    def _finish(self, job: _Job) -> None:
        self._job = None
        self._inflight.clear()
        if job.sync_error is not None:
            self.bodies_dropped += job.body_count
            if self._archive is not None:
                self._retire(f"fdatasync failed ({job.sync_error.detail})")
        if job.error is not None and not job.committed:
            self._restore(job)
            if isinstance(job.error, sqlite3.Error):
                raise LedgerError(f"flush did not commit ({job.error}); its rows and bodies are kept and retried by "
                                  "the next flush", self._db_path) from job.error
            raise job.error
        rejected = job.rejected
        refused_bodies = sum(1 for table, _ in rejected if table == "event_body_blobs")
        refused_rows = len(rejected) - refused_bodies
        self.bodies_dropped += refused_bodies
        self.rows_rejected += refused_rows
        self.bodies_committed += len(job.body_rows) - refused_bodies
        self.rows_committed += job.buffered - job.body_count - refused_rows
        self.flushes += 1
        add = self._committed.add_hash_text
        floor = fmt.MIN_ARCHIVE_DEDUP_BYTES
        for r in job.body_rows:
            if r[_ROW_LEN] >= floor:
                add(r[8])
        if job.error is not None:
            raise job.error  # it struck after COMMIT: the rows are counted as committed
        if rejected:
            table, why = rejected[0]
            raise fmt.RowRejected(f"session.db refused {len(rejected)} rows, which were dropped (the others were "
                                  f"committed); first: a {table} row: {why}", self._db_path)

    def _restore(self, job: _Job) -> None:
        """Put a job that did not commit back in front of the buffers, for the next flush."""
        self._unsynced = self._unsynced or bool(job.segments)  # first: never rows without a sync
        self._segments[:0] = job.segments
        self._body_rows[:0] = job.body_rows
        self._rows_written += len(job.body_rows)
        self._batches[:0] = job.batches
        self._buffered += job.buffered - (job.body_count - len(job.body_rows))

    def _commit(self, job: _Job, salvage: bool) -> list[tuple[str, str]]:
        conn = self._conn
        assert conn is not None
        rejected: list[tuple[str, str]] = []
        committing = False
        try:
            conn.execute("BEGIN")
            # Blocks before the body rows that reference them, body rows before ledger rows.
            if job.segments:
                conn.executemany(_UPSERT_BLOCK, [(s.block_offset, s.raw_len, s.disk_len, job.stamp)
                                                 for s in job.segments])
            if not salvage:
                if job.body_rows:
                    # Every CHECK of event_body_blobs holds by construction (insert validated
                    # event_id, event_type, table and direction; the writer derived the rest),
                    # and SQLite re-evaluating its IN-lists costs more than the indexes do.
                    conn.execute("PRAGMA ignore_check_constraints = ON")
                    try:
                        _insert_rows(conn, _BODY_INSERT_HEAD, _BODY_COLUMNS, job.body_rows,
                                     self._rows_per_statement(_BODY_COLUMNS))
                    finally:
                        conn.execute("PRAGMA ignore_check_constraints = OFF")
                for batch in job.batches:
                    _insert_rows(conn, batch.head, len(batch.keys), batch.rows,
                                 self._rows_per_statement(len(batch.keys)))
            else:
                for head, width, table, rows in (
                        [(_BODY_INSERT_HEAD, _BODY_COLUMNS, "event_body_blobs", job.body_rows)]
                        + [(b.head, len(b.keys), b.table, b.rows) for b in job.batches]):
                    sql = _values_sql(head, width, 1)
                    for values in rows:
                        conn.execute("SAVEPOINT capsem_row")
                        try:
                            conn.execute(sql, values)
                        except _REJECTIONS as e:
                            conn.execute("ROLLBACK TO capsem_row")
                            rejected.append((table, str(e)))
                        conn.execute("RELEASE capsem_row")
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

    def _rows_per_statement(self, width: int) -> int:
        return max(1, min(_ROWS_PER_STATEMENT, self._max_variables // width))

    # --- close --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the open block, flush, sync, checkpoint the WAL and release the writer lock.

        Idempotent. ``on_close(self)`` runs after everything is released, only on success.
        """
        if self._closed:
            return
        error: BaseException | None = None
        try:
            if self._archive is not None and self._archive.block_offset is not None:
                self._close_block()
            self.flush()
        except BaseException as e:  # noqa: BLE001 - the files are released before it is re-raised
            error = e
            self.bodies_dropped += len(self._body_rows)
        try:
            self._join_job()  # a background flush must not share the connection with what follows
            if self._archive is not None:
                self._archive.sync()
            if self._conn is not None:
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
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._archive is not None:
            self._archive.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            os.close(fd)

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"LedgerWriter({str(self._directory)!r}, codec={self.codec!r}, closed={self._closed}, "
                f"buffered={self._buffered})")
