"""main.db, session identity and rollup (capsem_core.sessions), on real SQLite files."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pytest

from capsem_core import sessions as S
from capsem_core.cli import rollup as rollup_command
from capsem_core.errors import LedgerError, SchemaMismatch, SymlinkRefused
from capsem_core.format import pack_file_header
from capsem_core.schema import create_schema

# --- helpers (test_list.py and test_maindb.py import these) ------------------------------

NetRow = str  # decision
ModelRow = tuple[str, str | None, int | None, int | None, float | None]  # provider, model, in, out, cost
ToolRow = tuple[str, str, str | None, str, str]  # tool_name, origin, server_name, decision, status


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> S.Home:
    """A fresh CAPSEM_HOME in tmp_path, with the environment pointing at it."""
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "capsem"))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return S.home_layout()


def write_ledger(directory: Path, *, net: Iterable[NetRow] = (), models: Iterable[ModelRow] = (),
                 tools: Iterable[ToolRow] = (), files: Iterable[str] = (), bodies: bool = True) -> Path:
    """A v2 session.db with the given rows (and an empty session.bodies beside it)."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / S.SESSION_DB
    conn = sqlite3.connect(db)
    try:
        create_schema(conn)
        add_rows(conn, net=net, models=models, tools=tools, files=files)
    finally:
        conn.close()
    if bodies:
        (directory / S.SESSION_BODIES).write_bytes(pack_file_header())
    return db


def add_rows(conn: sqlite3.Connection, *, net: Iterable[NetRow] = (), models: Iterable[ModelRow] = (),
             tools: Iterable[ToolRow] = (), files: Iterable[str] = ()) -> None:
    ts = "2026-03-27T15:44:18Z"
    with conn:
        conn.executemany("INSERT INTO net_events (timestamp, domain, decision) VALUES (?, 'api.anthropic.com', ?)",
                         ((ts, d) for d in net))
        conn.executemany(
            "INSERT INTO model_calls (timestamp, provider, model, method, path, input_tokens, output_tokens, "
            "estimated_cost_usd, duration_ms) VALUES (?, ?, ?, 'POST', '/v1/messages', ?, ?, ?, 10)",
            ((ts, *m) for m in models))
        conn.executemany(
            "INSERT INTO tool_calls (timestamp, provider, call_index, call_id, tool_name, origin, server_name, "
            "decision, status, duration_ms, bytes_sent, bytes_received) "
            "VALUES (?, 'anthropic', ?, ?, ?, ?, ?, ?, ?, 5, 100, 200)",
            ((ts, i, f"toolu_{i}", *t) for i, t in enumerate(tools)))
        conn.executemany("INSERT INTO fs_events (timestamp, action, path, size) VALUES (?, ?, 'a.txt', 3)",
                         ((ts, a) for a in files))


def register(home: S.Home, session_id: str, created_at: str, *, name: str | None = None,
             status: str = "running", stopped_at: str | None = None) -> None:
    S.register_session(home.main_db, session_id, name=name, created_at=created_at)
    if status != "running" or stopped_at is not None:
        S.mark_session(home.main_db, session_id, status, stopped_at)


def old_main_db(path: Path, version: int = 7) -> None:
    """A main.db as an older Capsem build wrote it: no name column, no usage tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, mode TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'running',
            created_at TEXT NOT NULL, stopped_at TEXT, storage_mode TEXT NOT NULL DEFAULT 'block',
            total_requests INTEGER NOT NULL DEFAULT 0, allowed_requests INTEGER NOT NULL DEFAULT 0,
            denied_requests INTEGER NOT NULL DEFAULT 0, total_input_tokens INTEGER NOT NULL DEFAULT 0,
            total_output_tokens INTEGER NOT NULL DEFAULT 0, total_estimated_cost REAL NOT NULL DEFAULT 0.0,
            total_tool_calls INTEGER NOT NULL DEFAULT 0, total_file_events INTEGER NOT NULL DEFAULT 0);
        INSERT INTO sessions (id, mode, created_at) VALUES ('old-1', 'cli', '2025-01-01T00:00:00Z');
    """)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- paths ---------------------------------------------------------------------------------

def test_paths_default_to_dot_capsem_under_the_home_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    env: dict[str, str] = {}
    assert S.capsem_home(env) == Path("/home/someone/.capsem")
    assert S.run_dir(env) == Path("/home/someone/.capsem/run")
    assert S.main_db_path(env) == Path("/home/someone/.capsem/sessions/main.db")


def test_capsem_home_and_run_dir_follow_the_environment() -> None:
    env = {"CAPSEM_HOME": "/x/home", "CAPSEM_RUN_DIR": "/y/run"}
    assert S.capsem_home(env) == Path("/x/home")
    assert S.run_dir(env) == Path("/y/run")
    assert S.main_db_path(env) == Path("/x/home/sessions/main.db")
    assert S.run_dir({"CAPSEM_HOME": "/x/home"}) == Path("/x/home/run")


def test_an_explicit_home_is_self_contained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPSEM_RUN_DIR", "/somewhere/else")
    layout = S.home_layout(tmp_path)
    assert layout.run == tmp_path / "run"
    assert layout.main_db == tmp_path / "sessions" / "main.db"
    assert layout.persistent_root == tmp_path / "run" / "persistent"


# --- main.db -------------------------------------------------------------------------------

def test_create_main_db_writes_capsems_layout_and_nothing_of_ours(home: S.Home) -> None:
    S.create_main_db(home.main_db)
    conn = sqlite3.connect(home.main_db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = {r[1]: (r[2], r[3], r[4]) for r in conn.execute("PRAGMA table_info(sessions)")}
    assert tuple(cols) == S.SESSION_COLUMNS and len(cols) == 25
    assert cols["status"] == ("TEXT", 1, "'running'")
    assert cols["storage_mode"] == ("TEXT", 1, "'block'")
    assert cols["total_estimated_cost"] == ("REAL", 1, "0.0")
    for ours in ("name", "total_mcp_calls", "rolled_up_at"):
        assert ours not in cols
    indexed = {r[0] for r in conn.execute("SELECT name FROM pragma_index_list('sessions') WHERE origin = 'c'")}
    assert indexed == {"idx_sessions_created", "idx_sessions_status"}
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"sessions", "ai_usage", "tool_usage", "mcp_usage"}
    conn.close()


def test_the_ddl_in_docs_is_the_ddl_the_code_runs() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "sessions.md").read_text()
    for statement in S.MAIN_DB_DDL:
        first_line = statement.splitlines()[0]
        assert first_line in docs, first_line
    assert f"user_version = {S.MAIN_DB_VERSION}" in docs


def test_create_main_db_is_idempotent_and_keeps_rows(home: S.Home) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    S.create_main_db(home.main_db)
    assert [r.id for r in S.recent_sessions(home.main_db)] == ["s1"]


@pytest.mark.parametrize("version", [0, 3, 7, 8])
def test_a_main_db_of_any_user_version_with_the_doctors_columns_is_read_and_left_alone(
        home: S.Home, version: int) -> None:
    old_main_db(home.main_db, version)
    conn = sqlite3.connect(home.main_db)
    schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    conn.close()
    S.create_main_db(home.main_db)
    S.register_session(home.main_db, "s2", created_at="2025-02-01T00:00:00Z")
    S.mark_session(home.main_db, "s2", "stopped", "2025-02-01T00:01:00Z")
    assert [r.id for r in S.recent_sessions(home.main_db)] == ["s2", "old-1"]
    assert S.resolve_session(None, home=home, require_db=False).id == "s2"
    assert [i.row.id for i in S.list_sessions(S.ListFilter(), home=home)] == ["s2", "old-1"]
    conn = sqlite3.connect(home.main_db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == version
    assert conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall() == schema
    conn.close()


@pytest.mark.parametrize("column", ["total_file_events", "created_at"])
def test_a_main_db_lacking_a_doctor_column_is_refused_in_one_line_naming_it(home: S.Home, column: str) -> None:
    old_main_db(home.main_db, 7)
    conn = sqlite3.connect(home.main_db)
    conn.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
    conn.commit()
    conn.close()
    for action in (lambda: S.open_main_db(home.main_db),
                   lambda: S.recent_sessions(home.main_db),
                   lambda: S.list_sessions(S.ListFilter(), home=home)):
        with pytest.raises(SchemaMismatch) as err:
            action()
        assert err.value.path == home.main_db
        assert column in str(err.value) and "\n" not in str(err.value)


def test_an_empty_file_is_not_a_main_db(home: S.Home) -> None:
    home.main_db.parent.mkdir(parents=True)
    home.main_db.write_bytes(b"")
    with pytest.raises(SchemaMismatch, match="no sessions table"):
        S.open_main_db(home.main_db)


def test_a_file_that_is_not_sqlite_is_refused_by_name(home: S.Home) -> None:
    home.main_db.parent.mkdir(parents=True)
    home.main_db.write_bytes(b"this is not a database, just some text" * 200)
    with pytest.raises(LedgerError) as err:
        S.open_main_db(home.main_db)
    assert err.value.path == home.main_db


def test_register_refuses_a_duplicate_id_and_unsafe_words(home: S.Home) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    with pytest.raises(LedgerError, match="already registered"):
        S.register_session(home.main_db, "s1")
    with pytest.raises(LedgerError, match="refusing session id"):
        S.register_session(home.main_db, "../evil")
    with pytest.raises(LedgerError, match="refusing session name"):
        S.register_session(home.main_db, "s3", name="a/b")


def test_mark_session_records_status_and_stop_time(home: S.Home) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    S.mark_session(home.main_db, "s1", "crashed", "2026-01-01T00:05:00Z")
    (row,) = S.recent_sessions(home.main_db)
    assert (row.status, row.stopped_at) == ("crashed", "2026-01-01T00:05:00Z")
    S.mark_session(home.main_db, "s1", "stopped")
    (row,) = S.recent_sessions(home.main_db)
    assert row.status == "stopped" and row.stopped_at and row.stopped_at.endswith("Z")
    with pytest.raises(LedgerError, match="not registered"):
        S.mark_session(home.main_db, "nobody", "stopped")


def test_recent_sessions_are_newest_first_and_limited(home: S.Home) -> None:
    for i in range(7):
        register(home, f"s{i}", f"2026-01-0{i + 1}T00:00:00Z")
    rows = S.recent_sessions(home.main_db, 5)
    assert [r.id for r in rows] == ["s6", "s5", "s4", "s3", "s2"]
    assert rows[0].mode == "cli" and rows[0].status == "running" and rows[0].total_requests == 0


def test_recent_sessions_without_main_db_names_the_path(home: S.Home) -> None:
    with pytest.raises(LedgerError, match="main.db not found at"):
        S.recent_sessions(home.main_db)


def test_a_session_row_reads_null_and_junk_numbers_as_zero() -> None:
    row = S.SessionRow.from_tuple(("x", "cli", None, None, None, None, "12", None, 3.7, b"?", None,
                                   float("nan"), None, None))
    assert (row.total_requests, row.allowed_requests, row.denied_requests) == (0, 0, 3)
    assert (row.total_tokens, row.total_estimated_cost) == (0, 0.0)


# --- session identity ----------------------------------------------------------------------

def test_no_word_resolves_the_latest_session(home: S.Home) -> None:
    register(home, "old", "2026-01-01T00:00:00Z")
    register(home, "new", "2026-02-01T00:00:00Z")
    write_ledger(home.sessions_root / "new")
    ref = S.resolve_session(None)
    assert (ref.id, ref.kind, ref.directory, ref.has_ledger) == ("new", "ephemeral", home.sessions_root / "new", True)


def test_no_word_without_main_db_or_sessions_is_an_error(home: S.Home) -> None:
    with pytest.raises(LedgerError, match="main.db not found at"):
        S.resolve_session(None)
    S.create_main_db(home.main_db)
    with pytest.raises(LedgerError, match="No sessions found in main.db"):
        S.resolve_session(None)


def test_a_display_name_resolves_to_its_id_and_persistent_directory(home: S.Home) -> None:
    register(home, "vm-7f3a", "2026-01-01T00:00:00Z", name="co-work1")
    write_ledger(home.persistent_root / "co-work1")
    by_name = S.resolve_session("co-work1")
    by_id = S.resolve_session("vm-7f3a")
    for ref in (by_name, by_id):
        assert (ref.id, ref.name, ref.kind) == ("vm-7f3a", "co-work1", "persistent")
        assert ref.directory == home.persistent_root / "co-work1"
        assert ref.has_ledger and S.ledger_exists(ref)
    assert by_name.label == "co-work1 (vm-7f3a)"


def test_a_name_is_never_guessed_to_be_an_id(home: S.Home) -> None:
    # The persistent directory named after the *id* is not this VM's ledger.
    register(home, "vm-7f3a", "2026-01-01T00:00:00Z", name="co-work1")
    write_ledger(home.persistent_root / "vm-7f3a")
    write_ledger(home.sessions_root / "vm-7f3a")
    ref = S.resolve_session("vm-7f3a", require_db=False)
    assert ref.directory == home.persistent_root / "co-work1" and not ref.has_ledger
    with pytest.raises(LedgerError, match="session.db not found for vm-7f3a$") as err:
        S.resolve_session("vm-7f3a")
    assert err.value.path == home.persistent_root / "co-work1" / "session.db"   # where it was looked for


def test_an_id_wins_over_another_sessions_equal_display_name(home: S.Home) -> None:
    register(home, "alpha", "2026-01-01T00:00:00Z")
    register(home, "vm-2", "2026-01-02T00:00:00Z", name="alpha")
    write_ledger(home.sessions_root / "alpha")
    ref = S.resolve_session("alpha")
    assert (ref.id, ref.kind) == ("alpha", "ephemeral")


def test_a_reused_display_name_resolves_to_the_newest_session(home: S.Home) -> None:
    register(home, "vm-1", "2026-01-01T00:00:00Z", name="dev")
    register(home, "vm-2", "2026-03-01T00:00:00Z", name="dev")
    write_ledger(home.persistent_root / "dev")
    assert S.resolve_session("dev").id == "vm-2"


def test_directories_resolve_without_main_db(home: S.Home) -> None:
    write_ledger(home.sessions_root / "20260327-154418-f907")
    write_ledger(home.persistent_root / "code-vm1")
    eph = S.resolve_session("20260327-154418-f907")
    assert (eph.id, eph.name, eph.kind) == ("20260327-154418-f907", None, "ephemeral")
    per = S.resolve_session("code-vm1")
    assert (per.id, per.name, per.kind) == (None, "code-vm1", "persistent")


def test_an_unknown_word_is_session_db_not_found(home: S.Home) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    with pytest.raises(LedgerError) as err:
        S.resolve_session("nope")
    assert str(err.value) == (f"session.db not found for nope (main.db records no such session, and neither "
                              f"{home.sessions_root / 'nope'} nor {home.persistent_root / 'nope'} exists)")


@pytest.mark.parametrize("word", ["../x", "a/b", "..", ".", "", "/etc/passwd", "a\0b", "-rf", "x" * 129,
                                  "a\\b", ".hidden", "sp ace", "new\nline", "../../sessions/main.db"])
def test_the_resolver_refuses_words_that_could_escape_before_touching_the_filesystem(
        home: S.Home, monkeypatch: pytest.MonkeyPatch, word: str) -> None:
    def no_filesystem(*_args: object, **_kw: object) -> None:
        raise AssertionError("the resolver touched the filesystem")
    monkeypatch.setattr(os, "stat", no_filesystem)
    monkeypatch.setattr(os, "lstat", no_filesystem)
    monkeypatch.setattr(os, "scandir", no_filesystem)
    with pytest.raises(LedgerError, match="refusing session"):
        S.resolve_session(word)


def test_a_word_of_the_longest_allowed_length_is_accepted() -> None:
    assert S.session_word_problem("a" * S.MAX_SESSION_WORD) is None
    assert S.session_word_problem("20260327-154418-f907") is None
    assert S.session_word_problem("4b1c6a1e-8f0a-4e53-9d39-0b3f2a7c9e11") is None


def test_a_symlinked_session_directory_pointing_outside_is_refused(home: S.Home, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_ledger(outside)
    home.sessions_root.mkdir(parents=True)
    (home.sessions_root / "s1").symlink_to(outside)
    register(home, "s1", "2026-01-01T00:00:00Z")
    with pytest.raises(SymlinkRefused) as err:
        S.resolve_session("s1")
    assert err.value.path == home.sessions_root / "s1"
    (home.persistent_root).mkdir(parents=True)
    (home.persistent_root / "named").symlink_to(outside)
    with pytest.raises(SymlinkRefused):
        S.resolve_session("named")


def test_a_symlinked_session_db_is_refused_and_not_a_ledger(home: S.Home, tmp_path: Path) -> None:
    outside = write_ledger(tmp_path / "outside")
    d = home.sessions_root / "s1"
    d.mkdir(parents=True)
    (d / S.SESSION_DB).symlink_to(outside)
    (d / S.SESSION_BODIES).write_bytes(pack_file_header())
    register(home, "s1", "2026-01-01T00:00:00Z")
    with pytest.raises(SymlinkRefused):
        S.resolve_session("s1")
    ref = S.resolve_session("s1", require_db=False)
    assert not ref.has_ledger and not S.ledger_exists(ref)


def test_a_hostile_id_recorded_in_main_db_is_refused_naming_main_db(home: S.Home) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    conn = sqlite3.connect(home.main_db)
    conn.execute("UPDATE sessions SET id = '../../etc', created_at = '2027-01-01' WHERE id = 's1'")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="cannot name a directory") as err:
        S.resolve_session(None)
    assert err.value.path == home.main_db


def test_ledger_exists_needs_both_files_as_regular_files(home: S.Home) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    d = home.sessions_root / "s1"
    write_ledger(d, bodies=False)
    ref = S.resolve_session("s1")  # session.db alone is enough to resolve (check reports the rest)
    assert not ref.has_ledger and not S.ledger_exists(ref)
    (d / S.SESSION_BODIES).mkdir()
    assert not S.ledger_exists(ref)
    (d / S.SESSION_BODIES).rmdir()
    (d / S.SESSION_BODIES).write_bytes(pack_file_header())
    assert S.ledger_exists(ref)
    assert S.resolve_session("s1").has_ledger


# --- rollup --------------------------------------------------------------------------------

MODELS: list[ModelRow] = [("anthropic", "claude-sonnet-4", 100, 20, 0.25), ("anthropic", "claude-sonnet-4", 50, 5, 0.5),
                          ("openai", None, None, 7, None), ("google", "gemini-2.5", 10, None, 0.125)]
TOOLS: list[ToolRow] = [("read_file", "native", None, "allowed", "responded"),
                        ("read_file", "native", None, "allowed", "error"),
                        ("snapshot", "mcp", "fs-server", "allowed", "responded"),
                        ("http_get", "mcp", "web", "denied", "error"),
                        ("snapshot", "mcp", "fs-server", "allowed", "responded")]


def _ledger_for(home: S.Home, sid: str = "s1") -> Path:
    register(home, sid, "2026-01-01T00:00:00Z")
    return write_ledger(home.sessions_root / sid, net=["allowed", "allowed", "denied", "error"], models=MODELS,
                        tools=TOOLS, files=["created", "modified", "overflow", "deleted"])


def test_rollup_recomputes_every_total_from_the_ledger(home: S.Home) -> None:
    db = _ledger_for(home)
    totals = S.rollup(home.main_db, "s1", db)
    (row,) = S.recent_sessions(home.main_db)
    assert (row.total_requests, row.allowed_requests, row.denied_requests) == (4, 2, 1)
    assert (row.total_input_tokens, row.total_output_tokens) == (160, 32)
    assert row.total_estimated_cost == pytest.approx(0.875)
    # Capsem counts every fs_events row, the overflow marker included.
    assert (row.total_tool_calls, row.total_file_events) == (5, 4)
    assert totals.total_requests == 4 and totals.total_file_events == 4
    assert totals.mcp_calls == 3 and (totals.exec_count, totals.audit_event_count) == (0, 0)
    conn = sqlite3.connect(home.main_db)
    for table in ("ai_usage", "tool_usage", "mcp_usage"):
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0
    conn.close()


def test_rollup_overwrites_so_running_it_twice_gives_the_same_numbers(home: S.Home) -> None:
    db = _ledger_for(home)
    first = S.rollup(home.main_db, "s1", db)
    snapshot = S.recent_sessions(home.main_db)
    second = S.rollup(home.main_db, "s1", db)
    assert first == second
    assert S.recent_sessions(home.main_db) == snapshot


def test_rollup_after_the_ledger_changes_gives_the_new_totals(home: S.Home) -> None:
    db = _ledger_for(home)
    S.rollup(home.main_db, "s1", db)
    conn = sqlite3.connect(db)
    add_rows(conn, net=["denied"], models=[("ollama", "llama3", 1, 1, 0.0)])
    with conn:
        conn.execute("DELETE FROM tool_calls WHERE origin = 'mcp'")
        conn.execute("DELETE FROM fs_events")
    conn.close()
    totals = S.rollup(home.main_db, "s1", db)
    (row,) = S.recent_sessions(home.main_db)
    assert (row.total_requests, row.denied_requests, row.total_input_tokens) == (5, 2, 161)
    assert (row.total_tool_calls, row.total_file_events, totals.mcp_calls) == (2, 0, 0)


def test_rollup_of_one_session_leaves_the_others_alone(home: S.Home) -> None:
    db1 = _ledger_for(home, "s1")
    register(home, "s2", "2026-02-01T00:00:00Z")
    db2 = write_ledger(home.sessions_root / "s2", net=["allowed"], tools=[TOOLS[0]])
    S.rollup(home.main_db, "s1", db1)
    S.rollup(home.main_db, "s2", db2)
    S.rollup(home.main_db, "s1", db1)
    rows = {r.id: r for r in S.recent_sessions(home.main_db)}
    assert (rows["s1"].total_requests, rows["s2"].total_requests) == (4, 1)
    assert (rows["s1"].total_tool_calls, rows["s2"].total_tool_calls) == (5, 1)


@pytest.mark.parametrize("table", ["net_events", "model_calls", "tool_calls", "fs_events"])
def test_a_missing_ledger_table_is_an_error_naming_file_and_table_not_a_zero(home: S.Home, table: str) -> None:
    db = _ledger_for(home)
    S.rollup(home.main_db, "s1", db)
    conn = sqlite3.connect(db)
    conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaMismatch) as err:
        S.rollup(home.main_db, "s1", db)
    assert err.value.path == db and table in str(err.value)
    (row,) = S.recent_sessions(home.main_db)
    assert row.total_requests == 4  # the old totals stay; nothing was zeroed


def test_a_missing_ledger_column_is_an_error_naming_it(home: S.Home) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    d = home.sessions_root / "s1"
    d.mkdir(parents=True)
    conn = sqlite3.connect(d / S.SESSION_DB)
    conn.executescript("CREATE TABLE net_events (id INTEGER PRIMARY KEY, domain TEXT);"
                       "CREATE TABLE model_calls (id INTEGER PRIMARY KEY);")
    conn.close()
    with pytest.raises(SchemaMismatch, match="net_events lacks column.*decision"):
        S.rollup(home.main_db, "s1", d / S.SESSION_DB)


def test_rollup_of_a_missing_or_foreign_ledger_names_the_file(home: S.Home, tmp_path: Path) -> None:
    register(home, "s1", "2026-01-01T00:00:00Z")
    missing = tmp_path / "nowhere" / "session.db"
    with pytest.raises(LedgerError) as err:
        S.rollup(home.main_db, "s1", missing)
    assert err.value.path == missing
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(LedgerError) as err:
        S.rollup(home.main_db, "s1", junk)
    assert err.value.path == junk


def test_rollup_of_an_unregistered_session_writes_nothing(home: S.Home) -> None:
    db = _ledger_for(home)
    before = S.recent_sessions(home.main_db)
    with pytest.raises(LedgerError, match="not registered") as err:
        S.rollup(home.main_db, "ghost", db)
    assert err.value.path == home.main_db
    assert S.recent_sessions(home.main_db) == before


def test_rollup_opens_the_ledger_read_only(home: S.Home) -> None:
    db = _ledger_for(home)
    before = sha(db)
    S.rollup(home.main_db, "s1", db)
    assert sha(db) == before
    assert not (db.parent / "session.db-journal").exists()


def test_rollup_on_close_rolls_up_from_the_writers_db_path(home: S.Home) -> None:
    db = _ledger_for(home)

    class ClosedWriter:
        db_path = db

    S.rollup_on_close(home.main_db, "s1")(ClosedWriter())
    (row,) = S.recent_sessions(home.main_db)
    assert row.total_requests == 4


def test_a_real_ledger_writer_rolls_up_on_close(home: S.Home) -> None:
    writer_mod = pytest.importorskip("capsem_core.writer")
    LedgerWriter = getattr(writer_mod, "LedgerWriter", None)
    if LedgerWriter is None:
        pytest.skip("LedgerWriter has not landed yet")
    register(home, "s1", "2026-01-01T00:00:00Z")
    writer = LedgerWriter(home.sessions_root / "s1", on_close=S.rollup_on_close(home.main_db, "s1"))
    writer.insert("net_events", {"timestamp": "2026-01-01T00:00:01Z", "domain": "api.openai.com",
                                 "decision": "allowed"})
    writer.insert("model_calls", {"timestamp": "2026-01-01T00:00:01Z", "provider": "openai", "model": "gpt-4o",
                                  "method": "POST", "path": "/v1/chat/completions", "input_tokens": 11,
                                  "output_tokens": 4, "estimated_cost_usd": 0.01})
    writer.close()
    (row,) = S.recent_sessions(home.main_db)
    assert (row.total_requests, row.total_input_tokens, row.total_output_tokens) == (1, 11, 4)
    assert S.resolve_session("s1").has_ledger


# --- the rollup command --------------------------------------------------------------------

def _rollup_args(word: str | None, as_json: bool = False) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    rollup_command.add_arguments(parser)
    return parser.parse_args(([word] if word else []) + (["--json"] if as_json else []))


def test_the_rollup_command_resolves_a_name_and_prints_the_totals(home: S.Home) -> None:
    register(home, "vm-9", "2026-01-01T00:00:00Z", name="co-work1")
    write_ledger(home.persistent_root / "co-work1", net=["allowed", "denied"], models=MODELS[:1], tools=TOOLS[2:3])
    out = io.StringIO()
    assert rollup_command.run(_rollup_args("co-work1"), stdout=out) == 0
    text = out.getvalue()
    assert "Rolled up co-work1 (vm-9)" in text
    assert "requests     2 (1 allowed, 1 denied)" in text
    assert "tokens       100 in + 20 out" in text
    assert "tool calls   1 (1 mcp, counted from the ledger)" in text
    out = io.StringIO()
    assert rollup_command.run(_rollup_args(None, as_json=True), stdout=out) == 0
    obj = json.loads(out.getvalue())
    assert obj["session_id"] == "vm-9" and obj["name"] == "co-work1" and obj["total_requests"] == 2
    assert obj["mcp_calls"] == 1 and "usage" not in obj


def test_the_rollup_command_prints_no_control_characters_from_the_filesystem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = S.home_layout(tmp_path / "evil\x1b[2J\rhome")
    monkeypatch.setenv("CAPSEM_HOME", str(home.home))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    register(home, "s1", "2026-01-01T00:00:00Z")
    write_ledger(home.sessions_root / "s1", net=["allowed"])
    out = io.StringIO()
    assert rollup_command.run(_rollup_args("s1"), stdout=out) == 0
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    assert "evil\\x1b[2J\\x0dhome" in out.getvalue()


def test_the_rollup_command_refuses_a_persistent_vm_main_db_does_not_know(home: S.Home) -> None:
    S.create_main_db(home.main_db)
    write_ledger(home.persistent_root / "stray")
    with pytest.raises(LedgerError, match="not recorded in main.db"):
        rollup_command.run(_rollup_args("stray"))
