"""The writer lock of a ledger: Capsem's flock on ``session.db-writer.lock``, and one more.

Capsem's lock is an ``flock`` on the sidecar file, which the kernel releases when its holder
dies, so the file is never stale. A lock on a file is only as good as the file's name,
though: delete the sidecar under a running writer and the next writer creates a fresh one
and locks that. So the writer first takes an ``flock`` on the ledger directory itself, which
no deletion can release, and checks before each flush that the sidecar's name still leads
to the inode it locked; if it does not, it stops with ``WriterLockLost`` before writing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from capsem_core.errors import LedgerError, SymlinkRefused, WriterBusy, WriterLockLost
from capsem_core.paths import refuse_symlink, require_regular_file, writer_lock_path

__all__ = ["WriterLock", "busy_message", "lock_wait", "require_own_file"]

_RETRY_SECONDS = 0.02
# A lock file replaced between our open and our flock is retried; this many in a row means
# something keeps replacing it, and waiting longer would not help.
_REPLACED_RETRIES = 20


def lock_wait(timeout: object) -> float:
    """``lock_timeout`` as seconds to wait for a closing writer: 0 or more (``inf``: for ever).
    NaN is refused with the rest: every comparison with it is false, so the wait never ended."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"lock_timeout must be a number of seconds, not {type(timeout).__name__}")
    if not timeout >= 0:
        raise ValueError(f"lock_timeout must be 0 or more seconds, not {timeout!r}")
    return float(timeout)


def require_own_file(path: Path, what: str) -> None:
    """The reader's rule for a ledger file the writer opens: a regular file reached without a
    link (SymlinkRefused, LedgerError), or absent, for the writer to create."""
    try:
        require_regular_file(path, what)
    except SymlinkRefused:
        raise
    except LedgerError:
        if os.path.lexists(path):
            raise


def _open_directory(directory: Path) -> int:
    refuse_symlink(directory, "session directory")
    try:
        # O_NOFOLLOW: a link swapped in after the lstat above is refused here, not followed.
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SymlinkRefused("refusing a session directory that is a symbolic link", directory) from None
        raise LedgerError(f"io: cannot open the ledger directory: {e.strerror or e}", directory) from e


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class WriterLock:
    """Both locks of one writer, held from ``take`` until ``release``."""

    __slots__ = ("path", "_db_path", "_dir_fd", "_fd", "_inode", "lost")

    def __init__(self, db_path: Path, dir_fd: int, fd: int) -> None:
        self.path = writer_lock_path(db_path)
        self._db_path = db_path
        self._dir_fd = dir_fd
        self._fd = fd
        st = os.fstat(fd)
        self._inode = (st.st_dev, st.st_ino)
        self.lost: str | None = None  # how the lock was lost; once lost, every later check refuses

    @classmethod
    def take(cls, db_path: Path, timeout: float) -> WriterLock:
        """Both locks, waiting up to ``timeout`` seconds for a closing writer; WriterBusy after that."""
        directory = db_path.parent
        dir_fd = _open_directory(directory)
        try:
            return cls._take(db_path, dir_fd, time.monotonic() + timeout)
        except BaseException:
            os.close(dir_fd)
            raise

    @classmethod
    def _take(cls, db_path: Path, dir_fd: int, deadline: float) -> WriterLock:
        while True:
            # The directory first: a writer refused there never touches the lock file.
            if _try_flock(dir_fd):
                fd = _lock_file(dir_fd, db_path)
                if fd is not None:
                    return cls(db_path, dir_fd, fd)
                fcntl.flock(dir_fd, fcntl.LOCK_UN)  # Capsem itself writes, holding only the file
            if time.monotonic() >= deadline:
                raise WriterBusy(busy_message(db_path), db_path)
            # A closing writer may still be finishing: give it a moment before refusing.
            time.sleep(_RETRY_SECONDS)

    def check(self) -> None:
        """WriterLockLost unless the lock file's name still leads to the inode this writer locked."""
        if self.lost is None:
            try:
                st = os.stat(self.path.name, dir_fd=self._dir_fd, follow_symlinks=False)
                if (st.st_dev, st.st_ino) != self._inode:
                    self.lost = "replaced by another file"
            except FileNotFoundError:
                self.lost = "deleted"
            except OSError as e:
                self.lost = f"made unreadable ({e.strerror or e})"
            if self.lost is None:
                return
        raise WriterLockLost(
            f"{self.path.name} was {self.lost} while this writer held it, so another writer may now hold the "
            "ledger; this writer stops before writing another byte. The lock file is never stale (the kernel "
            "releases a crashed writer's lock): never delete it", self._db_path)

    def release(self) -> None:
        for fd in (self._fd, self._dir_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._dir_fd = -1

    def __del__(self) -> None:
        # A writer dropped without close(): its locks go with it, not with the process (the
        # ledger could not be written again until the process ended).
        try:
            self.release()
        except Exception:   # noqa: BLE001 - late in the interpreter's teardown, os may be gone
            pass


def _lock_file(dir_fd: int, db_path: Path) -> int | None:
    """Capsem's lock: the flocked descriptor of the lock file, or None while another holds it."""
    lock_path = writer_lock_path(db_path)
    for _ in range(_REPLACED_RETRIES):
        require_own_file(lock_path, lock_path.name)
        try:
            fd = os.open(lock_path.name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        except OSError as e:
            raise LedgerError(f"io: cannot open the writer lock: {e.strerror or e}", lock_path) from e
        held = False
        try:
            if not _try_flock(fd):
                return None
            # Deleted or replaced between our open and our flock: lock what the name is now.
            held = _same_inode(dir_fd, lock_path.name, fd)
            if held:
                return fd
        finally:
            if not held:
                os.close(fd)  # releases its flock, if taken
    raise LedgerError(f"{lock_path.name} was replaced {_REPLACED_RETRIES} times while it was being locked; "
                      "something other than a writer is removing it", db_path)


def _same_inode(dir_fd: int, name: str, fd: int) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def busy_message(db_path: Path) -> str:
    return (f"ledger {db_path.parent} already has a writer, in this process or another; a ledger has exactly one "
            "writer, because its body archive cannot survive two appenders. A crashed writer's lock is released "
            f"by the kernel, so {writer_lock_path(db_path).name} is never stale: do not delete it")
