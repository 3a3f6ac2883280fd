"""Ledger paths: the names of the pair and the one policy for what a ledger file may be.

A ledger is ``session.db`` plus ``session.bodies`` in one session directory. Every module
that reaches a ledger file goes through here, so the rule is the same everywhere: a ledger
file is a regular file reached without a symbolic link (a link could point a reader, or
worse a writer, at a file outside the session), and a missing half is named as such.
Checks use ``lstat`` and open nothing, so a refusal leaves the disk as it was. A small file
read beside a ledger (a -wal's header, a verification record, the VM names) is opened by
``open_regular``: never blocking on a FIFO, never through a link, its type read from the open
descriptor. What a command writes out of a ledger follows ``capsem_core.outputs``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from capsem_core.errors import LedgerError, SymlinkRefused

SESSION_DB = "session.db"
SESSION_BODIES = "session.bodies"
WRITER_LOCK_SUFFIX = "-writer.lock"
# capsem-core's own file beside a home's main.db (sessions/vmnames.py), and its lock's suffix.
VM_NAMES_FILE = "capsem-core-vm-names.json"
# How an error names standard output when it is the file at fault.
STDOUT_NAME = "standard output"
VM_NAMES_LOCK_SUFFIX = ".lock"

PathArg = os.PathLike[str] | str


def archive_path_for(db_path: PathArg) -> Path:
    """``session.bodies`` beside ``session.db`` (the database path with suffix .bodies)."""
    return Path(db_path).with_suffix(".bodies")


def writer_lock_path(db_path: PathArg) -> Path:
    """The writer lock sidecar of a ledger (Capsem's name: the db path + ``-writer.lock``)."""
    return Path(os.fspath(db_path) + WRITER_LOCK_SUFFIX)


def ledger_paths(path: PathArg) -> tuple[Path, Path]:
    """(session.db, session.bodies) for a ledger directory or a session.db path."""
    p = Path(path)
    db_path = p / SESSION_DB if is_real_dir(p) else p
    return db_path, archive_path_for(db_path)


def is_real_dir(path: PathArg) -> bool:
    """A directory that is not a symbolic link."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_regular_file(path: PathArg) -> bool:
    """A regular file that is not a symbolic link."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def pair_on_disk(directory: PathArg) -> bool:
    """session.db and session.bodies are regular files in a directory that is not a link."""
    # On strings, not pathlib: ``list`` runs this per row, and building Paths costs more
    # than the three lstats.
    d = os.fspath(directory)
    return (is_real_dir(d) and is_regular_file(os.path.join(d, SESSION_DB))
            and is_regular_file(os.path.join(d, SESSION_BODIES)))


def refuse_symlink(path: PathArg, what: str, *, message: str | None = None) -> None:
    """SymlinkRefused when ``path`` is a symbolic link; a missing or unreadable path passes
    (the open that follows names that problem). ``message`` replaces the default "refusing a
    <what> that is a symbolic link" where the refusal must say whose path it is."""
    try:
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return
    if link:
        raise SymlinkRefused(message or f"refusing a {what} that is a symbolic link", path)


class NotRegularFile(OSError):
    """A path that opened but is not a regular file (a FIFO, a device, a directory)."""


def open_regular(path: PathArg, *, follow: bool = False) -> tuple[int, os.stat_result]:
    """``path`` opened read-only as a regular file: (its descriptor, the caller's to close;
    its fstat). The open never blocks (O_NONBLOCK: a FIFO put where the file belongs would
    wait for a writer) and, unless ``follow``, never goes through a symbolic link (OSError
    ELOOP); the type is read from the descriptor, so the file cannot be swapped after the
    check. FileNotFoundError and other OSErrors as the open raises them; NotRegularFile (the
    descriptor closed) for any other type of file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(0, "not a regular file", os.fspath(path))
    return fd, st


def require_regular_file(path: PathArg, what: str) -> None:
    """LedgerError unless ``path`` is a regular file reached without a link; a missing file
    is named as the missing half of a ledger."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise LedgerError(f"{what} is missing: a ledger is {SESSION_DB} and {SESSION_BODIES} together",
                          path) from None
    except OSError as exc:
        raise LedgerError(f"cannot stat {what}: {exc.strerror}", path) from None
    if stat.S_ISLNK(st.st_mode):
        raise SymlinkRefused(f"{what} is a symlink; a ledger file must be a regular file", path)
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError(f"{what} is not a regular file", path)


__all__ = ["SESSION_BODIES", "SESSION_DB", "WRITER_LOCK_SUFFIX", "NotRegularFile", "archive_path_for", "is_real_dir",
           "is_regular_file", "ledger_paths", "open_regular", "pair_on_disk", "refuse_symlink", "require_regular_file",
           "writer_lock_path"]
