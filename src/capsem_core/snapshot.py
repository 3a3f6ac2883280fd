"""One consistent read of a ledger, opened once and carried down.

A ``Snapshot`` is what every layer below ``check_ledger`` and ``Ledger`` works on, instead of
a path and optional handles: the read plan (``db.py``), the read-only connection inside its
read transaction, session.db's pages mapped where the file is that transaction's snapshot
(``pages/tables.py``), the connections of the check's workers when they read the same
snapshot, the archive reader of session.bodies (opened at most once) with its extent walk,
and the body index (scanned at most once, ``bodies/scan.py``).

``Snapshot.open`` opens a ledger for a check or a fleet task: the links refused, the file's
own checks (missing, a directory, empty, not SQLite: one line naming it), the connection,
the transaction. ``Snapshot.within`` borrows a ``Ledger``'s long-lived connection, map and
reader for one read transaction. ``close`` ends the transaction and closes what the
snapshot opened itself; ``interrupt`` stops every statement and page walk still running.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capsem_core import db, memory
from capsem_core._native import _archive, _pages
from capsem_core.bodies.body_index import BodyIndex, Blocks
from capsem_core.bodies.scan import scan_blocks, scan_index
from capsem_core.errors import ArchiveError, LedgerError
from capsem_core.pages import tables
from capsem_core.pages.check import damage_lines
from capsem_core.pages.index import Alongside
from capsem_core.paths import SESSION_BODIES, SESSION_DB, archive_path_for, refuse_symlink

SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_NOTADB = 26  # sqlite3.h: "file is not a database"
# SQLite reads pages with read(2) into its own small page cache, not through a memory map:
# a map keeps every page it touched resident until the connection closes (each of a check's
# connections mapping session.db anew: 2.2 times the file, resident, at 1,000,000 bodies),
# and saves no time: with the page windows kept, a check whose SQLite mapped the file took
# 1.055 of the time (docs/performance.md, "Every reader of the files keeps a bounded
# window"). Set on every connection, so a system build with a default map is overruled.
READ_MMAP_BYTES = 0
# Except a small session.db: where every connection of one read mapping all of it stays
# within this budget, each maps it whole, sparing the copies read(2) makes (a tenth of an
# incremental check of a 20 MB session.db), and what stays resident is bounded all the same.
SMALL_MAP_BUDGET = 64 << 20


def map_bytes(size: int, connections: int) -> int:
    """The memory map each of ``connections`` connections to a session.db of ``size`` bytes
    may use: the whole file when all of them together fit SMALL_MAP_BUDGET, else none."""
    return size if size * max(connections, 1) <= SMALL_MAP_BUDGET else READ_MMAP_BYTES


def read_ahead_budget() -> int:
    """The most a check reads ahead into the page cache: half the room ``memory.room()``
    reports (the system's available memory, narrowed by the process's memory cgroups), so
    read-ahead never pushes out what its own readers are about to use; 0 where nothing says."""
    room = memory.room()
    return room // 2 if room is not None else 0


def refuse_symlinks(db_path: Path, *, archive: bool) -> None:
    """Refuse a ledger reached through a symbolic link, as ``Ledger`` and the sessions
    resolver do: the session directory (the parent as given, not resolved), session.db and,
    with ``archive``, session.bodies. Nothing is opened first, so a refusal leaves the disk
    as it was (no -wal/-shm sidecars beside a link's target)."""
    refuse_symlink(db_path.parent, "session directory")
    refuse_symlink(db_path, SESSION_DB)
    if archive:
        refuse_symlink(archive_path_for(db_path), SESSION_BODIES)


def open_read_only(db_path: Path, plan: db.ReadPlan, *, connections: int = 1) -> sqlite3.Connection:
    """A read-only connection to ``db_path`` after making sure it is a readable SQLite file.

    Everything that would otherwise surface as an odd sqlite3 message or a traceback (missing,
    directory, unreadable, empty, foreign file) becomes a LedgerError naming the file; a
    malformed SQLite file is returned, for the page check to report. The file is opened once,
    by SQLite: a stat finds the missing, irregular and empty ones, and SQLite's own header
    check (SQLITE_NOTADB on the first read) the foreign ones.
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
    # A check reads what it can and reports an unread -wal itself.
    conn = db.connect_readonly(db_path, plan=plan, allow_unread_wal=True)
    # A check quotes ledger values in its findings: one not UTF-8 is reported, not an error.
    conn.text_factory = db.exact_text
    try:
        # The first statement that reads page 1: SQLite checks the header's magic there, so a
        # foreign file is named here without opening it a second time to read its first bytes.
        conn.execute("PRAGMA schema_version").fetchone()
        conn.execute(f"PRAGMA mmap_size = {map_bytes(st.st_size, connections)}")
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "").startswith("SQLITE_CORRUPT"):
            # A file SQLite opens but calls malformed (a header counting pages the file does
            # not hold, a damaged page 1) is checked all the same: the page check reports
            # SQLite's words as damage, where a refusal would say nothing more.
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


def _begin(conn: sqlite3.Connection) -> None:
    """A read transaction whose snapshot is fixed by its first read."""
    conn.execute("BEGIN")
    conn.execute("PRAGMA schema_version").fetchone()


class Snapshot:
    """One read transaction of a ledger and everything read in it (see the module)."""

    def __init__(self, db_path: Path, plan: db.ReadPlan, conn: sqlite3.Connection,
                 pages: _pages.PageFile | None, *, reader: _archive.ArchiveReader | None = None,
                 workers: list[sqlite3.Connection] | None = None, owned: bool = True) -> None:
        self.db_path = db_path
        self.bodies_path = archive_path_for(db_path)
        self.plan = plan
        self.conn = conn
        # session.db's pages, mapped read-only, when the file is this transaction's snapshot.
        self.pages = pages
        # Connections that read this very snapshot (only while ``pages`` is set).
        self.workers: list[sqlite3.Connection] = workers or []
        self.walk: _archive.ExtentWalk | None = None
        self._reader = reader
        self._refused: ArchiveError | None = None   # why session.bodies could not be opened
        self._owned = owned
        self._own_reader = False
        self._extra: list[sqlite3.Connection] = []
        self._index: BodyIndex | None = None
        self._ahead: _archive.ReadAhead | None = None
        self._ahead_bodies = False

    @classmethod
    def open(cls, db_path: os.PathLike[str] | str, *, workers: int = 0) -> Snapshot:
        """Open the ledger whose session.db is ``db_path`` for one read (a check, a fleet
        task), refusing links (session.bodies' is the archive check's finding). ``workers``:
        connections to begin in the same snapshot for reads beside the main one; they are
        kept only where the database file is that snapshot (``pages``), else closed.

        Raises LedgerError naming the file when it cannot be read at all, SymlinkRefused for a
        link; a lock or I/O failure while beginning a transaction surfaces as sqlite3.Error. An
        unread -wal is not refused (``plan.unread_wal``: the check reports it)."""
        path = Path(db_path)
        refuse_symlinks(path, archive=False)
        plan = db.read_plan(path)
        conn = open_read_only(path, plan, connections=1 + workers)
        opened = [conn]
        try:
            try:
                _begin(conn)
            except sqlite3.DatabaseError as exc:
                if not getattr(exc, "sqlite_errorname", "").startswith("SQLITE_CORRUPT"):
                    raise
                # Too damaged to read even its header in a transaction: checked all the same,
                # by the page check, which words the damage; nothing else shares it.
                return cls(path, plan, conn, None)
            shared = cls._begin_workers(path, plan, workers, opened)
            pages = tables.map_snapshot(path, conn, plan) if shared is not None else None
            if pages is None:
                for extra in opened[1:]:
                    extra.close()
                shared = []
            return cls(path, plan, conn, pages, workers=shared)
        except BaseException:
            for c in opened:
                c.close()
            raise

    @staticmethod
    def _begin_workers(path: Path, plan: db.ReadPlan, count: int,
                       opened: list[sqlite3.Connection]) -> list[sqlite3.Connection] | None:
        """``count`` connections, each begun after the main one; None when damage stops one
        from beginning (then none shares the snapshot, and the page check finds the damage)."""
        workers = []
        for _ in range(count):
            worker = open_read_only(path, plan, connections=1 + count)
            opened.append(worker)
            try:
                _begin(worker)
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                damage_lines(exc)   # re-raises what is not damage
                return None
            workers.append(worker)
        return workers

    @classmethod
    @contextmanager
    def within(cls, db_path: Path, plan: db.ReadPlan, conn: sqlite3.Connection, held: tables.HeldMap | None,
               reader: _archive.ArchiveReader | None) -> Iterator[Snapshot]:
        """One read transaction on a caller's long-lived connection (a ``Ledger``'s, opened
        with ``plan``), with its held map of session.db and its archive reader; nothing is
        closed after it."""
        try:
            _begin(conn)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"query failed: {exc}", db_path) from None
        try:
            pages = held.for_snapshot(conn) if held is not None else None
            yield cls(db_path, plan, conn, pages, reader=reader, owned=False)
        finally:
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError:
                pass  # a read transaction has nothing to lose

    # --- what is read in it -----------------------------------------------------------

    def archive(self) -> _archive.ArchiveReader:
        """The reader of session.bodies, opened once (its open checks the file header: an
        ArchiveError when it is not a version-2 archive, raised again at a later ask without
        opening the file again)."""
        if self._refused is not None:
            raise self._refused
        if self._reader is None:
            try:
                self._reader = _archive.ArchiveReader(self.bodies_path)
            except ArchiveError as exc:
                self._refused = exc
                raise
            self._own_reader = True
            if self._ahead_bodies:
                self._ahead_add(self._reader.fileno(), self._reader.size)
        return self._reader

    def _ahead_add(self, fd: int, size: int, gate: _pages.StreamGate | None = None) -> bool:
        """Hand one file to the read-ahead (with the ``gate`` it advances as it reads it); True
        when taken. It is only a hint: where it cannot run (no descriptor or thread to spare,
        a system without the advice) it is stopped, and the readers read as they would
        without it."""
        if self._ahead is None:
            return False
        try:
            self._ahead.add(fd, size, gate.capsule() if gate is not None else None)
            return True
        except (OSError, MemoryError):
            self._ahead.close()
            self._ahead = None
            return False

    def read_ahead(self, *, bodies: bool, share: float = 1.0) -> None:
        """Stream session.db into the page cache ahead of this snapshot's readers, then, with
        ``bodies``, session.bodies once its reader is open (``_archive.ReadAhead``: file order,
        through the descriptors already open), so a check from a cold cache reads at the
        disk's pace rather than a fault at a time. At most ``share`` (this check's share of the
        machine, when several run at once) of ``read_ahead_budget()`` bytes. Only where the
        pages are mapped (the file is the snapshot); stopped by ``close``."""
        if self._ahead is not None or self.pages is None:
            return
        budget = int(read_ahead_budget() * min(1.0, max(0.0, share)))
        if budget <= 0:
            return
        try:
            self._ahead = _archive.ReadAhead(budget)
        except MemoryError:
            return
        self._ahead_bodies = bodies
        # The page scans stay behind the stream (PageFile.follow): one that runs ahead of it,
        # as the identity graph's scan of a table spread over the whole file does, would read
        # each missing page alone, between the stream's reads, slowing both.
        gate = _pages.StreamGate()
        if self._ahead_add(self.pages.fileno(), self.pages.size, gate):
            self.pages.follow(gate)
        if bodies and self._reader is not None:
            self._ahead_add(self._reader.fileno(), self._reader.size)

    @property
    def reader(self) -> _archive.ArchiveReader | None:
        """The archive reader, when one is open."""
        return self._reader

    def index(self, *, keys: bool = False, threads: int = 0, alongside: Alongside | None = None) -> BodyIndex:
        """The body index as read in this snapshot, scanned once (a scan with keys serves a
        later ask without them). LedgerError naming session.db when it cannot be read."""
        if self._index is None or (keys and self._index.keys is None):
            self._index = scan_index(self, keys=keys, threads=threads, alongside=alongside)
        return self._index

    def release_index(self) -> None:
        """Forget the body index and the extent walk read with it (a check's steps that read
        them are done): their arrays go with the last holder; a later ``index()`` scans again."""
        self._index = None
        self.walk = None

    def blocks(self) -> Blocks:
        """body_blocks in this snapshot (the index's, when it has been scanned)."""
        return self._index.blocks if self._index is not None else scan_blocks(self)

    def walk_extents(self, blocks: Blocks, *, rules: bool = False) -> _archive.ExtentWalk:
        """Every extent of ``blocks`` (this snapshot's, or those of them to walk) walked in one
        native pass on the archive reader (headers only; with ``rules``, zlib's rules walked
        over the payloads on a thread meanwhile), kept for the verify kernel."""
        self.walk = self.archive().walk_extents(blocks.block_offset, blocks.disk_len, rules=rules)
        return self.walk

    def connect(self) -> sqlite3.Connection:
        """A further read-only connection to session.db with this snapshot's plan, in a read
        transaction of its own (a later snapshot where the file is not this one); closed with
        the snapshot."""
        # Counted with the connections already open, so the maps stay within the budget's reach.
        conn = open_read_only(self.db_path, self.plan, connections=2 + len(self.workers) + len(self._extra))
        self._extra.append(conn)
        _begin(conn)
        return conn

    def interrupt(self) -> None:
        """Stop every statement and page walk still running on another thread (Ctrl-C, a
        failure elsewhere): they end with an error their caller expects."""
        for conn in (self.conn, *self.workers, *self._extra):
            conn.interrupt()
        if self.pages is not None:
            self.pages.cancel()

    def close(self) -> None:
        """End the transaction and close what this snapshot opened (not what it borrowed)."""
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None
        if not self._owned:
            return
        for conn in (*self.workers, *self._extra):
            conn.close()
        self.workers, self._extra = [], []
        if self.pages is not None:
            self.pages.close()
            self.pages = None
        if self._own_reader and self._reader is not None:
            self._reader.close()
        self._reader = None
        self.walk = None
        self._index = None
        self.conn.close()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["READ_MMAP_BYTES", "SMALL_MAP_BUDGET", "SQLITE_MAGIC", "Snapshot", "map_bytes", "open_read_only", "read_ahead_budget", "refuse_symlinks"]
