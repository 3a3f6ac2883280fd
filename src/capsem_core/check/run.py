"""Running the checks of one ledger: the doctor's order, and what is skipped when.

``check_ledger`` opens the ledger (``opening.py``), begins one read transaction on the
checks' connection, starts the page check (``pages.py``: quick_check per table on one
connection per core plus the native page map, or one whole-file quick_check when a -wal
holds pages) on worker threads, and meanwhile runs the other checks in that transaction (the
SQL checks, the native index scans and the labels of --verify-bodies' findings). It throws
their results away if the pages are damaged (the report then ends at page integrity, as the
doctor's does), and runs --verify-bodies last, only when it is asked for and the archive
check found the index and the file in agreement, on the archive reader that check opened.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from capsem_core import db, index_pages, schema
from capsem_core._native import _pages
from capsem_core.check import archive, identity, identity_pages, lifecycle_pages, opening, pages, sql_checks
from capsem_core.check import verify as _verify_step
from capsem_core.check.incremental import PendingRecord, VerifyOptions
from capsem_core.check.report import CHECKS, ERROR, FAIL, CheckReport, CheckResult, Finding
from capsem_core.check.route import SessionRoute, check_route, read_route, session_stopped
from capsem_core.check.verify import ProgressCallback
from capsem_core.errors import LedgerError
from capsem_core.paths import archive_path_for


def check_ledger(db_path: os.PathLike[str] | str, *, rows: int = 5, verify_bodies: bool = False,
                 progress: ProgressCallback | None = None, route: SessionRoute | None = None,
                 options: VerifyOptions | None = None, page_threads: int | None = None) -> CheckReport:
    """Run every check on the ledger whose ``session.db`` is ``db_path``.

    ``route`` says how the ledger was reached: through a home's main.db under a session id
    (the identity graph then compares main.db's totals with the ledger's), or None (``--db``).
    ``options`` (with ``verify_bodies``): --incremental, --max-age and --subset, see
    ``capsem_core.check.incremental``; the report's ``coverage`` says what was read back.
    ``page_threads``: worker threads of the page check (default: one per core).

    Raises LedgerError (naming the file) when the file cannot be checked at all: missing,
    unreadable, locked, not SQLite, or written by another build; SymlinkRefused when
    session.db or its directory is a symbolic link. A damaged ledger is not an error: it is a
    report whose ``sound`` is False.
    """
    db_path = Path(db_path)
    bodies_path = archive_path_for(db_path)
    report = CheckReport(db_path=db_path, bodies_path=bodies_path, session=db_path.absolute().parent.name,
                         rows=rows, verify_bodies=verify_bodies,
                         checks={name: CheckResult(name, title) for name, title in CHECKS})
    checks = report.checks
    # A symlinked session.bodies stays a finding of the report (it is never read through);
    # the CLI refuses it up front.
    opening.refuse_symlinks(db_path, archive=False)
    # One read-only decision (db.py's) for every connection of this check, native ones too.
    plan = db.read_plan(db_path)
    if plan.unread_wal is not None:
        checks["tables"].add(Finding("wal_not_read", ERROR,
                                     f"{plan.unread_wal.describe()}; every count below is of session.db alone "
                                     "and misses those commits (copy the ledger with its -wal to writable "
                                     "storage to check all of it)", count=plan.unread_wal.commits,
                                     location={"file": str(plan.unread_wal.path)}))
    conn = opening.open_read_only(db_path, plan)
    page_check: pages.PageCheck | None = None
    try:
        # One read transaction serves every read of session.db: the page check's workers
        # begin theirs after it (pages.py says why they then read the same pages), and the
        # other checks run in it while the page check runs on its own threads. Their results
        # are thrown away if it finds damage, so the report reads as if it had gone first.
        conn.execute("BEGIN")
        page_check = pages.PageCheck.start(db_path, plan, conn, checks["pages"], page_threads)
        failure: LedgerError | None = None
        pending: PendingRecord | None = None
        try:
            pending = _run_other_checks(conn, db_path, bodies_path, report, progress, plan, route, options,
                                         page_check)
        except LedgerError as exc:
            failure = exc
        except sqlite3.Error as exc:
            failure = LedgerError(_sqlite_message(exc), db_path)
        except UnicodeDecodeError as exc:   # an error quoting a damaged file's own bytes
            failure = LedgerError(bytes(exc.object).decode("utf-8", "replace"), db_path)
        page_check.wait()
        if checks["pages"].status == FAIL:
            for name, title in CHECKS:
                if name != "pages":
                    checks[name] = CheckResult(name, title)
                    checks[name].skip("the ledger's pages are damaged")
            return report
        if failure is not None:
            raise failure
        if pending is not None:
            pending.commit()   # the pages are sound: what was verified may be recorded
    except sqlite3.Error as exc:
        raise LedgerError(_sqlite_message(exc), db_path) from None
    finally:
        if page_check is not None:
            page_check.close()
        conn.close()
    return report


def _run_other_checks(conn: sqlite3.Connection, db_path: Path, bodies_path: Path, report: CheckReport,
                      progress: ProgressCallback | None, plan: db.ReadPlan,
                      route: SessionRoute | None, options: VerifyOptions | None,
                      page_check: pages.PageCheck) -> PendingRecord | None:
    """Everything after page integrity, in the report's order (the identity graph's
    session.db reads on the page check's workers when they read this snapshot, and the tool
    lifecycle counted from the same scan where the graph is decided from the pages)."""
    checks = report.checks
    # One read transaction (begun by check_ledger) serves every read of session.db: the SQL checks
    # (a writer committing meanwhile cannot make one count disagree with another: a response
    # counted whose call was not, a total below its part), the native index scans (on this
    # connection, see capsem_core.index) and the labels of --verify-bodies' findings. It stays
    # open through the verify, so while a long verify runs a live writer's WAL cannot be
    # checkpointed past this snapshot (it is once the check ends); one snapshot is what lets
    # every figure of the report describe the same ledger.
    index: archive.BodyIndex | None = None
    pending: PendingRecord | None = None
    graph: _IdentityBeside | None = None
    try:
        schema.check_schema(conn, db_path)  # refuse a ledger of another build
        # The identity graph is the longest of the SQL checks and reads nothing the others
        # write: where the page check's workers read this snapshot it runs on them, beside
        # everything below, and is collected at the end.
        graph = _IdentityBeside.start(page_check, route)
        tables = sql_checks.table_names(conn)
        row_counts = sql_checks.check_tables(conn, tables, checks["tables"])
        # The identity graph's traces and turns of event_body_blobs come from the same pass; its
        # scan waits for the pass to end, read or not (an exception: the finally below).
        blobs = graph.blobs if graph is not None else None
        index = archive.check_body_archive(tables, db_path, bodies_path, checks["body_archive"], plan, conn,
                                           page_check.page_file, blobs)
        if blobs is not None:
            blobs.done.set()
        sql_checks.check_fs_overflow(conn, tables, checks["fs_overflow"])
        # Where the identity graph's scan runs, it reads the tool lifecycle's columns too.
        lifecycle_later = graph is not None and graph.scans and sql_checks.lifecycle_tables(tables)
        if not lifecycle_later:
            sql_checks.check_tool_lifecycle(conn, tables, row_counts, checks["tool_lifecycle"])
        sql_checks.check_provider_correlation(conn, tables, row_counts, checks["provider_correlation"])
        sql_checks.check_null_fields(conn, tables, row_counts, checks["null_fields"])
        sql_checks.check_tool_usage(conn, tables, row_counts, checks["tool_usage"])
        sql_checks.check_previews(conn, tables, row_counts, report.rows, checks["previews"])
        if graph is None:
            identity.check_identity_graph(conn, checks["identity_graph"], route)
        verify = checks["verify_bodies"]
        if not report.verify_bodies:
            verify.skip("not requested (--verify-bodies reads every body back through its hash)")
        elif index is None or not index.archive_sound or index.reader is None:
            verify.skip(_verify_step.SKIPPED_UNTIL_AGREE)
        else:
            report.coverage, pending = _verify_step.verify_bodies(conn, db_path, index, verify, progress, options)
        if graph is not None:
            graph.finish(conn, checks["identity_graph"])
            if lifecycle_later:
                graph.fill_lifecycle(conn, tables, row_counts, checks["tool_lifecycle"])
    finally:
        if graph is not None and graph.blobs is not None:
            graph.blobs.done.set()   # a check that failed before or in its body archive step
        if index is not None:
            index.close()
    return pending


class _IdentityBeside:
    """The identity graph's session.db parts on the page check's workers. Where the mapped
    file is the snapshot (and not small), one job first decides from its pages which parts
    hold (identity_pages.py) and queues the SQL of the others there too, and takes the tool
    lifecycle's counts from the same scan (lifecycle_pages.py); else every part's SQL is
    queued."""

    def __init__(self, page_check: pages.PageCheck, route: SessionRoute | None) -> None:
        self.page_check = page_check
        self.route = route
        self.row, self.why = read_route(route)
        self.stopped = session_stopped(self.row)
        mapped = page_check.page_file
        self.handles: list[pages.Beside] = []
        self.gate: pages.Beside | None = None
        self.lifecycle: sql_checks.Lifecycle | None = None
        self.graph: identity_pages.Graph | None = None
        self.blobs: index_pages.Alongside | None = None
        if mapped is not None and identity_pages.worth_scanning(mapped):
            self.graph = identity_pages.Graph()
            self.blobs = identity_pages.blobs_alongside(self.graph)
            # After the page map: it has mapped every page the scan reads by then.
            self.gate = page_check.run_beside([lambda conn: self._decide(mapped, conn)], after_walk=True)[0]
        else:
            self.handles = page_check.run_beside(identity.session_parts(self.stopped))

    def _decide(self, mapped: _pages.PageFile, conn: sqlite3.Connection) -> list[CheckResult | pages.Beside]:
        """Which parts the pages show to hold; the SQL of the others queued on the workers."""
        # The body index's pass codes event_body_blobs' columns in the graph's codes first. Its
        # end is signalled in a finally; a check torn down (Ctrl-C) before it got there stops
        # the page check, and then this job has nothing to decide.
        while self.blobs is not None and not self.blobs.done.wait(0.05):
            if self.page_check.stopping:
                return []
        graph = identity_pages.read_graph(mapped, conn, self.graph, self.blobs)
        self.lifecycle = lifecycle_pages.lifecycle_from_graph(graph)
        held = identity_pages.held_parts(graph)
        sql = identity.session_parts(self.stopped)
        queued = iter(self.page_check.run_beside([sql[i] for i, part in enumerate(held) if part is None]))
        return [part if part is not None else next(queued) for part in held]

    @property
    def scans(self) -> bool:
        """Whether the parts are decided from the pages (then the tool lifecycle is too)."""
        return self.gate is not None

    @classmethod
    def start(cls, page_check: pages.PageCheck, route: SessionRoute | None) -> _IdentityBeside | None:
        return cls(page_check, route) if page_check.shares_snapshot else None

    def finish(self, conn: sqlite3.Connection, result: CheckResult) -> None:
        """Wait for the parts (raising what one raised) and fill the section, main.db's
        comparison last, on ``conn``."""
        parts = self.gate.result(self.page_check, conn) if self.gate is not None else self.handles
        identity.merge_parts(result, [p if isinstance(p, CheckResult) else p.result(self.page_check, conn)
                                      for p in parts])
        check_route(conn, self.route, self.row, self.why, result)

    def fill_lifecycle(self, conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                       result: CheckResult) -> None:
        """The tool lifecycle, from the scan's counts (after ``finish``), or by its SQL on
        ``conn`` where the scan could not count it."""
        counts = self.lifecycle if self.lifecycle is not None else sql_checks.tool_lifecycle_counts(conn, tables)
        sql_checks.fill_tool_lifecycle(result, row_counts, counts)


def _sqlite_message(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"{text} (another process holds a lock on the ledger; try again when it is idle)"
    return text


__all__ = ["check_ledger"]
