"""The page check of session.db: ``PRAGMA quick_check``'s verdict, from all cores.

A whole-file ``PRAGMA quick_check`` is one long single-threaded pass. ``PageCheck`` splits it
in two halves that together see everything it sees:

* ``PRAGMA main.quick_check('TABLE')`` for every table (and ``sqlite_schema``, whose check
  includes the freelist's), each checking its b-trees and their rows in full, run on one
  read-only connection per worker thread, largest tables first;
* the native page map (``capsem_core._native._pages``), the whole-file checks a per-table
  check leaves out: the freelist's trunk and leaf pages, every page used exactly once (by
  one tree, its overflow chains, the freelist, the pointer map or the lock-byte page), the
  root pages' pointer-map entries. It reads session.db's own bytes through a read-only map.

Both halves must read the snapshot of the check's read transaction. Every worker connection
begins its own read transaction after the checks' connection has begun its one; when then
no ``-wal`` holds a page (none beside session.db, or an empty one) each of those snapshots
is the database file itself, and the file cannot change while they are held (a WAL
checkpoint waits for readers of the file alone; a rollback-journal writer for every shared
lock). So the per-table checks and the page map describe the same pages as every other
check of the report. When a ``-wal`` holds pages (a live or crashed writer's commits), the
database file is not the snapshot, and the check falls back to one whole-file
``PRAGMA quick_check`` on one connection, as SQLite itself reads it. The report says which
(``counts["method"]``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsem_core import cores, db, page_tables
from capsem_core._native import _pages
from capsem_core.check import opening
from capsem_core.check.page_words import walk_lines
from capsem_core.check.report import CHECKS, ERROR, CheckResult, Finding
from capsem_core.errors import LedgerError

PER_TABLE, WHOLE_FILE = "per_table", "whole_file"
# The page map costs about a seventh of quick_check per page; its place in the largest-first
# order is that share of all pages.
WALK_COST_PER_PAGE = 0.15
_DAMAGE_ERRORS = frozenset({"SQLITE_CORRUPT", "SQLITE_CORRUPT_INDEX", "SQLITE_CORRUPT_SEQUENCE",
                            "SQLITE_CORRUPT_VTAB", "SQLITE_NOTADB"})
SCHEMA_TABLE = "sqlite_schema"


def damage_lines(exc: sqlite3.DatabaseError | UnicodeDecodeError) -> list[str]:
    """SQLite's own error when it is damage (corrupt, not a database); else re-raises it: a
    lock or an I/O failure is not a verdict on the pages. An error the sqlite3 module cannot
    decode quotes the file's own broken bytes (a malformed schema's name): damage too, in
    SQLite's words as far as they read."""
    if isinstance(exc, UnicodeDecodeError):
        return [bytes(exc.object).decode("utf-8", "replace")]
    if getattr(exc, "sqlite_errorname", "") not in _DAMAGE_ERRORS:
        raise exc
    return [str(exc)]


def quick_check_lines(conn: sqlite3.Connection, table: str | None = None) -> list[str]:
    """``PRAGMA quick_check`` (of one table when ``table`` is given): its lines, ``["ok"]``
    when sound. A damaged file SQLite refuses to read gives its error as the one line."""
    sql = "PRAGMA quick_check" if table is None else "PRAGMA main.quick_check(" + _quote(table) + ")"
    # A damaged file's lines may quote bytes that are not UTF-8 (a name in a broken record).
    factory = conn.text_factory
    conn.text_factory = _lenient_text
    try:
        return [str(r[0]) for r in conn.execute(sql)]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        return damage_lines(exc)
    finally:
        conn.text_factory = factory


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(slots=True)
class _Schema:
    tables: list[str]
    roots: list[int]
    names: dict[int, str]      # root page -> "table t" / "index i" (for the page map's words)
    table_of: list[str]        # per root: the table whose per-table check covers it


def _read_schema(conn: sqlite3.Connection) -> _Schema:
    factory = conn.text_factory
    conn.text_factory = _lenient_text
    try:
        rows = conn.execute("SELECT type, name, tbl_name, rootpage FROM sqlite_schema").fetchall()
    finally:
        conn.text_factory = factory
    tables = [str(name) for kind, name, _t, _r in rows if kind == "table"]
    roots, table_of, names = [1], [SCHEMA_TABLE], {1: f"table {SCHEMA_TABLE}"}
    for kind, name, tbl_name, rootpage in rows:
        # Views and triggers have no tree (rootpage 0), virtual tables none of their own.
        if isinstance(rootpage, int) and not isinstance(rootpage, bool) and 0 < rootpage <= 0xFFFFFFFF:
            roots.append(rootpage)
            table_of.append(str(tbl_name))
            names.setdefault(rootpage, f"{kind} {name}")
    return _Schema(tables, roots, names, table_of)


@dataclass(slots=True)
class _Job:
    cost: float
    table: str | None          # None: the page map
    lines: list[str] = field(default_factory=list)


class Beside:
    """A read of the checks' snapshot queued for the page-check workers' connections
    (``PageCheck.run_beside``). ``result()`` returns its value or raises what it raised: it
    waits for a worker that has taken it, or runs it on the caller's connection (same
    snapshot) if none has yet, so a caller done with its own work never waits for a worker
    still busy with a page job."""

    __slots__ = ("fn", "after_walk", "value", "error", "done", "taken")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], after_walk: bool = False) -> None:
        self.fn = fn
        self.after_walk = after_walk
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.taken = False

    def run(self, conn: sqlite3.Connection) -> None:
        try:
            self.value = self.fn(conn)
        except BaseException as exc:   # the caller's to raise, on its own thread
            self.error = exc
        self.done.set()

    def result(self, check: PageCheck, conn: sqlite3.Connection) -> Any:
        if check._claim(self):
            self.run(conn)
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


class PageCheck:
    """The page check of one ledger, running on worker threads while the other checks run.

    ``start`` reads the schema through the checks' connection (inside its read transaction),
    opens the workers' connections and starts them; ``wait`` fills the ``pages`` result;
    ``close`` stops whatever still runs (Ctrl-C, another check's failure) and closes the
    connections. What is not damage is raised: sqlite3.Error for a lock or an I/O failure,
    LedgerError naming session.db when it cannot be opened.
    """

    def __init__(self, db_path: Path, result: CheckResult, threads: int) -> None:
        self.db_path = db_path
        self.result = result
        self.threads = threads
        self.method = WHOLE_FILE
        self._conns: list[sqlite3.Connection] = []
        self._workers: list[threading.Thread] = []
        self._jobs: deque[_Job] = deque()
        self._beside: deque[Beside] = deque()
        self._done: list[_Job] = []
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._stop = threading.Event()
        self._file: _pages.PageFile | None = None
        self._walk: _pages.Walk | None = None
        self._walk_pending = False   # the page map is queued or running
        self._schema: _Schema | None = None
        self._early: list[str] | None = None   # damage found before any worker started

    @classmethod
    def start(cls, db_path: Path, plan: db.ReadPlan, conn: sqlite3.Connection, result: CheckResult,
              threads: int | None = None) -> PageCheck:
        """Start the page check; ``conn`` is the checks' connection, in its read transaction."""
        check = cls(db_path, result, cores.threads(threads))
        try:
            check._begin(plan, conn)
        except BaseException:
            check.close()
            raise
        return check

    def _begin(self, plan: db.ReadPlan, conn: sqlite3.Connection) -> None:
        try:
            self._schema = _read_schema(conn)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            self._early = damage_lines(exc)
            return
        for _ in range(self.threads):
            worker = opening.open_read_only(self.db_path, plan)
            self._conns.append(worker)
            worker.execute("BEGIN")
            try:
                worker.execute("PRAGMA schema_version").fetchone()   # the snapshot begins here
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                self._early = damage_lines(exc)
                return
        if db.main_file_is_snapshot(self.db_path, plan):
            self._file = self._map_if_same(conn)
        if self._file is None:
            self._jobs.append(_Job(1.0, None))
            self.method = WHOLE_FILE
            for extra in self._conns[1:]:
                extra.close()
            del self._conns[1:]
            self._spawn(1, whole_file=True)
            return
        self.method = PER_TABLE
        self._jobs.extend(self._plan_jobs(self._file, self._schema))
        self._spawn(len(self._conns), whole_file=False)

    def _map_if_same(self, conn: sqlite3.Connection) -> _pages.PageFile | None:
        """The page map's view of session.db, when its header is the snapshot's (else the file
        is not the one SQLite reads, and the whole-file check is used)."""
        try:
            pages = _pages.PageFile(self.db_path)
        except OSError as exc:
            raise LedgerError(f"cannot read: {exc.strerror}", self.db_path) from None
        if not page_tables.same_file(pages, conn):
            pages.close()
            return None
        return pages

    def _plan_jobs(self, pages: _pages.PageFile, schema: _Schema) -> list[_Job]:
        sizes: dict[str, float] = {name: 0.0 for name in schema.tables}
        sizes[SCHEMA_TABLE] = 0.0
        for table, size in zip(schema.table_of, pages.estimate(schema.roots)):
            if table in sizes:
                sizes[table] += size
        jobs = [_Job(cost, name) for name, cost in sizes.items()]
        header = pages.header() or {}
        jobs.append(_Job(WALK_COST_PER_PAGE * header.get("page_count", 0), None))
        self._walk_pending = True
        jobs.sort(key=lambda j: -j.cost)
        return jobs

    def _spawn(self, count: int, *, whole_file: bool) -> None:
        for i in range(count):
            t = threading.Thread(target=self._work, args=(self._conns[i], whole_file),
                                 name=f"capsem-page-check-{i}", daemon=True)
            self._workers.append(t)
            t.start()

    @property
    def stopping(self) -> bool:
        """Whether the check is closing the page check (a job waiting on something should end)."""
        return self._stop.is_set()

    @property
    def shares_snapshot(self) -> bool:
        """True when the workers read exactly the checks' snapshot (the per-table method), so
        other reads of session.db may run on their connections (``run_beside``)."""
        return self.method == PER_TABLE and self._early is None and bool(self._workers)

    @property
    def page_file(self) -> _pages.PageFile | None:
        """The mapped database file, when it is the checks' snapshot (``shares_snapshot``):
        reads of it may run on the workers beside the walk (``run_beside``)."""
        return self._file if self.shares_snapshot else None

    def run_beside(self, fns: Sequence[Callable[[sqlite3.Connection], Any]], *,
                   after_walk: bool = False) -> list[Beside]:
        """Queue reads to run on the workers' connections before the remaining page jobs
        (they are the longer ones); only when ``shares_snapshot``. ``after_walk``: not before
        the page map has walked the file (a read of the mapped file then finds its pages
        already mapped); a worker takes page jobs meanwhile."""
        if not self.shares_snapshot:
            raise RuntimeError("the page check's workers do not read the checks' snapshot")
        handles = [Beside(fn, after_walk) for fn in fns]
        with self._lock:
            self._beside.extend(handles)
        return handles

    def _claim(self, handle: Beside) -> bool:
        """Take ``handle`` for the caller unless a worker already has it."""
        with self._lock:
            if handle.taken:
                return False
            handle.taken = True
            return True

    def _work(self, conn: sqlite3.Connection, whole_file: bool) -> None:
        while not self._stop.is_set():
            with self._lock:
                beside = self._next_beside()
                if beside is not None:
                    beside.taken = True
                elif not self._jobs:
                    return
                else:
                    job = self._jobs.popleft()
            if beside is not None:
                beside.run(conn)
                continue
            try:
                if whole_file:
                    job.lines = quick_check_lines(conn)
                elif job.table is None:
                    try:
                        self._run_walk()
                    finally:
                        with self._lock:
                            self._walk_pending = False
                else:
                    job.lines = quick_check_lines(conn, job.table)
            except BaseException as exc:   # handed to wait(), on the caller's thread
                with self._lock:
                    self._errors.append(exc)
                self._stop.set()
                return
            with self._lock:
                self._done.append(job)

    def _next_beside(self) -> Beside | None:
        """The first queued read a worker may take now (under the lock), removed from the
        queue; reads the caller ran itself are dropped."""
        while self._beside and self._beside[0].taken:
            self._beside.popleft()
        for handle in self._beside:
            if not handle.taken and not (handle.after_walk and self._walk_pending):
                self._beside.remove(handle)
                return handle
        return None

    def _run_walk(self) -> None:
        assert self._file is not None and self._schema is not None
        self._walk = self._file.walk(self._schema.roots)

    def wait(self) -> None:
        """Wait for every job, then fill the result (lines, damage, how it was checked)."""
        for t in self._workers:
            t.join()
        if self._errors:
            raise self._errors[0]   # a lock or I/O failure (sqlite3.Error): the caller words it
        lines = self._early if self._early is not None else self._lines()
        result = self.result
        result.counts["lines"] = len(lines)
        result.counts["method"] = self.method
        result.counts["threads"] = len(self._workers)
        result.counts["tables_checked"] = sum(1 for j in self._done if j.table)
        if self._walk is not None:
            result.counts["pages_walked"] = int(self._walk.btree_pages + self._walk.overflow_pages
                                                + self._walk.freelist_pages)
        if lines != ["ok"]:
            for line in lines:
                result.add(Finding("page_damage", ERROR, line))
        result.counts["damaged"] = lines != ["ok"]

    def _lines(self) -> list[str]:
        lines = [line for job in self._done for line in job.lines if line != "ok"]
        if self._walk is not None and self._schema is not None:
            # Damage inside one tree is its quick_check's to word; the page map's view of it
            # is shown only when that check said nothing (it never should).
            lines += walk_lines(self._walk, self._schema.names, in_tree=not lines)
        return lines or ["ok"]

    def close(self) -> None:
        """Stop what still runs and close every connection and the map."""
        self._stop.set()
        for conn in self._conns:
            conn.interrupt()
        if self._file is not None:
            self._file.cancel()
        for t in self._workers:
            if t.ident is not None:   # a Ctrl-C can land between a thread's creation and its start
                t.join()
        for conn in self._conns:
            conn.close()   # ends its read transaction
        self._conns.clear()
        if self._file is not None:
            self._file.close()
            self._file = None


def check_pages(db_path: os.PathLike[str] | str, *, threads: int | None = None) -> CheckResult:
    """The page check alone: the report's ``pages`` section for ``db_path`` (its lines as
    findings, ``counts["damaged"]``), run as ``check`` runs it."""
    path = Path(db_path)
    result = CheckResult("pages", dict(CHECKS)["pages"])
    plan = db.read_plan(path)
    conn = opening.open_read_only(path, plan)
    try:
        conn.execute("BEGIN")
        check = PageCheck.start(path, plan, conn, result, threads)
        try:
            check.wait()
        finally:
            check.close()
    finally:
        conn.close()
    return result


__all__ = ["PER_TABLE", "SCHEMA_TABLE", "WALK_COST_PER_PAGE", "WHOLE_FILE", "Beside", "PageCheck", "check_pages",
           "damage_lines", "quick_check_lines"]
