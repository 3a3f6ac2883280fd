"""Opening a ledger for a check: the links refused, the file's own checks, the connection.

``check`` must name what is wrong with a file it cannot read (missing, a directory, empty,
not SQLite) in one line instead of an odd sqlite3 message, and must refuse a ledger reached
through a symbolic link before anything is opened. The symlink rule is
``capsem_core.paths``'s and the connection ``capsem_core.db``'s (one read plan for every
connection of a check); this module only adds the checks of the file itself.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from capsem_core import db
from capsem_core.errors import LedgerError
from capsem_core.paths import SESSION_BODIES, SESSION_DB, archive_path_for, refuse_symlink

SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_NOTADB = 26  # sqlite3.h: "file is not a database"
READ_MMAP_BYTES = 1 << 31


def refuse_symlinks(db_path: Path, *, archive: bool) -> None:
    """Refuse a ledger reached through a symbolic link, as ``Ledger`` and the sessions
    resolver do: the session directory (the parent as given, not resolved), session.db and,
    with ``archive``, session.bodies. Nothing is opened first, so a refusal leaves the disk
    as it was (no -wal/-shm sidecars beside a link's target)."""
    refuse_symlink(db_path.parent, "session directory")
    refuse_symlink(db_path, SESSION_DB)
    if archive:
        refuse_symlink(archive_path_for(db_path), SESSION_BODIES)


def open_read_only(db_path: Path, plan: db.ReadPlan) -> sqlite3.Connection:
    """A read-only connection to ``db_path`` after making sure it is a readable SQLite file.

    Everything that would otherwise surface as an odd sqlite3 message or a traceback (missing,
    directory, unreadable, empty, foreign file) becomes a LedgerError naming the file; a
    malformed SQLite file is returned, for the page check to report. The
    file is opened once, by SQLite: a stat finds the missing, irregular and empty ones, and
    SQLite's own header check (SQLITE_NOTADB on the first read) the foreign ones.
    """
    try:
        st = os.stat(db_path)
    except FileNotFoundError:
        raise LedgerError("no such file", db_path) from None
    except OSError as exc:
        raise LedgerError(f"cannot stat: {exc.strerror}", db_path) from None
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError("not a regular file", db_path)
    if st.st_size == 0:
        raise LedgerError("empty file, not a session ledger", db_path)
    # check reads what it can and reports an unread -wal itself (check_ledger).
    conn = db.connect_readonly(db_path, plan=plan, allow_unread_wal=True)
    try:
        # The first statement that reads page 1: SQLite checks the header's magic there, so a
        # foreign file is named here without opening it a second time to read its first bytes.
        conn.execute("PRAGMA schema_version").fetchone()
        # Read pages through a memory map (SQLite still bounds-checks every page): quick_check
        # and the scans then skip a copy per page, about a tenth of quick_check's time.
        conn.execute(f"PRAGMA mmap_size = {READ_MMAP_BYTES}")
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "").startswith("SQLITE_CORRUPT"):
            # A file SQLite opens but calls malformed (a header counting pages the file
            # does not hold, a damaged page 1) is checked all the same: the page check
            # reports SQLite's words as damage, where a refusal would say nothing more.
            return conn
        conn.close()
        if _not_a_database(exc):
            raise LedgerError("not a SQLite database (the file does not start with the SQLite header)",
                              db_path) from None
        raise LedgerError(str(exc), db_path) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _not_a_database(exc: sqlite3.DatabaseError) -> bool:
    """SQLITE_NOTADB: the file is not a database (its first 16 bytes are not the magic)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == SQLITE_NOTADB)
    return "file is not a database" in str(exc)


__all__ = ["READ_MMAP_BYTES", "SQLITE_MAGIC", "open_read_only", "refuse_symlinks"]
