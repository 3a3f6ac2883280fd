"""The identity graph on the page check's workers: where their connections read the checks'
snapshot (no -wal holding pages) its session.db parts run there, beside the other checks (the
parts the mapped file's pages show to hold need no SQL; the others' SQL is queued there), and
the section is exactly the one a run on the checks' own connection gives; otherwise (a -wal
holding pages) it runs on the checks' connection. A part that fails fails the check."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from capsem_core import db as _db
from capsem_core._native import _pages
from capsem_core.check import check_ledger, identity, identity_pages, opening, pages, run, sql_checks
from capsem_core.check.report import CHECKS, CheckResult
from capsem_core.errors import LedgerError
from capsem_core.sample import write_sample_ledger
from tests.check.test_check import sql


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


def _threads_of_parts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = identity.session_parts

    def recorded(stopped: bool | None) -> list[identity.Part]:
        def wrap(part: identity.Part) -> identity.Part:
            def run(conn: sqlite3.Connection) -> CheckResult:
                seen.append(threading.current_thread().name)
                return part(conn)
            return run
        return [wrap(p) for p in real(stopped)]

    monkeypatch.setattr(identity, "session_parts", recorded)
    return seen


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
    to hold (identity_pages.py)."""
    conn = opening.open_read_only(db, _db.read_plan(db))
    pages_file = _pages.PageFile(db)
    try:
        conn.execute("BEGIN")
        return identity_pages.held_parts(identity_pages.read_graph(pages_file, conn)).count(None)
    finally:
        pages_file.close()
        conn.close()


def _slowed(monkeypatch: pytest.MonkeyPatch, module: object, name: str, seconds: float) -> None:
    """The first call of ``module.name`` takes ``seconds`` longer."""
    real = getattr(module, name)
    first = threading.Lock()

    def slow(*args: object, **kwargs: object) -> object:
        if first.acquire(blocking=False):
            time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, slow)


# Findings of the damaged copy, from three of the parts, in the section's order.
CODES = ["item_without_model_call", "tool_call_item_unrecorded", "tool_response_item_unrecorded",
         "turn_in_many_traces", "mcp_call_without_tool_call", "security_event_unjoined"]


def test_beside_the_page_check_the_section_is_the_one_a_single_connection_gives(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    seen = _threads_of_parts(monkeypatch)
    # A worker still busy when the parts are queued, and the main thread busier with its own
    # checks: held in its last one until every part has started, however long the workers
    # take on a loaded machine (the parts are queued only once the body archive's pass has
    # read event_body_blobs; a fixed pause raced them): the workers take every part.
    expected = _sql_parts_run(damaged)
    assert expected >= 3   # the damage breaks at least three parts
    _slowed(monkeypatch, pages, "quick_check_lines", 0.2)
    real_previews = sql_checks.check_previews

    def busy(*args: object) -> object:
        deadline = time.monotonic() + 60
        while len(seen) < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        return real_previews(*args)

    monkeypatch.setattr(sql_checks, "check_previews", busy)
    report = check_ledger(damaged, page_threads=2)
    assert report.checks["pages"].counts["method"] == "per_table"
    assert len(seen) == expected and all(n.startswith("capsem-page-check-") for n in seen), seen
    section = report.checks["identity_graph"].to_json()
    assert section == alone
    assert [f["code"] for f in section["findings"] if f["severity"] != "info"] == CODES


def test_parts_no_worker_has_taken_yet_run_on_the_checks_connection_instead_of_waiting(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    expected = _sql_parts_run(damaged)
    seen = _threads_of_parts(monkeypatch)
    # The one worker held in its first page job until the main thread has run every part.
    real = pages.quick_check_lines
    first = threading.Lock()

    def held(conn: sqlite3.Connection, table: str | None = None) -> list[str]:
        if first.acquire(blocking=False):
            deadline = time.monotonic() + 60
            while seen.count(threading.main_thread().name) < expected:
                assert time.monotonic() < deadline, seen
                time.sleep(0.01)
        return real(conn, table)

    monkeypatch.setattr(pages, "quick_check_lines", held)
    report = check_ledger(damaged, page_threads=1)
    assert report.checks["pages"].counts["method"] == "per_table"
    assert seen == [threading.main_thread().name] * expected
    assert report.checks["identity_graph"].to_json() == alone


def test_with_a_wal_holding_pages_the_section_runs_on_the_checks_connection(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    writer = sqlite3.connect(damaged, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE net_events SET domain = domain WHERE id = (SELECT MAX(id) FROM net_events)")
    try:
        assert Path(f"{damaged}-wal").stat().st_size > 0
        seen = _threads_of_parts(monkeypatch)
        report = check_ledger(damaged)
        assert report.checks["pages"].counts["method"] == "whole_file"
        assert seen and set(seen) == {threading.current_thread().name}
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
    given: list[object] = []
    real = identity_pages.read_graph

    def recorded(mapped, conn, graph=None, blobs=None):  # type: ignore[no-untyped-def]
        got = real(mapped, conn, graph, blobs)
        given.append(blobs is not None and blobs.rows is not None and got is not None
                     and got.tables[identity_pages.BLOBS].columns.keys() == blobs.columns.keys())
        return got

    monkeypatch.setattr(identity_pages, "read_graph", recorded)
    section = check_ledger(damaged).checks["identity_graph"].to_json()
    assert given == [True] and section == alone


def test_the_graph_refuses_the_body_index_pass_before_it_has_ended(damaged: Path) -> None:
    conn = opening.open_read_only(damaged, _db.read_plan(damaged))
    mapped = _pages.PageFile(damaged)
    try:
        conn.execute("BEGIN")
        graph = identity_pages.Graph()
        with pytest.raises(RuntimeError, match="has not ended"):   # the pass may still hold its codes
            identity_pages.read_graph(mapped, conn, graph, identity_pages.blobs_alongside(graph))
    finally:
        mapped.close()
        conn.close()


def test_a_check_that_fails_before_its_body_archive_step_does_not_leave_the_graph_waiting(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(*_args: object) -> None:
        time.sleep(0.5)   # the page map has walked the file: a worker takes the graph's job meanwhile
        raise LedgerError("cannot count the tables", damaged)

    monkeypatch.setattr(sql_checks, "check_tables", unreadable)
    outcome: list[BaseException] = []
    runner = threading.Thread(target=lambda: outcome.append(pytest.raises(LedgerError, check_ledger, damaged).value),
                              daemon=True)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "check waited for a pass that never ran"
    assert outcome and "cannot count the tables" in str(outcome[0])


def test_a_check_interrupted_before_it_holds_the_graph_does_not_leave_a_worker_waiting(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = run._IdentityBeside.start.__func__   # type: ignore[attr-defined]

    def interrupted(cls, page_check, route):  # type: ignore[no-untyped-def]
        real(cls, page_check, route)
        time.sleep(0.5)   # the walk ends and a worker takes the graph's job, which waits for the body pass
        raise KeyboardInterrupt   # before the check holds the job's handle: nothing will signal it

    monkeypatch.setattr(run._IdentityBeside, "start", classmethod(interrupted))
    outcome: list[BaseException] = []

    def checked() -> None:
        try:
            check_ledger(damaged)
        except BaseException as exc:   # the interrupt, raised on this thread
            outcome.append(exc)

    runner = threading.Thread(target=checked, daemon=True)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "a worker kept waiting for a pass that never ran"
    assert outcome and isinstance(outcome[0], KeyboardInterrupt)


def test_a_small_ledger_runs_every_parts_sql_beside_the_page_check(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _on_one_connection(damaged)
    monkeypatch.setattr(identity_pages, "MIN_BYTES", damaged.stat().st_size + 1)
    scanned: list[int] = []
    real = identity_pages.read_graph
    monkeypatch.setattr(identity_pages, "read_graph", lambda *a: scanned.append(1) or real(*a))
    seen = _threads_of_parts(monkeypatch)
    report = check_ledger(damaged, page_threads=2)
    assert report.checks["pages"].counts["method"] == "per_table"
    assert not scanned and len(seen) == len(identity.session_parts(None))
    assert report.checks["identity_graph"].to_json() == alone


def test_a_part_queued_after_the_workers_ended_runs_on_the_callers_connection(damaged: Path) -> None:
    from capsem_core.check.pages import PageCheck

    plan = _db.read_plan(damaged)
    conn = opening.open_read_only(damaged, plan)
    try:
        conn.execute("BEGIN")
        check = PageCheck.start(damaged, plan, conn, CheckResult("pages", "Pages"), threads=1)
        try:
            check.wait()
            [handle] = check.run_beside([lambda c: (threading.current_thread().name, c)])
            name, used = handle.result(check, conn)
            assert name == threading.current_thread().name and used is conn
        finally:
            check.close()
    finally:
        conn.close()
