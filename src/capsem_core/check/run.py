"""Running the checks of one ledger: its snapshot opened once, the checks as declared steps.

``check_ledger`` opens the ledger's ``Snapshot`` (one read transaction, with one more
connection per core in the same snapshot where the database file is that snapshot), declares
every step of the report with what it needs, and hands them to the one scheduler
(``steps.py``), which runs them on the cores: the page check's jobs (``quick_check`` per
table and the page map, or one whole-file ``quick_check`` when a -wal holds pages), the
identity graph's reads (from the start, beside the page map and the body index) and the
doctor's other sections on any connection of the snapshot; the schema, the archive check's
walk of the blocks and session.bodies (before the body index), the body index, the row
counts, the archive check of the body rows and the bodies' verification on the checks' own
connection. A page step that failed (not a verdict) is raised first; a damaged page check
then ends the report there (as the doctor's does: the other sections are thrown away); else
the first other failure is raised; else the verification record of --verify-bodies
--incremental is written.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capsem_core import cores, schema
from capsem_core._native import _pages
from capsem_core.bodies.body_index import BodyIndex
from capsem_core.check import identity, sql_checks
from capsem_core.check.archive import ArchiveWalk, check_body_archive, has_body_index, walk_body_archive
from capsem_core.check.report import CHECKS, ERROR, FAIL, CheckReport, CheckResult, Finding
from capsem_core.check.route import SessionRoute, check_route, read_route, session_stopped
from capsem_core.check.steps import Outcome, Scheduler, Step
from capsem_core.check.verify import SKIPPED_UNTIL_AGREE, ProgressCallback, VerifyStep, verify_bodies
from capsem_core.errors import LedgerError
from capsem_core.pages import check as page_check
from capsem_core.pages.graph import Graph, blobs_alongside, join_blobs, read_graph, worth_scanning
from capsem_core.pages.lifecycle import lifecycle_from_graph
from capsem_core.pages.usage import usage_from_graph
from capsem_core.snapshot import Snapshot

if TYPE_CHECKING:
    from capsem_core._native._archive import VerifyOutcome
    from capsem_core.check.incremental import VerifyOptions

# Below this size a second worker costs more than its share of the work saves: each opens a
# connection (SQLite reads the schema anew) and a thread, where the whole check is a few
# milliseconds (measured break-even: about 35 MB of session.db on 2 cores).
SMALL_CHECK_BYTES = 32 << 20
# The identity graph's reads go to the workers ahead of the page jobs: the section waits on
# them at the end, while the page jobs' order only decides which core finishes last.
_AHEAD = float("inf")


def check_ledger(db_path: os.PathLike[str] | str, *, rows: int = 5, verify_bodies: bool = False,
                 progress: ProgressCallback | None = None, route: SessionRoute | None = None,
                 options: VerifyOptions | None = None, page_threads: int | None = None) -> CheckReport:
    """Run every check on the ledger whose ``session.db`` is ``db_path``.

    ``route`` says how the ledger was reached: through a home's main.db under a session id
    (the identity graph then compares main.db's totals with the ledger's), or None (``--db``).
    ``options`` (with ``verify_bodies``): --incremental, --max-age and --subset, see
    ``capsem_core.check.incremental``; the report's ``coverage`` says what was read back.
    ``page_threads``: worker threads of the page check (default: one per core; one for a
    session.db under ``SMALL_CHECK_BYTES``, where a second costs more than it saves).

    Raises LedgerError (naming the file) when the file cannot be checked at all: missing,
    unreadable, locked, not SQLite, or written by another build; SymlinkRefused when
    session.db or its directory is a symbolic link. A damaged ledger is not an error: it is a
    report whose ``sound`` is False. TypeError or ValueError for an argument of the wrong kind
    (``rows`` an int >= 0, ``page_threads`` None or ``cores.checked``'s range).
    """
    db_path = Path(db_path)
    _check_arguments(rows, route, options, page_threads)
    threads = _page_threads(db_path, page_threads)
    try:
        snapshot = Snapshot.open(db_path, workers=threads)
    except sqlite3.Error as exc:
        raise LedgerError(_sqlite_message(exc), db_path) from None
    try:
        # Evidence is usually read from disk, not from memory: the files stream in ahead of
        # the steps that read them (a no-op where they are cached already), this check's share
        # of the page cache when a fleet runs several at once.
        snapshot.read_ahead(bodies=verify_bodies, share=threads / cores.available())
        check = _Check(snapshot, rows, verify_bodies, progress, route, options)
        outcome = Scheduler(check.steps, snapshot.conn, check.workers, snapshot.interrupt).run()
        check.fill(outcome)
        return check.report
    except sqlite3.Error as exc:
        raise LedgerError(_sqlite_message(exc), db_path) from None
    finally:
        snapshot.close()


def _check_arguments(rows: object, route: object, options: object, page_threads: object) -> None:
    """A caller's mistake said as one, before anything is opened."""
    if type(rows) is not int or not 0 <= rows < 1 << 63:   # SQLite binds it as a LIMIT: 64 bits
        raise (ValueError if type(rows) is int else TypeError)(f"rows is an int from 0 to 2**63 - 1, not {rows!r}")
    if route is not None and not isinstance(route, SessionRoute):
        raise TypeError(f"route is a SessionRoute or None, not {type(route).__name__}")
    if options is not None:
        from capsem_core.check.incremental import VerifyOptions   # loaded by a check that verifies less

        if not isinstance(options, VerifyOptions):
            raise TypeError(f"options is a VerifyOptions or None, not {type(options).__name__}")
    if page_threads is not None:
        cores.checked(page_threads, "page_threads")


def _page_threads(db_path: Path, requested: int | None) -> int:
    """The page check's workers: ``requested``, else the budget, except one for a session.db
    under SMALL_CHECK_BYTES (a missing file is left to the snapshot to word)."""
    threads = cores.threads(requested)
    if threads > 1 and (requested is None or requested <= 0):
        try:
            if os.stat(db_path).st_size < SMALL_CHECK_BYTES:
                return 1
        except OSError:
            pass
    return threads


def check_pages(db_path: os.PathLike[str] | str, *, threads: int | None = None) -> CheckResult:
    """The page check alone: the report's ``pages`` section for ``db_path`` (its lines as
    findings, ``counts["damaged"]``), run as ``check`` runs it on ``threads`` workers."""
    path = Path(db_path)
    try:
        with Snapshot.open(path, workers=cores.threads(threads)) as snapshot:
            check = _Check(snapshot, 0, False, None, None, None, pages_only=True)
            outcome = Scheduler(check.steps, snapshot.conn, check.workers, snapshot.interrupt).run()
            failure = outcome.first_failure(check.steps, verdict=True)
            if failure is not None:
                raise failure
            check._fill_pages(outcome.results, check.report.checks["pages"])
            return check.report.checks["pages"]
    except sqlite3.Error as exc:
        raise LedgerError(_sqlite_message(exc), path) from None


class _Check:
    """The steps of one check, declared, and the report they fill."""

    def __init__(self, snapshot: Snapshot, rows: int, verify: bool, progress: ProgressCallback | None,
                 route: SessionRoute | None, options: VerifyOptions | None, *, pages_only: bool = False) -> None:
        self.snapshot = snapshot
        self.progress = progress
        self.route = route
        self.options = options
        db_path = snapshot.db_path
        self.report = CheckReport(db_path=db_path, bodies_path=snapshot.bodies_path,
                                  session=db_path.absolute().parent.name, rows=rows, verify_bodies=verify,
                                  checks={name: CheckResult(name, title) for name, title in CHECKS})
        unread = snapshot.plan.unread_wal
        if unread is not None:
            self.report.checks["tables"].add(Finding(
                "wal_not_read", ERROR, f"{unread.describe()}; every count below is of session.db alone and misses "
                "those commits (copy the ledger with its -wal to writable storage to check all of it)",
                count=unread.commits, location={"file": str(unread.path)}))
        self.row, self.why = read_route(route)
        pages = snapshot.pages
        # Where the file is the snapshot (and not small), the identity graph is decided from its
        # pages, with event_body_blobs' columns coded in the body index's own pass.
        self.graph = Graph() if pages is not None and worth_scanning(pages) else None
        self.alongside = blobs_alongside(self.graph) if self.graph is not None else None
        self.workers = snapshot.workers
        self.early: list[str] | None = None
        self.schema: page_check.Schema | None = None
        self.proved: set[str] = set()   # the tables whose check the page map gave
        self._first = False   # the bodies read back before the archive walk (_bodies_first)
        try:
            self.schema = page_check.read_schema(snapshot.conn)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            self.early = page_check.damage_lines(exc)
        self.steps = self._page_steps() + ([] if pages_only else self._report_steps())

    # --- the declarations ----------------------------------------------------------------

    def _page_steps(self) -> list[Step]:
        if self.early is not None:
            return []
        pages, schema_ = self.snapshot.pages, self.schema
        if pages is None or schema_ is None:
            self.workers = [self.snapshot.connect()]
            return [Step("quick_check", lambda conn: page_check.quick_check_lines(conn), pool=True, verdict=True)]
        # The page map first: it reads the file in file order, just behind the read-ahead, and
        # holds every tree to the per-table check's tests. A table it proves sound needs no
        # quick_check (which reads by tree order, from a cold cache a wait on the disk per
        # page); the others, and sqlite_schema, are checked by SQLite, after it.
        steps = [Step("page_map", lambda conn: page_check.walk(pages, schema_), pool=True, cost=_AHEAD, verdict=True)]
        proof = page_check.provable(schema_)
        for table, cost in page_check.jobs(pages, schema_, proof):
            if table in proof:
                steps.append(Step(f"quick_check:{table}", lambda conn, walk, t=table: self._table_lines(conn, walk, t),
                                  needs=("page_map",), pool=True, cost=cost, verdict=True))
            else:
                steps.append(Step(f"quick_check:{table}", lambda conn, t=table: page_check.quick_check_lines(conn, t),
                                  pool=True, cost=cost, verdict=True))
        return steps

    def _table_lines(self, conn: sqlite3.Connection, page_map: _pages.Walk, table: str) -> list[str]:
        """``table``'s per-table check: "ok" where the page map proved it, else SQLite's."""
        assert self.schema is not None
        if page_check.proved(page_map, self.schema, table):
            self.proved.add(table)
            return ["ok"]
        return page_check.quick_check_lines(conn, table)

    def _report_steps(self) -> list[Step]:
        checks = self.report.checks
        scanning = self.graph is not None
        # Shared reads of the snapshot go to the workers where they read it; else they run on
        # the checks' connection, after the doctor's sections.
        beside = bool(self.snapshot.workers)
        parts = [Step(f"identity_part:{i}", self._part(i), needs=("schema", *(("identity_join",) if scanning else ())),
                      pool=beside, cost=_AHEAD) for i in range(4)]
        graph_needs = ("tables", "identity_join") if scanning else ("tables",)
        first = self._bodies_first()
        read = ("bodies_read",) if first else ()
        return [
            Step("schema", lambda conn: schema.check_schema(conn, self.snapshot.db_path)),
            Step("table_names", lambda conn, _schema: sql_checks.table_names(conn), needs=("schema",)),
            # body_blocks and session.bodies before the body rows: from a cold cache the body
            # index is read only as the stream reaches the end of session.db, and this part of
            # the archive check (and zlib's rules over the payloads, on a thread) need not wait.
            # Where session.bodies is the larger file, the kernel reads it back first, at the
            # stream's pace, and the walk finds it cached (``_bodies_read``).
            *([Step("bodies_read", self._bodies_read, needs=("body_index",))] if first else []),
            Step("archive_walk", self._archive_walk, needs=("table_names", *read)),
            # The body index before the row counts: its scan reads event_body_blobs in about file
            # order, as the read-ahead streams it, where COUNT(*) reads indexes at random (from a
            # cold cache, a wait on the disk per page until the stream has passed).
            Step("body_index", self._body_index, needs=("table_names",), transient=True,
                 release=self.snapshot.release_index),
            Step("tables", lambda conn, names: _tables(conn, names, checks["tables"]), needs=("table_names",)),
            Step("body_archive", lambda conn, index, walked: check_body_archive(self.snapshot, index,
                                                                                checks["body_archive"], walked),
                 needs=("body_index", "archive_walk")),
            # The doctor's other sections go to the workers where there are some: the checks'
            # own thread goes on to the bodies, which it reads back on every core.
            Step("fs_overflow", lambda conn, t: sql_checks.check_fs_overflow(conn, t.names, checks["fs_overflow"]),
                 needs=("tables",), pool=beside),
            Step("tool_lifecycle", self._tool_lifecycle, needs=graph_needs, pool=beside),
            Step("provider_correlation", lambda conn, t: sql_checks.check_provider_correlation(
                conn, t.names, t.counts, checks["provider_correlation"]), needs=("tables",), pool=beside),
            Step("null_fields", lambda conn, t: sql_checks.check_null_fields(conn, t.names, t.counts,
                                                                            checks["null_fields"]), needs=("tables",),
                 pool=beside),
            Step("tool_usage", self._tool_usage, needs=graph_needs, pool=beside),
            Step("previews", lambda conn, t: sql_checks.check_previews(conn, t.names, t.counts, self.report.rows,
                                                                      checks["previews"]), needs=("tables",),
                 pool=beside),
            Step("verify_bodies", self._verify, needs=("body_archive", "body_index", *read)),
            Step("identity_graph", self._identity_graph, needs=tuple(p.name for p in parts)),
            *([Step("identity_scan", self._scan_graph, needs=("schema",), pool=True, cost=_AHEAD, transient=True),
               Step("identity_join", self._join_graph, needs=("identity_scan", "body_index"), pool=True, cost=_AHEAD,
                    transient=True, release=self._release_graph)] if scanning else []),
            *parts,
        ]

    # --- the steps -------------------------------------------------------------------------

    def _body_index(self, conn: sqlite3.Connection, names: set[str]) -> BodyIndex | None:
        if not has_body_index(names):
            return None
        return self.snapshot.index(alongside=self.alongside)

    def _archive_walk(self, conn: sqlite3.Connection, names: set[str],
                      read: VerifyOutcome | None = None) -> ArchiveWalk | None:
        if not has_body_index(names):
            return None
        # zlib's rules ahead of the kernel only where it will read every block back after.
        rules = self.report.verify_bodies and (self.options is None or self.options.whole) and not self._first
        return walk_body_archive(self.snapshot, self.snapshot.blocks(), rules=rules)

    def _bodies_first(self) -> bool:
        """Whether the bodies are read back before the archive walk: a plain --verify-bodies of
        a ledger whose session.bodies is larger than session.db. From a cold cache the walk
        read that file at the disk's pace and the kernel waited for it, then read it again
        from the cache; read back first, the file streams once, under the kernel, and the walk
        after it reads headers from the cache. The verdict is unchanged: the outcome is worded
        only once the archive check finds the index and the file in agreement."""
        whole = self.report.verify_bodies and (self.options is None or self.options.whole)
        self._first = bool(whole) and _bodies_larger(self.snapshot)
        return self._first

    def _bodies_read(self, conn: sqlite3.Connection, index: BodyIndex | None) -> VerifyOutcome | None:
        """Every body read back (``verify.read_back``), or None where there is none or the
        archive cannot be opened (the walk says why, and the bodies are not read)."""
        if index is None or len(index) == 0:
            return None
        from capsem_core import verify

        end = getattr(self.progress, "end", None)
        try:
            return verify.read_back(self.snapshot, progress=self.progress)
        except LedgerError:   # not opened (no archive header, a link, not a file): the walk words why
            return None
        finally:
            if end is not None:
                end()

    def _tool_lifecycle(self, conn: sqlite3.Connection, tables: _Tables, graph: Graph | None = None) -> None:
        result = self.report.checks["tool_lifecycle"]
        if not sql_checks.lifecycle_tables(tables.names):
            result.skip("tool_calls or tool_responses is missing")
            return
        counts = lifecycle_from_graph(graph) if graph is not None else None
        if counts is None:
            counts = sql_checks.tool_lifecycle_counts(conn, tables.names)
        sql_checks.fill_tool_lifecycle(result, tables.counts, counts)

    def _tool_usage(self, conn: sqlite3.Connection, tables: _Tables, graph: Graph | None = None) -> None:
        sql_checks.check_tool_usage(conn, tables.names, tables.counts, self.report.checks["tool_usage"],
                                    usage_from_graph(graph, conn))

    def _verify(self, conn: sqlite3.Connection, archive_sound: bool, _index: BodyIndex | None,
                read: VerifyOutcome | None = None) -> VerifyStep | None:
        result = self.report.checks["verify_bodies"]
        if not self.report.verify_bodies:
            result.skip("not requested (--verify-bodies reads every body back through its hash)")
            return None
        if not archive_sound:
            result.skip(SKIPPED_UNTIL_AGREE)
            return None
        if self.snapshot.reader is None:   # sound, and the archive never opened: no body to read
            result.skip("no body is indexed: there is nothing to read back")
            return None
        return verify_bodies(self.snapshot, result, self.progress, self.options, read)

    def _scan_graph(self, conn: sqlite3.Connection, _schema: None) -> Graph | None:
        """The identity graph's columns from the pages, from the start, beside the page map and
        the body index's pass (which reads event_body_blobs' for it, in codes of its own): from
        a cold cache the three follow the read-ahead's stream together (the scans wait behind
        it), so what the section reads costs no time after the stream has ended."""
        assert self.snapshot.pages is not None and self.graph is not None
        return read_graph(self.snapshot.pages, conn, self.graph, self.alongside)

    def _join_graph(self, conn: sqlite3.Connection, graph: Graph | None, _index: BodyIndex | None) -> Graph | None:
        """The graph with event_body_blobs' columns, once the scan and the body index's pass
        have ended."""
        if graph is None or self.alongside is None or self.snapshot.pages is None:
            return None
        return join_blobs(self.snapshot.pages, conn, graph, self.alongside)

    def _release_graph(self) -> None:
        """The identity graph's arrays go once its parts, the tool lifecycle and the tool usage
        have read them."""
        self.graph = None
        self.alongside = None

    def _part(self, i: int) -> Any:
        sql = identity.session_parts(session_stopped(self.row))[i]

        def run(conn: sqlite3.Connection, _schema: None, graph: Graph | None = None) -> CheckResult:
            held = identity.held_part(graph, i) if graph is not None else None
            return held if held is not None else sql(conn)

        return run

    def _identity_graph(self, conn: sqlite3.Connection, *parts: CheckResult) -> None:
        result = self.report.checks["identity_graph"]
        identity.merge_parts(result, parts)
        check_route(conn, self.route, self.row, self.why, result)

    # --- the report ------------------------------------------------------------------------

    def fill(self, outcome: Outcome) -> None:
        """The sections from what the steps gave: the page check first (its damage ends the
        report), then the first failure raised, then the record written."""
        failure = outcome.first_failure(self.steps, verdict=True)
        if failure is not None:
            raise failure   # a lock or an I/O failure, not a verdict on the pages
        checks = self.report.checks
        self._fill_pages(outcome.results, checks["pages"])
        if checks["pages"].status == FAIL:
            for name, title in CHECKS:
                if name != "pages":
                    checks[name] = CheckResult(name, title)
                    checks[name].skip("the ledger's pages are damaged")
            return
        failure = outcome.first_failure(self.steps, verdict=False)
        if failure is not None:
            raise _as_ledger_error(failure, self.snapshot.db_path)
        done: VerifyStep | None = outcome.results.get("verify_bodies")
        if done is not None:
            self.report.coverage = done.coverage
            if done.pending is not None:
                done.pending.commit()   # the pages are sound: what was verified may be recorded

    def _fill_pages(self, results: dict[str, Any], result: CheckResult) -> None:
        walk: _pages.Walk | None = results.get("page_map")
        if self.early is not None:
            lines = self.early
        else:
            checked = [results[s.name] for s in self.steps if s.name.startswith("quick_check") and s.name in results]
            lines = page_check.verdict_lines(checked, walk, self.schema)
        result.counts["lines"] = len(lines)
        result.counts["method"] = page_check.PER_TABLE if walk is not None else page_check.WHOLE_FILE
        result.counts["threads"] = len(self.workers)
        result.counts["tables_checked"] = sum(1 for k in results if k.startswith("quick_check:"))
        result.counts["tables_proved"] = len(self.proved)
        if walk is not None:
            result.counts["pages_walked"] = page_check.pages_walked(walk)
        if lines != ["ok"]:
            for line in lines:
                result.add(Finding("page_damage", ERROR, line))
        result.counts["damaged"] = lines != ["ok"]


class _Tables:
    """The tables step's answer: the ledger's tables and their row counts."""

    def __init__(self, names: set[str], counts: dict[str, int]) -> None:
        self.names = names
        self.counts = counts


def _bodies_larger(snapshot: Snapshot) -> bool:
    """Whether session.bodies is a regular file larger than session.db."""
    try:
        bodies, db_file = os.lstat(snapshot.bodies_path), os.stat(snapshot.db_path)
    except OSError:
        return False
    return stat.S_ISREG(bodies.st_mode) and bodies.st_size > db_file.st_size


def _tables(conn: sqlite3.Connection, names: set[str], result: CheckResult) -> _Tables:
    return _Tables(names, sql_checks.check_tables(conn, names, result))


def _as_ledger_error(exc: BaseException, db_path: Path) -> BaseException:
    if isinstance(exc, sqlite3.Error):
        return LedgerError(_sqlite_message(exc), db_path)
    if isinstance(exc, UnicodeDecodeError):   # an error quoting a damaged file's own bytes
        return LedgerError(bytes(exc.object).decode("utf-8", "replace"), db_path)
    return exc


def _sqlite_message(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"{text} (another process holds a lock on the ledger; try again when it is idle)"
    return text


__all__ = ["check_ledger", "check_pages"]
