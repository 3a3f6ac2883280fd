"""capsem-ledger check: the report's SQL checks, its output, exit codes and target resolution.

Every ledger here is written by ``LedgerWriter`` into tmp_path and then damaged on disk or
through SQLite exactly the way the test names. Archive damage and --verify-bodies are in
test_check_archive.py; both files share the builders below.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core import check, cli, db, sessions
from capsem_core.check import check_ledger
from capsem_core.cli import app as cli_app
from capsem_core.cli.check_text import render_text
from capsem_core.errors import SymlinkRefused
from capsem_core.writer import Body, LedgerWriter

# --- builders (shared with test_check_archive.py) -------------------------------------------------

TRACE = "trace-0001"


def _bytes(seed: int, n: int) -> bytes:
    """Deterministic, only partly compressible bytes (so segments have real payloads)."""
    out = bytearray()
    x = seed * 2654435761 % 2**32 or 1
    while len(out) < n:
        x = (x * 1103515245 + 12345) % 2**31
        out += f"line {x % 9973} of body {seed}: {x:x}\n".encode()
    return bytes(out[:n])


def write_ledger(directory: Path, *, codec: str = "deflate", tool_pairs: int = 3,
                 second_block: bool = True) -> Path:
    """A sound ledger: provider traffic, model calls, matched tool calls, fs events, and bodies
    in two blocks (the first with three segments and a FINAL one). Returns session.db."""
    w = LedgerWriter(directory, codec=codec)
    for i in range(1, 3):
        w.insert("net_events", {"timestamp": f"2025-06-02T09:00:0{i}Z", "domain": "api.anthropic.com",
                                "decision": "allowed", "method": "POST", "path": "/v1/messages",
                                "status_code": 200, "trace_id": TRACE},
                 [Body("request", _bytes(i, 3000), "http.request"),
                  Body("response", _bytes(100 + i, 5000), "http.request")])
        w.insert("model_calls", {"id": i, "timestamp": f"2025-06-02T09:00:0{i}Z", "provider": "anthropic",
                                 "model": "claude-sonnet-4", "method": "POST", "path": "/v1/messages",
                                 "input_tokens": 100 * i, "output_tokens": 20 * i,
                                 "request_body_preview": '{"model": "claude-sonnet-4"}', "trace_id": TRACE},
                 [Body("request", _bytes(200 + i, 4000), "model.call"),
                  Body("response", _bytes(300 + i, 2500), "model.call")])
        w.flush()
    for i in range(1, tool_pairs + 1):
        call_id = f"toolu_{i:04d}"
        w.insert("tool_calls", {"timestamp": "2025-06-02T09:00:05Z", "model_call_id": 1, "provider": "anthropic",
                                "status": "responded", "call_index": i - 1, "call_id": call_id,
                                "tool_name": "read_file" if i % 2 else "bash", "origin": "native" if i < 3 else "mcp",
                                "decision": "allowed", "duration_ms": 10 * i, "trace_id": TRACE},
                 [Body("request", _bytes(400 + i, 600), "mcp.tool_call")])
        w.insert("tool_responses", {"model_call_id": 2, "call_id": call_id, "content_preview": "ok",
                                    "trace_id": TRACE})
        # The model-visible side of the same call and result (the identity graph's item ledger).
        for model_call_id, kind in ((1, "tool_call"), (2, "tool_response")):
            w.insert("model_items", {"model_call_id": model_call_id, "timestamp": "2025-06-02T09:00:05Z",
                                     "provider": "anthropic", "path": "/v1/messages",
                                     "trace_id": TRACE, "kind": kind, "item_index": i, "call_id": call_id,
                                     "content_hash": "blake3:" + f"{i:02x}{model_call_id:02x}" * 16})
    w.insert("fs_events", {"timestamp": "2025-06-02T09:00:06Z", "action": "modified", "path": "/workspace/a.py",
                           "size": 120})
    w.close()
    if second_block:
        # A new writer never continues a block it did not open: this body starts block two.
        w = LedgerWriter(directory, codec=codec)
        w.insert("net_events", {"timestamp": "2025-06-02T09:01:00Z", "domain": "pypi.org", "decision": "allowed",
                                "method": "GET", "path": "/simple/numpy/", "status_code": 200},
                 [Body("response", _bytes(500, 7000), "http.request")])
        w.close()
    return directory / "session.db"


def sql(db: Path, statement: str, params: tuple = ()) -> list[tuple]:
    """Run one statement on the ledger as a damaging hand would (no foreign keys)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return write_ledger(tmp_path / "sess-a")


# --- a sound ledger -------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", ["deflate", "zstd"])
def test_a_sound_ledger_passes_every_check_with_exit_0(tmp_path: Path, capsys, codec: str) -> None:
    db = write_ledger(tmp_path / f"s-{codec}", codec=codec)
    code, out, err = run_cli(capsys, "--db", str(db))
    assert code == 0, out + err
    assert err == ""
    for line in ("Session: s-" + codec, "  Ledger pages intact (quick_check)", "  All expected tables present",
                 "Event counts:", "Body archive:", "  12 bodies indexed in 2 blocks", "  Index and archive agree",
                 "  (--verify-bodies reads every body back through its hash)",
                 "  All 3 tool_calls have matching responses",
                 "  2 model_calls from 2 AI-provider net_events",
                 "  All 2 model_calls have model, tokens, and preview populated",
                 "  Tool origins: 2 native, 1 mcp (3 total)", "Tool usage:",
                 "net_events (3 total, showing last 3):", "Ledger sound."):
        assert line in out.splitlines(), line
    assert "\033[" not in out  # not a terminal: no colour


def test_the_report_has_the_doctors_sections_in_the_doctors_order(ledger: Path, capsys) -> None:
    _, out, _ = run_cli(capsys, "--db", str(ledger))
    marks = ["Ledger pages intact", "All expected tables present", "Event counts:", "Body archive:",
             "tool_calls have matching responses", "AI-provider net_events", "model_calls have model",
             "Tool origins:", "Tool usage:", "net_events (", "model_calls (", "tool_calls (", "tool_responses (",
             "fs_events ("]
    positions = [out.index(m) for m in marks]
    assert positions == sorted(positions)


def test_event_counts_show_every_expected_table_with_its_row_count(ledger: Path) -> None:
    report = check_ledger(ledger)
    counts = report.checks["tables"].tables["event_counts"].rows
    assert counts == [["net_events", 3], ["model_calls", 2], ["tool_calls", 3], ["tool_responses", 3],
                      ["fs_events", 1]]


def test_previews_show_the_last_n_rows_newest_first_with_long_cells_cut(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE fs_events SET path = ?", ("/" + "x" * 100,))
    code, out, _ = run_cli(capsys, "--db", str(ledger), "-n", "2")
    assert code == 0
    assert "net_events (3 total, showing last 2):" in out
    preview = check_ledger(ledger, rows=2).checks["previews"].tables["net_events"]
    assert preview.columns == list(check.PREVIEW_COLUMNS["net_events"])
    assert [r[0] for r in preview.rows] == [3, 2]
    assert "/" + "x" * 56 + "..." in out
    assert "x" * 60 not in out


@pytest.mark.parametrize(("rows", "error"), [(-1, ValueError), (1 << 63, ValueError), (2.0, TypeError),
                                             (True, TypeError)])
def test_a_row_count_sqlite_cannot_bind_is_refused_by_name(ledger: Path, rows: object, error: type) -> None:
    with pytest.raises(error, match="rows is an int from 0 to 2"):
        check_ledger(ledger, rows=rows)  # type: ignore[arg-type]
    assert check_ledger(ledger, rows=(1 << 63) - 1).checks["previews"].tables["net_events"].rows


def test_a_negative_row_count_is_a_usage_error_exit_2(ledger: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "--db", str(ledger), "-n", "-1"])
    assert exc.value.code == 2


# --- tool lifecycle -------------------------------------------------------------------------------

def test_a_tool_call_without_a_response_is_a_warning_and_exits_0(ledger: Path, capsys) -> None:
    # Still waiting: neither the tool ledger nor the model's item ledger holds a result yet.
    sql(ledger, "DELETE FROM tool_responses WHERE call_id = 'toolu_0002'")
    sql(ledger, "DELETE FROM model_items WHERE kind = 'tool_response' AND call_id = 'toolu_0002'")
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 0
    assert "  tool_calls without responses: 1/3" in out.splitlines()
    assert "Ledger sound, with warnings." in out
    code, _, _ = run_cli(capsys, "--db", str(ledger), "--strict")
    assert code == 1


def test_a_response_in_another_trace_does_not_answer_the_call(ledger: Path) -> None:
    sql(ledger, "UPDATE tool_responses SET trace_id = 'trace-other' WHERE call_id = 'toolu_0001'")
    lifecycle = check_ledger(ledger).checks["tool_lifecycle"]
    assert lifecycle.counts["calls_without_responses"] == 1
    assert lifecycle.counts["responses_without_calls"] == 1
    assert lifecycle.status == "fail"


def test_a_tool_response_without_its_call_is_damage_and_exits_1(ledger: Path, capsys) -> None:
    sql(ledger, "INSERT INTO tool_responses (model_call_id, call_id, trace_id) VALUES (2, 'toolu_ghost', ?)",
        (TRACE,))
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    assert "  tool_responses without calls: 1/4" in out.splitlines()
    assert "Ledger damaged." in out
    finding = check_ledger(ledger).checks["tool_lifecycle"].findings[0]
    assert (finding.code, finding.severity, finding.count) == ("responses_without_calls", "error", 1)


def test_a_tool_call_naming_a_missing_model_call_is_damage(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE tool_calls SET model_call_id = 99 WHERE call_id = 'toolu_0003'")
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    assert "  tool_calls naming a model call model_calls does not record: 1/3" in out.splitlines()


def test_a_tool_response_naming_a_missing_model_call_is_damage(ledger: Path) -> None:
    sql(ledger, "UPDATE tool_responses SET model_call_id = 42 WHERE call_id = 'toolu_0001'")
    lifecycle = check_ledger(ledger).checks["tool_lifecycle"]
    assert [f.message for f in lifecycle.findings] == [
        "tool_responses naming a model call model_calls does not record: 1/3"]


# --- provider correlation, NULLs, fs overflow ----------------------------------------------------

def test_provider_traffic_without_model_calls_says_stream_parsing_may_have_failed(ledger: Path, capsys) -> None:
    sql(ledger, "DELETE FROM tool_calls")
    sql(ledger, "DELETE FROM tool_responses")
    sql(ledger, "DELETE FROM model_items")
    sql(ledger, "DELETE FROM model_calls")
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 0
    assert ("  Found 2 AI-provider net_events but 0 model_calls -- stream parsing may have failed"
            in out.splitlines())


def test_null_critical_fields_are_counted_per_label(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE model_calls SET model = NULL WHERE id = 1")
    sql(ledger, "UPDATE model_calls SET input_tokens = NULL, output_tokens = NULL, request_body_preview = NULL")
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 0
    lines = out.splitlines()
    i = lines.index("  Data quality warnings:")
    assert lines[i + 1: i + 4] == ["    NULL model: 1/2", "    NULL tokens: 2/2",
                                   "    NULL request_body_preview: 2/2"]
    nulls = check_ledger(ledger).checks["null_fields"]
    assert nulls.status == "warn"
    assert nulls.counts["NULL model"] == 1
    code, _, _ = run_cli(capsys, "--db", str(ledger), "--strict")
    assert code == 1


def test_file_monitor_overflow_windows_are_reported_with_their_deferred_changes(ledger: Path, capsys) -> None:
    for size in (40, 2):
        sql(ledger, "INSERT INTO fs_events (timestamp, action, path, size) VALUES ('t', 'overflow', '', ?)", (size,))
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 0
    assert ("  File monitor held 42 changes over to a later scan in 2 overflowing windows "
            "(fs_events action 'overflow')") in out.splitlines()


# --- files that cannot be checked -----------------------------------------------------------------

def test_a_damaged_sqlite_page_ends_the_report_with_exit_1(ledger: Path, capsys) -> None:
    conn = sqlite3.connect(ledger)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_net_events_domain'").fetchone()[0]
    conn.close()
    with open(ledger, "r+b") as f:
        # Scribble over the index page's cell area: the b-tree no longer parses.
        f.seek((root - 1) * page_size + 8)
        f.write(b"\xff" * 64)
    code, out, err = run_cli(capsys, "--db", str(ledger))
    assert code == 1, out + err
    lines = out.splitlines()
    assert "  Ledger pages damaged (quick_check):" in lines
    assert "Body archive:" not in out
    report = check_ledger(ledger)
    assert report.checks["pages"].status == "fail"
    assert all(c.status == "skipped" for n, c in report.checks.items() if n != "pages")


def test_a_file_that_is_not_sqlite_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    bogus = tmp_path / "session.db"
    bogus.write_bytes(b"this is not a ledger\n" * 20)
    code, out, err = run_cli(capsys, "--db", str(bogus))
    assert code == 1
    assert out == ""
    assert err == f"capsem-ledger check: {bogus}: not a SQLite database (the file does not start with the SQLite header)\n"


@pytest.mark.parametrize("make", ["missing", "directory", "empty"])
def test_missing_or_unusable_paths_are_one_line_errors_naming_them(tmp_path: Path, capsys, make: str) -> None:
    target = tmp_path / "session.db"
    expected = {"missing": "no such file", "directory": "no such file",
                "empty": "empty file, not a session ledger"}[make]
    if make == "directory":
        # --db takes a ledger directory too: an empty one lacks its session.db.
        target.mkdir()
    elif make == "empty":
        target.write_bytes(b"")
    code, out, err = run_cli(capsys, "--db", str(target))
    if make == "directory":
        target = target / "session.db"
    assert (code, out) == (1, "")
    assert err == f"capsem-ledger check: {target}: {expected}\n"


@pytest.mark.parametrize("link", ["session directory", "session.db", "session.bodies"])
def test_db_through_a_symlink_is_refused_in_one_line_naming_the_link(ledger: Path, tmp_path: Path, capsys,
                                                                    link: str) -> None:
    real = ledger.parent
    linked = tmp_path / "linked"
    if link == "session directory":
        linked.symlink_to(real, target_is_directory=True)
        named = linked
    else:
        linked.mkdir()
        for name in ("session.db", "session.bodies"):
            if name == link:
                (linked / name).symlink_to(real / name)
            else:
                shutil.copyfile(real / name, linked / name)
        named = linked / link
    before = sorted(os.listdir(real))
    code, out, err = run_cli(capsys, "--db", str(linked / "session.db"), "--verify-bodies")
    assert (code, out) == (1, "")
    assert err == f"capsem-ledger check: {named}: refusing a {link} that is a symbolic link\n"
    if link != "session.bodies":   # the API reports a linked archive as a finding instead
        with pytest.raises(SymlinkRefused) as info:
            check_ledger(linked / "session.db")
        assert info.value.path == named
    assert sorted(os.listdir(real)) == before   # nothing opened: no -wal/-shm beside the target


def test_a_session_whose_archive_is_a_symlink_is_refused_in_one_line(ledger: Path, tmp_path: Path, monkeypatch,
                                                                     capsys) -> None:
    session = tmp_path / "home" / "run" / "sessions" / "0a1b2c3d4e5f"
    session.mkdir(parents=True)
    shutil.copyfile(ledger, session / "session.db")
    (session / "session.bodies").symlink_to(ledger.with_suffix(".bodies"))
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    code, out, err = run_cli(capsys, "0a1b2c3d4e5f")
    assert (code, out) == (1, "")
    assert err == f"capsem-ledger check: {session / 'session.bodies'}: refusing a session.bodies that is a symbolic link\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_ledger_is_a_one_line_error(ledger: Path, capsys) -> None:
    ledger.chmod(0)
    try:
        code, _, err = run_cli(capsys, "--db", str(ledger))
    finally:
        ledger.chmod(0o600)
    assert code == 1
    assert err.startswith(f"capsem-ledger check: {ledger}: cannot read")


def test_a_locked_ledger_is_a_one_line_error(ledger: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, out, err = run_cli(capsys, "--db", str(ledger))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (code, out) == (1, "")
    assert err.startswith(f"capsem-ledger check: {ledger}: database is locked")
    assert err.count("\n") == 1


def test_a_ledger_from_an_older_build_is_refused_in_one_line(ledger: Path, capsys) -> None:
    sql(ledger, "DROP TABLE transport_schema")
    code, out, err = run_cli(capsys, "--db", str(ledger))
    assert (code, out) == (1, "")
    assert err.startswith(f"capsem-ledger check: {ledger}: ")
    assert "transport_schema is missing" in err
    assert err.count("\n") == 1


# --- JSON -----------------------------------------------------------------------------------------

def test_json_is_one_object_with_every_check_and_the_documented_keys(ledger: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"format", "version", "session", "db", "bodies", "rows", "verify_bodies", "status",
                        "sound", "exit_code", "checks", "coverage"}
    assert doc["coverage"] is None   # --verify-bodies did not run
    assert (doc["format"], doc["version"], doc["status"], doc["sound"], doc["exit_code"]) == (
        "capsem-ledger-check", 1, "ok", True, 0)
    assert list(doc["checks"]) == [name for name, _ in check.CHECKS]
    for body in doc["checks"].values():
        assert set(body) == {"title", "status", "reason", "counts", "findings_total", "findings", "tables"}
    assert doc["checks"]["verify_bodies"]["status"] == "skipped"
    assert doc["checks"]["body_archive"]["counts"]["bodies"] == 12
    assert doc["checks"]["tables"]["counts"]["net_events"] == 3


def test_json_findings_carry_code_severity_message_count_and_location(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE tool_calls SET model_call_id = 77")
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--json")
    assert code == 1
    doc = json.loads(out)
    assert (doc["status"], doc["sound"], doc["exit_code"]) == ("fail", False, 1)
    [finding] = doc["checks"]["tool_lifecycle"]["findings"]
    assert finding == {"code": "calls_missing_model_call", "severity": "error",
                       "message": "tool_calls naming a model call model_calls does not record: 3/3",
                       "count": 3, "location": {}, "examples": []}


# --- colour ---------------------------------------------------------------------------------------

def test_the_report_is_coloured_only_when_asked(ledger: Path) -> None:
    # Whether colour is wanted (a terminal, NO_COLOR) is cli.terminal's rule, tested there.
    report = check_ledger(ledger)
    assert "\033[32m  Ledger pages intact (quick_check)\033[0m" in render_text(report, colour=True)
    assert "\033" not in render_text(report, colour=False)


# --- target resolution ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Capsem home: an older ephemeral session, a newer named VM, both with ledgers. Built
    once per module; the tests only read it."""
    home = tmp_path_factory.mktemp("home") / "capsem-home"
    main_db = sessions.create_main_db(home / "sessions" / "main.db")
    sessions.register_session(main_db, "0a1b2c3d4e5f", mode="ephemeral", created_at="2025-06-01T10:00:00Z")
    write_ledger(home / "run" / "sessions" / "0a1b2c3d4e5f", tool_pairs=1, second_block=False)
    sessions.register_session(main_db, "9f8e7d6c5b4a", name="co-work1", mode="persistent",
                              created_at="2025-06-02T10:00:00Z")
    write_ledger(home / "run" / "persistent" / "co-work1", tool_pairs=2, second_block=False)
    return home


@pytest.fixture
def home(shared_home: Path, monkeypatch) -> Path:
    monkeypatch.setenv("CAPSEM_HOME", str(shared_home))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    return shared_home


def test_no_argument_checks_the_latest_session_in_main_db(home: Path, capsys) -> None:
    code, out, _ = run_cli(capsys)
    assert code == 0, out
    assert "Recent sessions:" in out
    assert "Session: co-work1" in out
    assert f"  {home / 'run' / 'persistent' / 'co-work1' / 'session.db'}" in out


def test_a_session_id_resolves_to_its_ephemeral_directory(home: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "0a1b2c3d4e5f")
    assert code == 0
    assert "Session: 0a1b2c3d4e5f" in out
    assert "  All 1 tool_calls have matching responses" in out


def test_a_display_name_resolves_through_main_db_to_the_persistent_directory(home: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "co-work1", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["db"] == str(home / "run" / "persistent" / "co-work1" / "session.db")
    # The named VM's id resolves to the same ledger: nothing is keyed by display name alone.
    code, out, _ = run_cli(capsys, "9f8e7d6c5b4a", "--json")
    assert json.loads(out)["db"] == doc["db"]


def test_capsem_run_dir_moves_the_ledgers(home: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    moved = tmp_path / "elsewhere"
    shutil.copytree(home / "run", moved)
    monkeypatch.setenv("CAPSEM_RUN_DIR", str(moved))
    code, out, _ = run_cli(capsys, "0a1b2c3d4e5f", "--json")
    assert code == 0
    assert json.loads(out)["db"] == str(moved / "sessions" / "0a1b2c3d4e5f" / "session.db")


@pytest.mark.parametrize("word", ["../../etc", "..", "a/b", ".hidden", "-rf"])
def test_ids_that_could_escape_the_run_directory_are_a_usage_error(home: Path, capsys, word: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, "--", word) if word.startswith("-") else run_cli(capsys, word)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2
    assert err.startswith("usage: ") and "cannot name a session" in err.splitlines()[-1]
    assert out == ""


def test_an_unknown_session_is_session_db_not_found(home: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "feedfacecafe")
    assert code == 1
    assert "session.db not found for feedfacecafe" in err


def test_no_argument_without_main_db_says_where_main_db_was_expected(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "empty-home"))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    code, out, err = run_cli(capsys)
    assert (code, out) == (1, "")
    assert err == f"capsem-ledger check: main.db not found at {tmp_path / 'empty-home' / 'sessions' / 'main.db'}\n"


def test_db_checks_a_ledger_file_directly_without_main_db(ledger: Path, tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "no-home"))
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 0
    assert "Recent sessions:" not in out


def test_list_prints_recent_sessions_as_the_doctor_does(home: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "--list")
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == ["", "Recent sessions:"]
    assert lines[2].split() == ["id", "mode", "status", "created_at", "requests", "in_tokens", "out_tokens",
                                "cost", "tools", "files"]
    assert lines[4].split()[:2] == ["9f8e7d6c5b4a", "persistent"]
    assert lines[5].split()[0] == "0a1b2c3d4e5f"
    assert "$0.0000" in lines[4]


def test_list_without_main_db_fails_and_with_no_sessions_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    home = tmp_path / "h"
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    code, _, err = run_cli(capsys, "--list")
    assert code == 1 and err == f"capsem-ledger check: main.db not found at {home / 'sessions' / 'main.db'}\n"
    sessions.create_main_db(home / "sessions" / "main.db")
    code, _, err = run_cli(capsys, "--list")
    assert code == 1 and err == f"capsem-ledger check: {home / 'sessions' / 'main.db'}: No sessions found in main.db\n"


def test_a_session_and_db_together_are_refused_with_the_usage_line(ledger: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        run_cli(capsys, "abc", "--db", str(ledger))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: capsem-ledger check ")
    assert "give a SESSION or --db PATH, not both" in err


# --- the command as a process ---------------------------------------------------------------------

def test_the_command_runs_as_a_process_with_honest_exit_codes(ledger: Path, tmp_path: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    ok = subprocess.run([sys.executable, "-m", "capsem_core", "check", "--db", str(ledger)],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "Ledger sound." in ok.stdout
    sql(ledger, "UPDATE tool_calls SET model_call_id = 5")
    bad = subprocess.run([sys.executable, "-m", "capsem_core", "check", "--db", str(ledger), "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["sound"] is False
    missing = subprocess.run([sys.executable, "-m", "capsem_core", "check", "--db", str(tmp_path / "nope.db")],
                             capture_output=True, text=True, env=env, timeout=120)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert "Traceback" not in missing.stderr


def test_list_json_is_one_object_with_the_sessions(home: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "--list", "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["format"], doc["version"]) == ("capsem-ledger-sessions", 1)
    assert [s["id"] for s in doc["sessions"]] == ["9f8e7d6c5b4a", "0a1b2c3d4e5f"]
    assert doc["sessions"][0]["name"] == "co-work1"


def test_page_damage_wins_over_every_later_problem(ledger: Path, capsys) -> None:
    # An older schema and a tool response without its call, on a file whose pages are damaged:
    # the report is the page damage alone, as if quick_check had run first.
    sql(ledger, "INSERT INTO tool_responses (model_call_id, call_id) VALUES (1, 'ghost')")
    sql(ledger, "DROP TABLE transport_schema")
    conn = sqlite3.connect(ledger)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_fs_events_path'").fetchone()[0]
    conn.close()
    with open(ledger, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\x00" * page_size)
    code, out, err = run_cli(capsys, "--db", str(ledger), "--json")
    assert (code, err) == (1, "")
    doc = json.loads(out)
    assert doc["checks"]["pages"]["status"] == "fail"
    assert doc["checks"]["pages"]["findings_total"] >= 1
    assert {c["status"] for k, c in doc["checks"].items() if k != "pages"} == {"skipped"}


def test_a_ledger_directory_given_as_session_hints_at_db_and_db_takes_the_directory(ledger: Path, capsys,
                                                                                    monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "no-home"))
    directory = str(ledger.parent)
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, directory)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.rstrip("\n").endswith(f"; did you mean --db {directory}?")
    code, out, err = run_cli(capsys, "--db", directory)
    assert code == 0, err
    assert f"  {ledger}" in out.splitlines()
    # A word that is no ledger directory gets no hint.
    code, _, err = run_cli(capsys, "no-such-session")
    assert code == 1 and "did you mean" not in err


def test_version_prints_the_package_version(capsys) -> None:
    import capsem_core

    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"capsem-ledger {capsem_core.__version__}\n"
    assert cli_app.package_version() == capsem_core.__version__


def test_list_takes_precedence_as_the_doctor_has_it(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "no-home"))
    code, out, err = run_cli(capsys, "--list", "--db", str(tmp_path / "x"), "--verify-bodies")
    assert code == 1 and "main.db not found at" in err  # --list ran; --db and --verify-bodies were not refused
