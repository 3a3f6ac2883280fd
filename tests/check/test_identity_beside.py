"""The identity graph as steps of the check: where the snapshot's workers read the checks'
snapshot (no -wal holding pages) its session.db parts run on them, beside the other checks (the
parts the mapped file's pages show to hold need no SQL; the others run their SQL there), and
the section is exactly the one a run on the checks' own connection gives; otherwise (a -wal
holding pages) it runs on the checks' connection. A part that fails fails the check. Every
wait is on what the steps themselves do, never on time."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from capsem_core import db as _db
from capsem_core import snapshot as opening
from capsem_core._native import _pages
from capsem_core.check import check_ledger, identity, run, sql_checks, steps
from capsem_core.check.report import CHECKS, CheckResult
from capsem_core.errors import LedgerError
from capsem_core.pages import graph as identity_pages
from capsem_core.sample import write_sample_ledger
from tests.check.test_check import sql

BOUND = 120.0   # only a lost step waits this long: it turns a hang into a failure


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("beside") / "sound"
    write_sample_ledger(directory, seed=21, mix="realistic", bodies=300)
    return directory


@pytest.fixture
def damaged(sound: Path, tmp_path: Path) -> Path:
    """A copy with invariants broken in three of the parts, so the section merges findings."""
    copy = tmp_path / "ledger"
    shutil.copytree(sound, copy)
    db = copy / "session.db"
    sql(db, "UPDATE model_items SET model_call_id = 999999 WHERE id IN (SELECT id FROM model_items LIMIT 3)")
    sql(db, "DELETE FROM tool_calls WHERE id IN (SELECT id FROM tool_calls WHERE model_call_id IS NOT NULL LIMIT 2)")
    sql(db, "UPDATE fs_events SET trace_id = 'another-trace' WHERE id = "
            "(SELECT MIN(id) FROM fs_events WHERE turn_id IS NOT NULL)")
    sql(db, "UPDATE tool_responses SET model_call_id = 0 WHERE id = (SELECT MIN(id) FROM tool_responses)")
    sql(db, "DELETE FROM dns_events WHERE id IN (SELECT id FROM dns_events LIMIT 2)")
    return db


@pytest.fixture(autouse=True)
def decided_from_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """These samples are small; check decides them from their pages as it does a large one."""
    monkeypatch.setattr(identity_pages, "MIN_BYTES", 0)


class Parts:
    """Records the thread each part's SQL runs on, and lets a test wait for them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        self.changed = threading.Condition()
        real = identity.session_parts

        def recorded(stopped: bool | None) -> list[identity.Part]:
            return [self._wrap(p) for p in real(stopped)]

        monkeypatch.setattr(identity, "session_parts", recorded)

    def _wrap(self, part: identity.Part) -> identity.Part:
        def run_(conn: sqlite3.Connection) -> CheckResult:
            with self.changed:
                self.seen.append(threading.current_thread().name)
                self.changed.notify_all()
            return part(conn)
        return run_

    def wait_for(self, count: int, thread: str | None = None) -> None:
        with self.changed:
            assert self.changed.wait_for(
                lambda: len([n for n in self.seen if thread is None or n == thread]) >= count, BOUND), self.seen


def _on_one_connection(db: Path) -> dict:
    conn = opening.open_read_only(db, _db.read_plan(db))
    try:
        conn.execute("BEGIN")
        result = CheckResult("identity_graph", dict(CHECKS)["identity_graph"])
        identity.check_identity_graph(conn, result, None)
        return result.to_json()
    finally:
        conn.close()


def _sql_parts_run(db: Path) -> int:
    """How many of the section's parts need their SQL on ``db``: those its pages do not show
    to hold (pages/graph.py)."""
    conn = opening.open_read_only(db, _db.read_plan(db))
    pages_file = _pages.PageFile(db)
    try:
        conn.execute("BEGIN")
        graph = identity_pages.read_graph(pages_file, conn)
        assert graph is not None
        return [identity.held_part(graph, i) for i in range(4)].count(None)
    finally:
        pages_file.close()
        conn.close()


# Findings of the damaged copy, from three of the parts, in the section's order.
CODES = ["item_without_model_call", "tool_call_item_unrecorded", "tool_response_item_unrecorded",
         "turn_in_many_traces", "mcp_call_without_tool_call", "security_event_unjoined"]


def test_beside_the_page_check_the_section_is_the_one_a_single_connection_gives(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    parts = Parts(monkeypatch)
    expected = _sql_parts_run(damaged)
    assert expected >= 3   # the damage breaks at least three parts
    # The checks' own thread holds in its body archive step until every part has started:
    # the workers take every part.
    real_archive = run.check_body_archive

    def busy(*args: object) -> object:
        parts.wait_for(expected)
        return real_archive(*args)

    monkeypatch.setattr(run, "check_body_archive", busy)
    report = check_ledger(damaged, page_threads=2)
    assert report.checks["pages"].counts["method"] == "per_table"
    assert len(parts.seen) == expected and all(n.startswith("capsem-check-") for n in parts.seen), parts.seen
    section = report.checks["identity_graph"].to_json()
    assert section == alone
    assert [f["code"] for f in section["findings"] if f["severity"] != "info"] == CODES


def test_parts_no_worker_has_taken_yet_run_on_the_checks_connection_instead_of_waiting(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    expected = _sql_parts_run(damaged)
    parts = Parts(monkeypatch)
    # The one worker is held before it takes any step until the checks' thread has run every
    # part: held inside a step, it could hold one the checks' thread needs, and a worker that
    # started first could have taken parts already.
    real = steps.Scheduler._work
    me = threading.current_thread().name

    def held(self: steps.Scheduler, conn: sqlite3.Connection) -> None:
        parts.wait_for(expected, me)
        real(self, conn)

    monkeypatch.setattr(steps.Scheduler, "_work", held)
    report = check_ledger(damaged, page_threads=1)
    assert report.checks["pages"].counts["method"] == "per_table"
    assert parts.seen == [me] * expected
    assert report.checks["identity_graph"].to_json() == alone


def test_with_a_wal_holding_pages_the_section_runs_on_the_checks_connection(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    writer = sqlite3.connect(damaged, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE net_events SET domain = domain WHERE id = (SELECT MAX(id) FROM net_events)")
    try:
        assert Path(f"{damaged}-wal").stat().st_size > 0
        parts = Parts(monkeypatch)
        report = check_ledger(damaged)
        assert report.checks["pages"].counts["method"] == "whole_file"
        assert parts.seen and set(parts.seen) == {threading.current_thread().name}
        assert report.checks["identity_graph"].to_json() == alone
    finally:
        writer.close()


def test_a_part_that_fails_on_a_worker_fails_the_check_naming_the_file(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def locked(conn: sqlite3.Connection, result: CheckResult) -> None:
        raise sqlite3.OperationalError("database is locked")

    # The damaged part's SQL runs (its pages do not hold), on a worker, and fails.
    monkeypatch.setattr(identity, "check_model_items", locked)
    with pytest.raises(LedgerError) as exc:
        check_ledger(damaged)
    assert str(damaged) in str(exc.value) and "locked" in str(exc.value)


def test_the_graph_takes_event_body_blobs_from_the_body_index_pass_and_decides_the_same(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    scanned: list[str] = []
    joined: list[bool] = []
    real_scan, real_join = identity_pages._scan_tables, run.join_blobs

    def scan(pages, conn, graph, roots, tables):  # type: ignore[no-untyped-def]
        scanned.extend(table for table, _names in tables)
        return real_scan(pages, conn, graph, roots, tables)

    def join(pages, conn, graph, blobs):  # type: ignore[no-untyped-def]
        got = real_join(pages, conn, graph, blobs)
        joined.append(got is not None and blobs.rows is not None and identity_pages.BLOBS in got.tables)
        return got

    monkeypatch.setattr(identity_pages, "_scan_tables", scan)
    monkeypatch.setattr(run, "join_blobs", join)
    section = check_ledger(damaged).checks["identity_graph"].to_json()
    # The pass's own arrays, joined in: event_body_blobs is not scanned a second time.
    assert joined == [True] and scanned and identity_pages.BLOBS not in scanned
    assert section == alone


def test_the_graph_scans_event_body_blobs_itself_where_the_body_index_pass_did_not_read_them(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    scanned: list[str] = []
    real_scan = identity_pages._scan_tables

    def scan(pages, conn, graph, roots, tables):  # type: ignore[no-untyped-def]
        scanned.extend(table for table, _names in tables)
        return real_scan(pages, conn, graph, roots, tables)

    monkeypatch.setattr(identity_pages, "_scan_tables", scan)
    # A pass that reads no columns for the graph (as the SQL scan of the index does).
    monkeypatch.setattr(run, "blobs_alongside", lambda graph: identity_pages.Alongside({}))
    section = check_ledger(damaged).checks["identity_graph"].to_json()
    assert scanned.count(identity_pages.BLOBS) == 1 and section == alone


def test_a_check_that_fails_before_its_body_archive_step_ends_with_that_failure(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(*_args: object) -> None:
        raise LedgerError("cannot count the tables", damaged)

    monkeypatch.setattr(sql_checks, "check_tables", unreadable)
    before = threading.active_count()
    # The identity graph's scan may be running on a worker by then: it is joined, not left.
    with pytest.raises(LedgerError, match="cannot count the tables"):
        check_ledger(damaged, page_threads=2)
    assert threading.active_count() == before


def test_a_check_interrupted_in_its_own_steps_stops_the_workers_and_raises_the_interrupt(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sql_checks, "check_fs_overflow", interrupted)
    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        check_ledger(damaged, page_threads=2)
    assert threading.active_count() == before


def test_a_small_ledger_runs_every_parts_sql_beside_the_page_check(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    monkeypatch.setattr(identity_pages, "MIN_BYTES", damaged.stat().st_size + 1)
    scanned: list[int] = []
    real = identity_pages.read_graph
    monkeypatch.setattr(run, "read_graph", lambda *a: scanned.append(1) or real(*a))
    parts = Parts(monkeypatch)
    report = check_ledger(damaged, page_threads=2)
    assert report.checks["pages"].counts["method"] == "per_table"
    assert not scanned and len(parts.seen) == len(identity.session_parts(None))
    assert report.checks["identity_graph"].to_json() == alone
