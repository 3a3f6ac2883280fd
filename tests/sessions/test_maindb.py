"""Capsem's own main.db (v7 DDL, WAL, un-checkpointed rows) read and rolled up in place."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from capsem_core import cli
from capsem_core import sessions as S
from capsem_core.sample import write_sample_home
from tests.sessions.test_sessions import MODELS, TOOLS, write_ledger

# Transcribed from ../shared/reference/capsem-main-db-v7.md (beside the checkout) (Capsem's session_index.rs).
CAPSEM_V7_DDL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, mode TEXT NOT NULL, command TEXT, status TEXT NOT NULL DEFAULT 'running',
    created_at TEXT NOT NULL, stopped_at TEXT, scratch_disk_size_gb INTEGER NOT NULL DEFAULT 16,
    ram_bytes INTEGER NOT NULL DEFAULT 4294967296, total_requests INTEGER NOT NULL DEFAULT 0,
    allowed_requests INTEGER NOT NULL DEFAULT 0, denied_requests INTEGER NOT NULL DEFAULT 0,
    total_input_tokens INTEGER NOT NULL DEFAULT 0, total_output_tokens INTEGER NOT NULL DEFAULT 0,
    total_estimated_cost REAL NOT NULL DEFAULT 0.0, total_tool_calls INTEGER NOT NULL DEFAULT 0,
    total_file_events INTEGER NOT NULL DEFAULT 0, compressed_size_bytes INTEGER, vacuumed_at TEXT,
    storage_mode TEXT NOT NULL DEFAULT 'block', rootfs_hash TEXT, rootfs_version TEXT, forked_from TEXT,
    persistent BOOLEAN NOT NULL DEFAULT 0, exec_count INTEGER NOT NULL DEFAULT 0,
    audit_event_count INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS idx_sessions_created ON sessions(created_at);
CREATE INDEX IF NOT EXISTS idx_sessions_status ON sessions(status);
CREATE TABLE IF NOT EXISTS ai_usage (session_id TEXT NOT NULL, provider TEXT NOT NULL,
    call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, estimated_cost REAL NOT NULL DEFAULT 0.0,
    total_duration_ms INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, provider));
CREATE TABLE IF NOT EXISTS tool_usage (session_id TEXT NOT NULL, tool_name TEXT NOT NULL,
    call_count INTEGER NOT NULL DEFAULT 0, total_bytes INTEGER NOT NULL DEFAULT 0,
    total_duration_ms INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, tool_name));
CREATE TABLE IF NOT EXISTS mcp_usage (session_id TEXT NOT NULL, tool_name TEXT NOT NULL,
    server_name TEXT NOT NULL, call_count INTEGER NOT NULL DEFAULT 0, total_bytes INTEGER NOT NULL DEFAULT 0,
    total_duration_ms INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, tool_name));
"""
# (column, declared type, NOT NULL, default) in Capsem's order.
CAPSEM_V7_SESSIONS = [
    ("id", "TEXT", 0, None), ("mode", "TEXT", 1, None), ("command", "TEXT", 0, None),
    ("status", "TEXT", 1, "'running'"), ("created_at", "TEXT", 1, None), ("stopped_at", "TEXT", 0, None),
    ("scratch_disk_size_gb", "INTEGER", 1, "16"), ("ram_bytes", "INTEGER", 1, "4294967296"),
    ("total_requests", "INTEGER", 1, "0"), ("allowed_requests", "INTEGER", 1, "0"),
    ("denied_requests", "INTEGER", 1, "0"), ("total_input_tokens", "INTEGER", 1, "0"),
    ("total_output_tokens", "INTEGER", 1, "0"), ("total_estimated_cost", "REAL", 1, "0.0"),
    ("total_tool_calls", "INTEGER", 1, "0"), ("total_file_events", "INTEGER", 1, "0"),
    ("compressed_size_bytes", "INTEGER", 0, None), ("vacuumed_at", "TEXT", 0, None),
    ("storage_mode", "TEXT", 1, "'block'"), ("rootfs_hash", "TEXT", 0, None), ("rootfs_version", "TEXT", 0, None),
    ("forked_from", "TEXT", 0, None), ("persistent", "BOOLEAN", 1, "0"), ("exec_count", "INTEGER", 1, "0"),
    ("audit_event_count", "INTEGER", 1, "0"),
]
CAPSEM_V7_USAGE = {
    "ai_usage": [("session_id", "TEXT", 1, None), ("provider", "TEXT", 1, None), ("call_count", "INTEGER", 1, "0"),
                 ("input_tokens", "INTEGER", 1, "0"), ("output_tokens", "INTEGER", 1, "0"),
                 ("estimated_cost", "REAL", 1, "0.0"), ("total_duration_ms", "INTEGER", 1, "0")],
    "tool_usage": [("session_id", "TEXT", 1, None), ("tool_name", "TEXT", 1, None),
                   ("call_count", "INTEGER", 1, "0"), ("total_bytes", "INTEGER", 1, "0"),
                   ("total_duration_ms", "INTEGER", 1, "0")],
    "mcp_usage": [("session_id", "TEXT", 1, None), ("tool_name", "TEXT", 1, None),
                  ("server_name", "TEXT", 1, None), ("call_count", "INTEGER", 1, "0"),
                  ("total_bytes", "INTEGER", 1, "0"), ("total_duration_ms", "INTEGER", 1, "0")],
}


def schema_of(path: Path) -> tuple[object, ...]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return (conn.execute("PRAGMA user_version").fetchone()[0],
                conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall())
    finally:
        conn.close()


def usage_of(path: Path) -> list[list[tuple[object, ...]]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("ai_usage", "tool_usage", "mcp_usage")]
    finally:
        conn.close()


def capsem_formulas(ledger: Path) -> dict[str, object]:
    """Capsem's record_session_stop figures, computed here independently with plain SQL."""
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    q = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    try:
        return {
            "total_requests": q("SELECT COUNT(*) FROM net_events"),
            "allowed_requests": q("SELECT COUNT(*) FROM net_events WHERE decision = 'allowed'"),
            "denied_requests": q("SELECT COUNT(*) FROM net_events WHERE decision = 'denied'"),
            "total_input_tokens": q("SELECT COALESCE(SUM(input_tokens), 0) FROM model_calls"),
            "total_output_tokens": q("SELECT COALESCE(SUM(output_tokens), 0) FROM model_calls"),
            "total_estimated_cost": q("SELECT COALESCE(SUM(estimated_cost_usd), 0.0) FROM model_calls"),
            "total_tool_calls": q("SELECT COUNT(*) FROM tool_calls"),
            "total_file_events": q("SELECT COUNT(*) FROM fs_events"),
            "exec_count": q("SELECT COUNT(*) FROM exec_events"),
            "audit_event_count": q("SELECT COUNT(*) FROM audit_events"),
        }
    finally:
        conn.close()


def make_capsem_home(root: Path) -> tuple[S.Home, sqlite3.Connection]:
    """A home whose main.db Capsem made: v7 DDL, WAL, rows still in main.db-wal (the returned
    connection keeps it un-checkpointed until closed)."""
    layout = S.home_layout(root)
    layout.main_db.parent.mkdir(parents=True)
    conn = sqlite3.connect(layout.main_db, isolation_level=None)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.executescript(CAPSEM_V7_DDL)
    conn.execute("PRAGMA user_version = 7")
    conn.execute("INSERT INTO sessions (id, mode, command, created_at) VALUES "
                 "('eph-1', 'cli', 'claude', '2026-03-01T10:00:00Z')")
    conn.execute("INSERT INTO sessions (id, mode, created_at, persistent, status, stopped_at) VALUES "
                 "('vm-abc', 'gui', '2026-02-01T10:00:00Z', 1, 'stopped', '2026-02-01T10:30:00Z')")
    conn.execute("INSERT INTO ai_usage VALUES ('vm-abc', 'anthropic', 3, 10, 20, 0.5, 99)")
    conn.execute("INSERT INTO mcp_usage VALUES ('vm-abc', 'snapshot', 'fs', 1, 2, 3)")
    write_ledger(layout.sessions_root / "eph-1", net=["allowed", "denied", "allowed", "error"], models=MODELS,
                 tools=TOOLS, files=["created", "overflow", "deleted"])
    write_ledger(layout.persistent_root / "vm-abc", net=["allowed"])
    return layout, conn


@pytest.fixture
def capsem_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S.Home]:
    layout, conn = make_capsem_home(tmp_path / "capsem")
    monkeypatch.setenv("CAPSEM_HOME", str(layout.home))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    yield layout
    conn.close()


def test_capsems_wal_main_db_with_un_checkpointed_rows_lists_and_checks(
        capsem_home: S.Home, capsys: pytest.CaptureFixture[str]) -> None:
    wal = capsem_home.main_db.with_name("main.db-wal")
    assert wal.stat().st_size > 0
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("eph-1 ") and "*" in out[2]
    assert out[3].startswith("vm-abc ") and out[3].endswith("  vm-abc")  # the name is its directory
    for argv in (["check"], ["check", "eph-1"], ["check", "vm-abc"]):
        assert cli.main(argv) == 0, argv
        text = capsys.readouterr().out
        assert "Recent sessions:" in text
    assert cli.main(["check", "--list"]) == 0
    assert "eph-1" in capsys.readouterr().out


def test_rollup_on_capsems_main_db_writes_capsems_formulas_and_nothing_else(
        capsem_home: S.Home, capsys: pytest.CaptureFixture[str]) -> None:
    schema, usage = schema_of(capsem_home.main_db), usage_of(capsem_home.main_db)
    before = sqlite3.connect(capsem_home.main_db).execute("SELECT * FROM sessions ORDER BY id").fetchall()
    assert cli.main(["rollup", "eph-1"]) == 0
    capsys.readouterr()
    want = capsem_formulas(capsem_home.sessions_root / "eph-1" / S.SESSION_DB)
    conn = sqlite3.connect(capsem_home.main_db)
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM sessions WHERE id = 'eph-1'").fetchone())
    other = conn.execute("SELECT * FROM sessions WHERE id = 'vm-abc'").fetchone()
    conn.close()
    assert {k: row[k] for k in want} == pytest.approx(want)
    assert want["total_file_events"] == 3 and want["total_requests"] == 4  # overflow row counted
    old = dict(zip(row, before[0]))
    assert {k: v for k, v in row.items() if k not in want} == {k: v for k, v in old.items() if k not in want}
    assert tuple(other) == before[1]
    assert schema_of(capsem_home.main_db) == schema and usage_of(capsem_home.main_db) == usage


def test_a_sample_home_main_db_matches_capsems_ddl_column_by_column(tmp_path: Path) -> None:
    home = write_sample_home(tmp_path / "home", seed=2, sessions=3, bodies=20)
    ref = tmp_path / "ref.db"
    conn = sqlite3.connect(ref)
    conn.executescript(CAPSEM_V7_DDL)
    conn.close()
    conn = sqlite3.connect(f"file:{home.main_db}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        got = [tuple(r[1:5]) for r in conn.execute("PRAGMA table_info(sessions)")]
        assert got == CAPSEM_V7_SESSIONS
        for table, cols in CAPSEM_V7_USAGE.items():
            assert [tuple(r[1:5]) for r in conn.execute(f"PRAGMA table_info({table})")] == cols
        objects = conn.execute("SELECT type, name, tbl_name FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()
    rconn = sqlite3.connect(ref)
    assert objects == rconn.execute("SELECT type, name, tbl_name FROM sqlite_master ORDER BY name").fetchall()
    rconn.close()
    assert [n for _, n, _ in objects if n.startswith("idx_")] == ["idx_sessions_created", "idx_sessions_status"]


# --- refusing to write ---------------------------------------------------------------------

_ROLLUP_SCRIPT = """
import argparse, sys
from capsem_core.cli import rollup as rollup_command
from capsem_core.errors import LedgerError
p = argparse.ArgumentParser(); rollup_command.add_arguments(p)
try:
    sys.exit(rollup_command.run(p.parse_args(sys.argv[1:])))
except LedgerError as exc:
    print(f"capsem-ledger rollup: {exc}", file=sys.stderr); sys.exit(1)
"""
_SRC = Path(__file__).resolve().parents[2] / "src"


def _unprivileged_python() -> list[str]:
    if os.geteuid() != 0:
        return [sys.executable]
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and setpriv is missing: root would bypass the permissions under test")
    for python in (sys.executable, "/usr/bin/python3"):
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python]
        # It must reach this checkout too (a checkout in a 0700 directory is out of its reach).
        probe = subprocess.run([*cmd, "-c", "import capsem_core.sessions"], capture_output=True,
                               env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(_SRC)})
        if probe.returncode == 0:
            return cmd
    pytest.skip("no Python interpreter that uid 65534 may run can import capsem_core from this checkout")


@pytest.mark.parametrize("what", ["file 444", "directory 555"])
def test_rollup_on_a_read_only_main_db_refuses_in_one_line_and_changes_nothing(what: str) -> None:
    python = _unprivileged_python()
    root = Path(tempfile.mkdtemp(prefix="capsem-ro-"))
    try:
        layout, conn = make_capsem_home(root / "capsem")
        conn.close()  # checkpointed: only main.db is left to protect
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        target = layout.main_db if what == "file 444" else layout.main_db.parent
        target.chmod(0o444 if what == "file 444" else 0o555)
        before = layout.main_db.read_bytes()
        listing = sorted(os.listdir(layout.main_db.parent))
        env = {"PATH": "/usr/bin:/bin", "CAPSEM_HOME": str(layout.home), "PYTHONPATH": str(_SRC)}
        proc = subprocess.run([*python, "-c", _ROLLUP_SCRIPT, "eph-1"], capture_output=True, text=True, env=env)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "main.db" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stdout == ""
        assert layout.main_db.read_bytes() == before
        assert sorted(os.listdir(layout.main_db.parent)) == listing
    finally:
        for p in [root, *root.rglob("*")]:
            if p.is_dir():
                p.chmod(stat.S_IRWXU)
        shutil.rmtree(root)


def test_rollup_with_a_fifo_as_main_db_journal_refuses_in_one_line_and_never_waits(tmp_path: Path) -> None:
    """SQLite's hot-journal test opened a FIFO main.db-journal and waited for a writer for
    ever, deaf to SIGTERM (it retries an interrupted open): rollup, list and check --all hung."""
    layout, conn = make_capsem_home(tmp_path / "capsem")
    conn.close()
    journal = Path(f"{layout.main_db}-journal")
    os.mkfifo(journal)
    before = layout.main_db.read_bytes()
    env = {"PATH": "/usr/bin:/bin", "CAPSEM_HOME": str(layout.home), "PYTHONPATH": str(_SRC)}
    # The timeout only guards against the hang this test is about.
    proc = subprocess.run([sys.executable, "-c", _ROLLUP_SCRIPT, "eph-1"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"capsem-ledger rollup: {journal}: not a regular file: a -journal beside a database must be one\n"
    assert layout.main_db.read_bytes() == before and stat.S_ISFIFO(os.lstat(journal).st_mode)


def test_rollup_of_an_id_main_db_does_not_record_refuses_naming_main_db(
        capsem_home: S.Home, capsys: pytest.CaptureFixture[str]) -> None:
    schema = schema_of(capsem_home.main_db)
    (capsem_home.sessions_root / "ghost").mkdir()
    shutil.copy(capsem_home.sessions_root / "eph-1" / S.SESSION_DB, capsem_home.sessions_root / "ghost")
    with pytest.raises(Exception) as err:
        S.rollup(capsem_home.main_db, "ghost", capsem_home.sessions_root / "ghost" / S.SESSION_DB)
    assert "not registered" in str(err.value) and str(capsem_home.main_db) in str(err.value)
    assert schema_of(capsem_home.main_db) == schema


def test_no_v8_only_column_is_created_anywhere(tmp_path: Path) -> None:
    home = write_sample_home(tmp_path / "home", seed=1, sessions=2, bodies=10)
    S.register_session(home.main_db, "extra-1", name="named-vm")
    conn = sqlite3.connect(home.main_db)
    cols = {r[1] for t in ("sessions", "ai_usage", "tool_usage", "mcp_usage")
            for r in conn.execute(f"PRAGMA table_info({t})")}
    conn.close()
    assert not cols & {"name", "total_mcp_calls", "rolled_up_at", "model", "calls", "origin", "distinct_tools"}
