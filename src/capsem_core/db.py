"""SQLite connection policy: the one way this package opens session.db and main.db.

This module owns every decision about how a SQLite file is opened:

* ``BUSY_TIMEOUT_S``, the one busy timeout for every connection (Python and native);
* ``read_plan``, which picks the read-only URI for a file from what its directory allows;
* ``connect_readonly``, the one read-only connection (query_only, busy timeout, never
  creates the database file);
* ``connect_readwrite``, the one read-write connection (with or without creating the file).

A read-only connection's page reads skip the kernel's access-time update where the system
allows it (Linux's ``O_NOATIME``, set on the descriptor SQLite opened, for the file's owner or
a process that may change it): each read(2) saves its access-time test, 2-3% of a check of a
large ledger, and leaves the access time as it was (only the header read SQLite makes while
opening the file, before the flag can be set, may still update it).

Reading never needs write access. A WAL-mode database normally needs a ``-shm`` file beside
it, which SQLite creates on first read; on read-only media, or in a directory the reader
cannot write, it cannot, and a plain ``mode=ro`` open fails ("unable to open database file",
"attempt to write a readonly database"). ``read_plan`` then chooses, in this order:

1. the directory is writable: ``mode=ro``, SQLite's ordinary shared-memory reader (it may
   create ``-wal``/``-shm`` there, as any SQLite reader of a WAL database does);
2. a ``-wal`` and a readable ``-shm`` exist: ``mode=ro``; SQLite (3.22 and later) reads the
   WAL through the read-only ``-shm`` (a heap copy), so every commit is seen, and a writer
   still running there (its ``-shm`` is the sign) is followed under SQLite's locks;
3. a rollback-journal database with no ``-wal``: ``mode=ro`` with ordinary file locks (locks
   are not writes; they work on read-only mounts too, and keep a live writer's changes
   consistent);
4. otherwise (a WAL-mode file with no usable ``-shm``): ``mode=ro&immutable=1``. SQLite then
   takes no locks and reads the main file alone. That is exact when nothing can change the
   file: read-only media, or a directory no one may write (a live WAL writer always keeps a
   ``-wal`` open beside the database, so with no committed ``-wal`` the file is at rest; only
   a writer *starting* during the read, which needs write access to the directory, could
   change it). When the ``-wal`` holds committed transactions that SQLite cannot replay
   (no ``-shm`` and none can be created), the plan says so in ``unread_wal``: callers must
   report it (``check`` makes it a finding; ``Ledger`` refuses), never return counts that
   silently miss those commits.

"Cannot write" is ``os.access(dir, W_OK | X_OK)`` *and* ``os.statvfs(dir).f_flag & ST_RDONLY``:
access() answers for permission bits (root passes them), statvfs for a read-only mount,
where even root cannot create a file.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import struct
from typing import Literal, NamedTuple

from capsem_core.errors import LedgerError
from capsem_core.paths import NotRegularFile, open_regular

# One busy timeout for every SQLite file (session.db and main.db, readers and the writer,
# Python and the native scan). A reader of a WAL database waits only while a writer runs
# WAL recovery or restarts the log, and a writer waits for another writer's commit; a
# writer's largest flush commits in well under a second, so 5 s outlasts any healthy holder
# several times over, while a lock that is truly stuck (another process holding an
# exclusive transaction) is still reported within seconds rather than hanging the command.
BUSY_TIMEOUT_S = 5.0

_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER = 32
_WAL_FRAME_HEADER = 24


def busy_timeout_ms() -> int:
    """The busy timeout in milliseconds, for connections opened through the C API."""
    return int(BUSY_TIMEOUT_S * 1000)


class WalState(NamedTuple):
    """What a ``-wal`` file holds, read from its frame headers (never written)."""

    path: str
    frames: int    # frames of the current WAL generation (salts match the WAL header)
    commits: int   # of those, the frames that end a transaction

    def describe(self, *, named: bool = True) -> str:
        """What the -wal holds, in words; ``named=False`` leaves its path out (for an error that
        names it already)."""
        return (f"{f'{self.path} holds' if named else 'it holds'} {self.commits} committed transaction(s) "
                f"({self.frames} pages) that SQLite cannot replay here: there is no -shm beside it and none can "
                "be created")


class ReadPlan(NamedTuple):
    """How one database file is opened read-only, and why."""

    path: str
    uri: str
    immutable: bool
    reason: str
    unread_wal: WalState | None = None


# Paths stay strings here (os.path, not pathlib): this runs once per native scan, and
# pathlib interns every path component it parses.
# sqlite3's transaction modes: None is autocommit, DEFERRED what BEGIN means by default.
IsolationLevel = Literal["DEFERRED", "EXCLUSIVE", "IMMEDIATE"] | None
PathArg = os.PathLike[str] | str


# What SQLite's URI filename parsing reads as syntax in a path: "%" (an escape), "?" (the
# query) and "#" (the fragment). Every other character of a path is taken as it is.
_URI_ESCAPES = str.maketrans({"%": "%25", "?": "%3F", "#": "%23"})


def _uri(path: str, params: str) -> str:
    return "file:" + os.fsdecode(os.path.abspath(path)).translate(_URI_ESCAPES) + "?" + params


def directory_writable(directory: PathArg) -> bool:
    """True when this process can create a file in ``directory`` (sidecars such as -shm)."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def wal_state(wal_path: PathArg) -> WalState | None:
    """Frames and commits of the current generation of ``wal_path``; None when it is absent.

    Frames are counted while their salts match the WAL header (an older generation's frames
    after a log restart do not); checksums are not verified, so ``commits`` is an upper bound
    on what SQLite would replay, the safe side for saying a WAL was not read.
    """
    wal_path = os.fspath(wal_path)
    try:
        fd, st = open_regular(wal_path, follow=True)   # as SQLite opens it: through a link
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise LedgerError("not a regular file: a -wal beside a database must be one", wal_path) from None
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", wal_path) from None
    try:
        with os.fdopen(fd, "rb") as f:
            size = st.st_size
            header = f.read(_WAL_HEADER)
            if len(header) < _WAL_HEADER:
                return WalState(wal_path, 0, 0)
            magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">6I", header[:24])
            if magic not in _WAL_MAGIC or page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
                return WalState(wal_path, 0, 0)
            frames = commits = 0
            while True:
                fh = f.read(_WAL_FRAME_HEADER)
                if len(fh) < _WAL_FRAME_HEADER:
                    break
                _pgno, db_size, s1, s2 = struct.unpack(">4I", fh[:16])
                if (s1, s2) != (salt1, salt2):
                    break
                # Step over the page without reading it: only frame headers are counted.
                if f.tell() + page_size > size:
                    break
                f.seek(page_size, os.SEEK_CUR)
                frames += 1
                if db_size:
                    commits += 1
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", wal_path) from None
    return WalState(wal_path, frames, commits)


def _wal_mode_header(path: str) -> bool:
    """True when the database header says WAL (file format read/write versions 2)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and (head[18] == 2 or head[19] == 2)


def read_plan(path: PathArg) -> ReadPlan:
    """The read-only URI for ``path`` (see the module docstring for the order of choices)."""
    path = os.fspath(path)
    wal_path, shm_path = path + "-wal", path + "-shm"
    if directory_writable(os.path.dirname(os.path.abspath(path))):
        return ReadPlan(path, _uri(path, "mode=ro"), False, "the directory is writable")
    wal = wal_state(wal_path)
    if wal is not None and os.path.isfile(shm_path) and os.access(shm_path, os.R_OK):
        # Also with an empty -wal: its writer may be live, and this reader follows its
        # commits and checkpoints under SQLite's locks, where immutable=1 would not.
        return ReadPlan(path, _uri(path, "mode=ro"), False,
                        "read-only directory; the -wal is read through the existing -shm, read-only")
    if wal is not None and wal.commits:
        return ReadPlan(path, _uri(path, "mode=ro&immutable=1"), True,
                        "read-only directory; the -wal cannot be replayed", unread_wal=wal)
    if wal is None and not _wal_mode_header(path):
        return ReadPlan(path, _uri(path, "mode=ro"), False, "read-only directory; a rollback-journal database")
    return ReadPlan(path, _uri(path, "mode=ro&immutable=1"), True,
                    "read-only directory and no committed -wal: the database file is at rest")


def main_file_is_snapshot(path: PathArg, plan: ReadPlan | None = None) -> bool:
    """Whether a read transaction that has read from ``path`` reads the database file alone, so
    a reader of the file's own bytes (a native page scan) sees the transaction's snapshot: the
    plan opens it immutable, or there is no ``-wal`` beside it or an empty (0-byte) one. The
    file then cannot change while the transaction lasts (a WAL checkpoint waits for the readers
    of the file alone; a rollback-journal writer for every shared lock)."""
    if plan is not None and plan.immutable:
        return True
    try:
        return os.stat(f"{os.fsdecode(os.fspath(path))}-wal").st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


def unread_wal_error(plan: ReadPlan) -> LedgerError:
    """The one-line refusal for a plan whose -wal holds commits it cannot read."""
    assert plan.unread_wal is not None
    return LedgerError(f"{plan.unread_wal.describe(named=False)}; reading {os.path.basename(plan.path)} alone would miss "
                       "them (copy the database with its -wal to writable storage to read it)",
                       plan.unread_wal.path)


def complete_plan(path: PathArg) -> ReadPlan:
    """``read_plan``, refused (LedgerError naming the -wal) when it would miss committed rows."""
    plan = read_plan(path)
    if plan.unread_wal is not None:
        raise unread_wal_error(plan)
    return plan


# The files SQLite opens beside a database: a rollback journal it looks into when one is
# there (a hot journal), the WAL and its shared-memory index.
_SIDECARS = ("-journal", "-wal", "-shm")


def refuse_irregular_sidecars(path: PathArg) -> None:
    """LedgerError naming the file when a sidecar of ``path`` exists and is not a regular file.

    SQLite opens a ``-journal`` it finds without O_NONBLOCK, and retries the open when a
    signal interrupts it: a FIFO there waits for a writer for ever, SIGTERM included. A
    device or FIFO as ``-wal`` reads as an empty log, so rows the real one held are silently
    missed. A link is followed (as SQLite would, where it follows one); a dangling one is
    as absent to SQLite as to this test."""
    path = os.fspath(path)
    for suffix in _SIDECARS:
        sidecar = path + suffix
        try:
            st = os.stat(sidecar)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise LedgerError(f"cannot stat: {exc.strerror}", sidecar) from None
        if not stat.S_ISREG(st.st_mode):
            raise LedgerError(f"not a regular file: a {suffix} beside a database must be one", sidecar)


def connect_readonly(path: PathArg, *, plan: ReadPlan | None = None, allow_unread_wal: bool = False,
                     isolation_level: IsolationLevel = "DEFERRED", check_same_thread: bool = False) -> sqlite3.Connection:
    """The one read-only connection: never creates or alters the file, query_only on.

    Raises LedgerError naming the file when SQLite cannot open it, naming a -journal, -wal
    or -shm beside it that is not a regular file, and naming the -wal when
    the plan cannot read committed rows in it, unless ``allow_unread_wal`` (a caller that
    reports the unread WAL itself, as ``check`` does).
    """
    path = os.fspath(path)
    refuse_irregular_sidecars(path)
    plan = plan or read_plan(path)
    if plan.unread_wal is not None and not allow_unread_wal:
        raise unread_wal_error(plan)
    target = _file_of(path)
    before = _descriptors_on(target) if target is not None else None
    try:
        conn = sqlite3.connect(plan.uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=isolation_level,
                               check_same_thread=check_same_thread)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot open: {exc}", path) from None
    if target is not None and before is not None:
        _no_access_time(target, before)   # before the first read
    try:
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise LedgerError(f"cannot open as SQLite: {exc}", path) from None
    return conn


# Linux's flag for reads that leave the access time alone (None elsewhere).
_NOATIME: int | None = getattr(os, "O_NOATIME", None)
_FD_DIR = "/proc/self/fd"


def _file_of(path: str) -> os.stat_result | None:
    """``path``'s file, where the system lists a process's descriptors and has O_NOATIME."""
    if _NOATIME is None:
        return None
    try:
        return os.stat(path)
    except OSError:
        return None


def _descriptors_on(target: os.stat_result) -> set[int] | None:
    """The descriptors this process holds on ``target``'s file (None when they cannot be
    listed). Found by what each one holds, not by number alone: listing the directory takes
    a descriptor of its own for the while."""
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return None
    held = set()
    for name in names:
        try:
            st = os.fstat(int(name))
        except (OSError, ValueError):
            continue
        if st.st_ino == target.st_ino and st.st_dev == target.st_dev:
            held.add(int(name))
    return held


def _no_access_time(target: os.stat_result, before: set[int]) -> None:
    """O_NOATIME on each descriptor on ``target``'s file opened since ``before``: the ones
    SQLite just opened (it opens the file itself and lends no descriptor). Refused (not the
    file's owner) or gone (another thread closed it): left as it is."""
    import fcntl   # only where there is O_NOATIME: not a cost of every start

    assert _NOATIME is not None
    for fd in (_descriptors_on(target) or set()) - before:
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | _NOATIME)
        except OSError:
            pass


def exact_text(raw: bytes) -> str:
    """A TEXT value as a str that never fails to decode: SQLite keeps whatever bytes were
    written (a hostile hand can write bytes that are not UTF-8, which SQLite's checks call
    sound); those stay as surrogates (surrogateescape), so the value round-trips to the same
    bytes, and terminals escape what they show."""
    return raw.decode("utf-8", "surrogateescape")


def connect_memory() -> sqlite3.Connection:
    """A private in-memory database (scratch work such as reading DDL back)."""
    return sqlite3.connect(":memory:")


def connect_readwrite(path: PathArg, *, create: bool = False, isolation_level: IsolationLevel = None,
                      check_same_thread: bool = True) -> sqlite3.Connection:
    """The one read-write connection (``create``: make the file when it is missing).

    sqlite3.Error propagates: callers word their own failures (opening for writing fails
    for reasons a reader never meets). LedgerError names a -journal, -wal or -shm beside it
    that is not a regular file, as for a reader: a writer waits on a FIFO just the same.
    """
    refuse_irregular_sidecars(path)
    uri = _uri(os.fspath(path), "mode=rwc" if create else "mode=rw")
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=isolation_level,
                           check_same_thread=check_same_thread)


__all__ = ["BUSY_TIMEOUT_S", "ReadPlan", "WalState", "busy_timeout_ms", "complete_plan", "connect_memory", "connect_readonly", "connect_readwrite", "main_file_is_snapshot",
           "directory_writable", "read_plan", "unread_wal_error", "wal_state"]
