"""The ledger pair as one unit on disk: a consistent copy of both files, and deleting both
with their sidecars (``Ledger.copy_to`` / ``fork`` / ``delete`` are built on these)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import BinaryIO

from capsem_core import db
from capsem_core.errors import LedgerError, WriterBusy
from capsem_core.format import FILE_HEADER_BYTES
from capsem_core.outputs import exists_at, file_at, open_output_dir
from capsem_core.paths import SESSION_BODIES, SESSION_DB, WRITER_LOCK_SUFFIX

SIDECAR_SUFFIXES = ("-wal", "-shm", WRITER_LOCK_SUFFIX)
_COPY_CHUNK = 1 << 20
# SQLite's primary codes for a destination that cannot be written: READONLY, CANTOPEN, FULL.
_WRITE_FAILURES = frozenset({8, 13, 14})


def copy_pair(conn: sqlite3.Connection, db_path: Path, bodies_path: Path, destination: Path) -> None:
    """Copy the ledger read through ``conn`` (its session.db at db_path) into ``destination``:
    session.db through SQLite's backup API, checked by quick_check, then session.bodies up to
    the extent that snapshot commits (see ``Ledger.copy_to``). The caller serialises use of
    ``conn``.

    ``destination`` goes through the output-path policy (``outputs.open_output_dir``): its
    name checked, never a link, made when missing but never its parent, and empty. Both files are
    written as temporaries through a descriptor of it and renamed into place, session.bodies
    first and session.db last, so a copy cut short is never read as a ledger; on a failure
    nothing of the copy is left (the directory too, when this call made it)."""
    dest = Path(destination)
    made = not os.path.lexists(dest)
    dir_fd = open_output_dir(dest, create=True)
    tmp_db = f".{SESSION_DB}.copy-{os.getpid()}"
    bodies_placed = done = False
    try:
        for name in (SESSION_DB, SESSION_BODIES):
            if exists_at(dir_fd, name):
                raise LedgerError("refusing to overwrite an existing ledger file", dest / name)
        # Anything else there could be read as part of the copy (a stale -wal is replayed into
        # its session.db), so the directory is new or empty.
        if os.listdir(dir_fd):
            raise LedgerError("the destination directory is not empty: a copy goes into a new or empty "
                              "directory", dest)
        try:
            # SQLite's backup writes to a path: the directory's, held to be the one opened.
            _same_directory(dest, dir_fd)
            out = db.connect_readwrite(dest / tmp_db, create=True, isolation_level="DEFERRED")
            try:
                conn.backup(out)
                out.execute("PRAGMA journal_mode = DELETE")
                problems = [r[0] for r in out.execute("PRAGMA quick_check").fetchall()]
                if problems != ["ok"]:
                    raise LedgerError("copied session.db fails quick_check: " + "; ".join(problems[:5]), db_path)
                (extent,) = out.execute("SELECT COALESCE(MAX(block_offset + disk_len), 0) FROM body_blocks").fetchone()
            finally:
                out.close()
        except sqlite3.DatabaseError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _WRITE_FAILURES:
                raise LedgerError(f"cannot write the copy: {exc}", dest / SESSION_DB) from None
            raise LedgerError(f"copy failed: {exc}", db_path) from None
        _same_directory(dest, dir_fd)
        # session.bodies through the policy's per-file rule (a temporary renamed in whole), then
        # session.db renamed in last: a copy cut short is never read as a ledger.
        with file_at(dir_fd, SESSION_BODIES, dest, mode=0o600, durable=True) as bodies:
            _copy_prefix(bodies_path, bodies, max(int(extent), FILE_HEADER_BYTES))
        bodies_placed = True
        db_fd = os.open(tmp_db, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.fsync(db_fd)
        finally:
            os.close(db_fd)
        os.rename(tmp_db, SESSION_DB, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
        done = True
    finally:
        if not done:
            for name in (tmp_db, *((SESSION_BODIES,) if bodies_placed else ())):
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except OSError:
                    pass
        os.close(dir_fd)
        if made and not done:
            try:
                os.rmdir(dest)   # only when empty: what this call made, nothing else
            except OSError:
                pass


def _same_directory(path: Path, dir_fd: int) -> None:
    """LedgerError unless ``path`` still names the directory ``dir_fd`` holds (not swapped
    for a link or another directory since it was opened)."""
    held = os.fstat(dir_fd)
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        raise LedgerError("the output directory was replaced while the copy was written", path)


def _copy_prefix(src: Path, out: BinaryIO, length: int) -> None:
    """The first ``length`` bytes of ``src`` into ``out``; LedgerError when it holds fewer."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size < length:
            raise LedgerError(f"session.bodies is {size} bytes but its index commits {length}", src)
        remaining = length
        while remaining:
            chunk = os.read(fd, min(_COPY_CHUNK, remaining))
            if not chunk:
                raise LedgerError("session.bodies shrank while it was copied", src)
            out.write(chunk)
            remaining -= len(chunk)
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

    if os.fspath(directory) == "":
        raise LedgerError("the ledger directory is empty (\"\" is not the current directory): name one")
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
