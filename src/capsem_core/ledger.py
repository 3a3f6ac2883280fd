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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capsem_core import db, schema
from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.errors import LedgerError, WriterBusy
from capsem_core.format import FILE_HEADER_BYTES
from capsem_core.paths import (
    SESSION_BODIES,
    SESSION_DB,
    WRITER_LOCK_SUFFIX,
    ledger_paths,
    require_regular_file,
)

SIDECAR_SUFFIXES = ("-wal", "-shm", WRITER_LOCK_SUFFIX)
_COPY_CHUNK = 1 << 20


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


class Ledger:
    """A read-only view of one ledger pair (session.db and session.bodies), opened together.

    ``Ledger(path)`` takes the ledger directory or its session.db. Opening checks that both
    files are regular files (SymlinkRefused for a symbolic link, LedgerError naming the file
    for a missing or foreign one), that the schema is this build's (SchemaMismatch) and that
    session.bodies starts with a version-2 archive header (BadFileHeader); it costs a few
    small reads and one memory map, never a scan of the tables or the archive. The ledger
    holds one read-only SQLite connection, one descriptor and one map of session.bodies until
    ``close()`` (or the end of a ``with`` block) releases them; any read after that raises
    LedgerError. Thread-safe: the one archive cursor is used under a lock, so concurrent reads
    of one Ledger take turns; open one Ledger per thread to read in parallel.
    """

    def __init__(self, path: os.PathLike[str] | str):
        self._closed = False
        self.db_path, self.bodies_path = ledger_paths(path)
        self.directory = self.db_path.parent
        require_regular_file(self.db_path, SESSION_DB)
        require_regular_file(self.bodies_path, SESSION_BODIES)
        # A -wal whose commits cannot be read here (read-only media, no -shm) is refused in
        # one line naming it: the main file alone would answer with a stale ledger.
        self._conn = db.connect_readonly(self.db_path)
        try:
            schema.check_schema(self._conn, self.db_path)
            self._ready = schema.ReadyCheck(self._conn, self.db_path)
            self._archive = _archive.ArchiveReader(str(self.bodies_path))
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
            fresh = _archive.ArchiveReader(str(self.bodies_path))
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

        Raises KeyError when the index has no such body; BodyHashMismatch, IntegrityError or
        another ArchiveError (naming the block and, where one is at fault, the segment) when
        the archive does not hold what the index says; LedgerError for a malformed index row
        or a closed ledger. Costs one indexed lookup and inflating the body's block up to the
        body's end (a later body of the same block reuses what is already inflated).
        """
        rows = self._query(
            "SELECT block_offset, body_offset, body_len, body_hash FROM event_body_blobs "
            "WHERE event_id = ? AND source_table = ? AND direction = ?",
            (event_id, source_table, direction))
        if not rows:
            raise KeyError((event_id, source_table, direction))
        block_offset, body_offset, body_len, body_hash = self._checked_row(event_id, *rows[0])
        with self._lock:
            return self._read_span(event_id, block_offset, body_offset, body_len, body_hash)

    def bodies(self, source_table: str | None = None) -> Iterator[BodyRecord]:
        """Every body (of ``source_table`` only, when given) in archive order, verified.

        A generator: it reads the index in batches of 1024 rows and inflates each segment
        once, so memory stays at one block's raw bytes plus one batch, whatever the ledger's
        size. Raises what ``read_body`` raises, at the body concerned (the bodies before it
        have been yielded), and LedgerError when the ledger is closed.
        """
        sql = ("SELECT event_id, source_table, direction, content_type, original_bytes, truncated, "
               "block_offset, body_offset, body_len, body_hash FROM event_body_blobs")
        params: tuple[object, ...] = ()
        if source_table is not None:
            sql += " WHERE source_table = ?"
            params = (source_table,)
        sql += " ORDER BY block_offset, body_offset"
        self._live()
        try:
            cursor = self._conn.execute(sql, params)
            while True:
                batch = cursor.fetchmany(1024)
                if not batch:
                    return
                for (event_id, table, direction, content_type, original, truncated,
                     block_offset, body_offset, body_len, body_hash) in batch:
                    block_offset, body_offset, body_len, body_hash = self._checked_row(
                        event_id, block_offset, body_offset, body_len, body_hash)
                    with self._lock:
                        data = self._read_span(event_id, block_offset, body_offset, body_len, body_hash)
                    yield BodyRecord(event_id, table, direction, content_type, original, bool(truncated), data)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"query failed: {exc}", self.db_path) from None

    def verify(self, *, threads: int = 0,
               progress: Callable[[int, int], None] | None = None) -> tuple[int, list[_verify.BodyFault]]:
        """Every body read back through its segment and body hashes by the native kernel.

        Returns (verified_count, faults): one ``capsem_core.verify.BodyFault`` per body that
        failed, in archive order; damage is a fault, not an exception. A fault names the
        row's id, event_id, source_table and direction, its block offset, body offset and
        length, (where a segment is at fault) the segment offset, a kind and a message. ``threads=0`` uses all cores; ``progress(bytes, bodies)`` is
        called a few times a second. Costs one pass over the index and inflating every
        block once. Raises LedgerError when the index cannot be read or the ledger is closed.
        Runs on the ledger's own connection and archive map (nothing is opened again), so
        other reads of this Ledger wait for it.
        """
        with self._lock:
            self._refresh_archive()
            return _verify.verify_ledger(str(self.db_path), str(self.bodies_path), threads, progress,
                                         conn=self._conn, reader=self._archive)

    def committed_extent(self) -> int:
        """Bytes of session.bodies the index vouches for: the end of the last recorded block.

        One aggregate over body_blocks (one row per block, so cheap); at least the file
        header's 16 bytes. Raises LedgerError when the query fails or the ledger is closed.
        """
        (end,) = self._query("SELECT COALESCE(MAX(block_offset + disk_len), 0) FROM body_blocks")[0]
        return max(int(end), FILE_HEADER_BYTES)

    # -- the pair as one unit -------------------------------------------------------------

    def copy_to(self, destination: os.PathLike[str] | str) -> Ledger:
        """Copy the pair into an empty or new directory and return the copy, opened.

        session.db is copied first through SQLite's backup API (a consistent snapshot even
        while a writer appends) and must pass ``PRAGMA quick_check``; session.bodies is then
        copied up to the extent that snapshot commits, so a torn tail never travels.
        Costs a full copy of both files and one quick_check of the copy. Raises LedgerError
        when a ledger file already exists at the destination, the copy fails quick_check,
        session.bodies is shorter than its index commits, or this ledger is closed.
        """
        self._live()
        dest = Path(destination)
        dest_db, dest_bodies = dest / SESSION_DB, dest / SESSION_BODIES
        dest.mkdir(parents=True, exist_ok=True)
        for p in (dest_db, dest_bodies):
            if os.path.lexists(p):
                raise LedgerError("refusing to overwrite an existing ledger file", p)
        tmp_db = dest / f".{SESSION_DB}.copy-{os.getpid()}"
        tmp_bodies = dest / f".{SESSION_BODIES}.copy-{os.getpid()}"
        try:
            out = db.connect_readwrite(tmp_db, create=True, isolation_level="DEFERRED")
            try:
                with self._lock:
                    self._conn.backup(out)
                out.execute("PRAGMA journal_mode = DELETE")
                problems = [r[0] for r in out.execute("PRAGMA quick_check").fetchall()]
                if problems != ["ok"]:
                    raise LedgerError("copied session.db fails quick_check: " + "; ".join(problems[:5]), self.db_path)
                (extent,) = out.execute("SELECT COALESCE(MAX(block_offset + disk_len), 0) FROM body_blocks").fetchone()
            finally:
                out.close()
            extent = max(int(extent), FILE_HEADER_BYTES)
            _copy_prefix(self.bodies_path, tmp_bodies, extent)
            _fsync_path(tmp_db)
            os.replace(tmp_db, dest_db)
            os.replace(tmp_bodies, dest_bodies)
            _fsync_path(dest, directory=True)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"copy failed: {exc}", self.db_path) from None
        finally:
            for p in (tmp_db, tmp_bodies):
                p.unlink(missing_ok=True)
        return Ledger(dest)

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
        delete_ledger(self.directory)


def _copy_prefix(src: Path, dst: Path, length: int) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(src, flags)
    try:
        size = os.fstat(fd).st_size
        if size < length:
            raise LedgerError(f"session.bodies is {size} bytes but its index commits {length}", src)
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            remaining = length
            while remaining:
                chunk = os.read(fd, min(_COPY_CHUNK, remaining))
                if not chunk:
                    raise LedgerError("session.bodies shrank while it was copied", src)
                os.write(out, chunk)
                remaining -= len(chunk)
            os.fsync(out)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def delete_ledger(directory: os.PathLike[str] | str) -> None:
    """Delete session.db, session.bodies and the SQLite / writer sidecars as one unit."""
    import fcntl

    d = Path(directory)
    db_path = d / SESSION_DB
    lock_path = Path(str(db_path) + "-writer.lock")
    lock_fd = None
    if lock_path.exists():
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise WriterBusy("ledger has a writer; it cannot be deleted while it is written", db_path) from None
    try:
        for p in (d / SESSION_BODIES, db_path, *(Path(str(db_path) + s) for s in SIDECAR_SUFFIXES)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        _fsync_path(d, directory=True)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)


def copy_ledger(source: os.PathLike[str] | str, destination: os.PathLike[str] | str) -> Path:
    """Copy a ledger pair (see ``Ledger.copy_to``); returns the destination directory."""
    with Ledger(source) as ledger:
        ledger.copy_to(destination).close()
    return Path(destination)


__all__ = ["BodyRecord", "Ledger", "copy_ledger", "delete_ledger", "ledger_paths"]
