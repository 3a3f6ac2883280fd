"""Ledger paths: the names of the pair and the one policy for what a ledger file may be.

A ledger is ``session.db`` plus ``session.bodies`` in one session directory. Every module
that reaches a ledger file goes through here, so the rule is the same everywhere: a ledger
file is a regular file reached without a symbolic link (a link could point a reader, or
worse a writer, at a file outside the session), and a missing half is named as such.
Checks use ``lstat`` and open nothing, so a refusal leaves the disk as it was.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from capsem_core.errors import LedgerError, SymlinkRefused

SESSION_DB = "session.db"
SESSION_BODIES = "session.bodies"
WRITER_LOCK_SUFFIX = "-writer.lock"

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


# --- files written out of a ledger (export, body -o) -------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def safe_component(value: str | None, limit: int) -> str:
    """A ledger string as part of a file name: runs of anything but ASCII letters, digits,
    ``_`` and ``-`` become one ``_`` (no dot, slash, NUL or control character survives, so
    no name is hidden, relative or a traversal), cut to ``limit`` characters; "_" for
    empty or None."""
    return _UNSAFE.sub("_", value or "")[:limit] or "_"


def export_name(event_id: str | None, source_table: str | None, direction: str | None, digest_hex: str) -> str:
    """The file name an exported body takes: ``{event_id}.{table}.{direction}.{hash}`` with
    each ledger string made safe (``safe_component``) and the body's full BLAKE3 hex last,
    so two names that sanitize alike only collide when their bytes are the same too. At most
    64 + 40 + 24 + 64 + 3 characters, under every file system's 255."""
    if not re.fullmatch(r"[0-9a-f]{64}", digest_hex):
        raise ValueError("a body's digest is 64 lower-case hex digits")
    return ".".join((safe_component(event_id, 64), safe_component(source_table, 40),
                     safe_component(direction, 24), digest_hex))


def open_output_dir(path: PathArg) -> int:
    """A descriptor of the directory ``path`` (created if missing), opened without following
    a symbolic link, so every file written through it (``write_file_at``) lands inside it.
    SymlinkRefused for a link, LedgerError for something that is not a directory."""
    refuse_symlink(path, "output directory")
    try:
        os.makedirs(path, exist_ok=True)
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except NotADirectoryError:
        raise LedgerError("the output path is not a directory", path) from None
    except OSError as exc:
        raise LedgerError(f"cannot open the output directory: {exc.strerror}", path) from None


def regular_size_at(dir_fd: int, name: str) -> int | None:
    """The size of the regular file ``name`` in the directory ``dir_fd`` (a link is not
    followed), else None."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


PART_SUFFIX = ".part-"


def remove_stale_parts(dir_fd: int) -> int:
    """Remove the temporary files ``write_file_at`` leaves only when its process was killed
    outright (``.{name}.part-{pid}``, regular files): a rerun starts clean. Returns how many."""
    removed = 0
    for entry in os.listdir(dir_fd):
        if entry.startswith(".") and PART_SUFFIX in entry and entry.rsplit(PART_SUFFIX, 1)[1].isdigit():
            if regular_size_at(dir_fd, entry) is not None:
                os.unlink(entry, dir_fd=dir_fd)
                removed += 1
    return removed


def write_file_at(dir_fd: int, name: str, data: bytes | memoryview) -> None:
    """Write ``name`` in the directory ``dir_fd`` whole or not at all: into a fresh temporary
    file (O_EXCL, O_NOFOLLOW), renamed over ``name`` once written (a link at ``name`` is
    replaced, never followed). An interrupt leaves no partial file under ``name``."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    tmp = f".{name}{PART_SUFFIX}{os.getpid()}"
    fd = -1
    try:
        # Inside the try: an interrupt landing just after the open still removes the file.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
        fd = -1
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


__all__ = ["SESSION_BODIES", "SESSION_DB", "WRITER_LOCK_SUFFIX", "archive_path_for", "export_name", "is_real_dir",
           "is_regular_file", "ledger_paths", "open_output_dir", "pair_on_disk", "refuse_symlink",
           "regular_size_at", "remove_stale_parts", "require_regular_file", "safe_component", "write_file_at", "writer_lock_path"]
