"""The ledger pair as one unit on disk: a consistent copy of both files, and deleting both
with their sidecars (``Ledger.copy_to`` / ``fork`` / ``delete`` are built on these)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from capsem_core import db
from capsem_core.errors import LedgerError, WriterBusy
from capsem_core.format import FILE_HEADER_BYTES
from capsem_core.paths import SESSION_BODIES, SESSION_DB, WRITER_LOCK_SUFFIX

SIDECAR_SUFFIXES = ("-wal", "-shm", WRITER_LOCK_SUFFIX)
_COPY_CHUNK = 1 << 20


def copy_pair(conn: sqlite3.Connection, db_path: Path, bodies_path: Path, destination: Path) -> None:
    """Copy the ledger read through ``conn`` (its session.db at db_path) into ``destination``:
    session.db through SQLite's backup API, checked by quick_check, then session.bodies up to
    the extent that snapshot commits (see ``Ledger.copy_to``). The caller serialises use of
    ``conn``."""
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
            conn.backup(out)
            out.execute("PRAGMA journal_mode = DELETE")
            problems = [r[0] for r in out.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise LedgerError("copied session.db fails quick_check: " + "; ".join(problems[:5]), db_path)
            (extent,) = out.execute("SELECT COALESCE(MAX(block_offset + disk_len), 0) FROM body_blocks").fetchone()
        finally:
            out.close()
        extent = max(int(extent), FILE_HEADER_BYTES)
        _copy_prefix(bodies_path, tmp_bodies, extent)
        _fsync_path(tmp_db)
        os.replace(tmp_db, dest_db)
        os.replace(tmp_bodies, dest_bodies)
        _fsync_path(dest, directory=True)
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"copy failed: {exc}", db_path) from None
    finally:
        for p in (tmp_db, tmp_bodies):
            p.unlink(missing_ok=True)


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
    """Delete session.db, session.bodies and the SQLite / writer sidecars as one unit, holding
    both of a writer's locks (the directory's and Capsem's lock file,
    ``session.db-writer.lock``) while it does: WriterBusy, and nothing deleted, while any writer
    holds either, even one whose lock file was deleted under it."""
    # Imported here: the writer package is not loaded by readers that never delete.
    from capsem_core.writer.lock import WriterLock

    d = Path(directory)
    db_path = d / SESSION_DB
    try:
        lock = WriterLock.take(db_path, 0.0)
    except WriterBusy:
        raise WriterBusy("ledger has a writer; it cannot be deleted while it is written", db_path) from None
    try:
        for p in (d / SESSION_BODIES, db_path, *(Path(str(db_path) + s) for s in SIDECAR_SUFFIXES)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        _fsync_path(d, directory=True)
    finally:
        lock.release()


__all__ = ["SIDECAR_SUFFIXES", "copy_pair", "delete_ledger"]
