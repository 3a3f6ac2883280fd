"""The identity graph section of check: each invariant of the specification's join contract,
broken by SQL on a copy of a sound sample ledger, is a finding with its code, severity and
count, and the exit code says errors (1) from warnings (0; 1 with --strict)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from capsem_core.check import check_ledger
from capsem_core.check.identity import EVENT_TABLES, EXEMPT_EVENT_TYPES, TURN_TABLES
from capsem_core.sample import write_sample_home, write_sample_ledger
from capsem_core.sample.profiles import MIXES
from capsem_core.schema.vocabulary import SECURITY_EVENT_TYPES
from oracles.peak_memory import measured
from tests.check.test_check import run_cli, sql

# The memory test's child, as tests/check/test_resident_memory.py runs it.
MEMORY_ENV = {"CAPSEM_CORE_PAGE_WINDOW": str(1 << 20), "CAPSEM_CORE_THREADS": "2"}
MEMORY_PRELOAD = ("numpy", "capsem_core.check.run", "capsem_core.cli.check")
# Sizes that keep each sample quick while holding every kind of row the section joins.
SAMPLE_BODIES = {"realistic": 400, "small": 400, "large": 40}


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sound realistic sample ledger, written once; tests damage copies of it."""
    directory = tmp_path_factory.mktemp("identity") / "sound"
    write_sample_ledger(directory, seed=16, mix="realistic", bodies=SAMPLE_BODIES["realistic"])
    return directory


@pytest.fixture
def ledger(sound: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ledger"
    shutil.copytree(sound, copy)
    return copy / "session.db"


def graph(db: Path) -> dict:
    return check_ledger(db).checks["identity_graph"].to_json()


def finding(section: dict, code: str) -> dict:
    [f] = [f for f in section["findings"] if f["code"] == code]
    return f


def broken_codes(section: dict) -> set[str]:
    return {f["code"] for f in section["findings"] if f["severity"] != "info"}


def exit_codes(capsys: pytest.CaptureFixture[str], db: Path) -> tuple[int, int]:
    code, _, _ = run_cli(capsys, "--db", str(db))
    strict, _, _ = run_cli(capsys, "--db", str(db), "--strict")
    return code, strict


# --- sound samples ----------------------------------------------------------------------------

@pytest.mark.parametrize("mix", MIXES)
def test_a_sound_sample_of_every_mix_holds_every_join_and_exits_0_even_strict(
        mix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_sample_ledger(tmp_path / mix, seed=7, mix=mix, bodies=SAMPLE_BODIES[mix])
    db = tmp_path / mix / "session.db"
    section = graph(db)
    assert section["status"] == "ok" and broken_codes(section) == set(), section["findings"]
    counts = section["counts"]
    assert counts["model_items"] > 0 and counts["tool_calls"] > 0 and counts["turns"] > 0
    assert counts["mcp_security_calls"] > 0 and counts["security_rows"] > 0
    assert exit_codes(capsys, db) == (0, 0)


def test_without_a_home_the_section_says_main_db_is_not_read(ledger: Path, capsys) -> None:
    note = finding(graph(ledger), "route_not_compared")
    assert note["severity"] == "info" and "--db" in note["message"] and "no home" in note["message"]
    _, out, _ = run_cli(capsys, "--db", str(ledger))
    assert "Identity graph:" in out and "  Joins hold: " in out and "there is no home" in out


# --- invariants 1 and 2: the item ledger names the exchange and the tool ledger -----------------

def test_an_item_naming_a_missing_model_call_is_an_error(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE model_items SET model_call_id = 999999 WHERE id IN "
                "(SELECT id FROM model_items WHERE kind = 'response' ORDER BY id LIMIT 2)")
    section = graph(ledger)
    f = finding(section, "item_without_model_call")
    assert (f["severity"], f["count"]) == ("error", 2)
    assert [e["model_call_id"] for e in f["examples"]] == [999999, 999999]
    assert broken_codes(section) == {"item_without_model_call"}
    assert exit_codes(capsys, ledger) == (1, 1)


def test_a_tool_call_item_the_tool_ledger_does_not_record_is_an_error(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE model_items SET call_id = 'ghost-' || id WHERE id IN "
                "(SELECT id FROM model_items WHERE kind = 'tool_call' ORDER BY id LIMIT 3)")
    section = graph(ledger)
    f = finding(section, "tool_call_item_unrecorded")
    assert (f["severity"], f["count"]) == ("error", 3)
    assert all(e["call_id"].startswith("ghost-") for e in f["examples"])
    # The calls those items stood for are now missing from the item ledger too (invariant 3).
    assert broken_codes(section) == {"tool_call_item_unrecorded", "tool_call_not_in_items"}
    assert exit_codes(capsys, ledger) == (1, 1)


def test_a_call_emitted_in_its_traces_last_exchange_and_not_made_yet_is_not_damage(ledger: Path) -> None:
    # A session cut short after a model reply that asked for tools: the calls were never made
    # and no later exchange exists (an interrupted sample leaves exactly this).
    cut = """(SELECT model_call_id FROM model_items WHERE kind = 'tool_call' ORDER BY id LIMIT 1)"""
    trace = f"(SELECT trace_id FROM model_calls WHERE id = {cut})"
    for statement in (f"DELETE FROM model_items WHERE trace_id = {trace} AND model_call_id > {cut}",
                      f"DELETE FROM tool_responses WHERE trace_id = {trace} AND model_call_id > {cut}",
                      f"DELETE FROM tool_calls WHERE trace_id = {trace} AND model_call_id >= {cut}",
                      f"DELETE FROM model_calls WHERE trace_id = {trace} AND id > {cut}"):
        sql(ledger, statement)
    assert "tool_call_item_unrecorded" not in broken_codes(graph(ledger))


def test_a_tool_result_item_of_another_exchange_than_its_response_row_is_an_error(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE model_items SET model_call_id = model_call_id + 1 WHERE id = "
                "(SELECT id FROM model_items WHERE kind = 'tool_response' ORDER BY id LIMIT 1)")
    section = graph(ledger)
    f = finding(section, "tool_response_item_unrecorded")
    assert (f["severity"], f["count"]) == ("error", 1)
    assert broken_codes(section) == {"tool_response_item_unrecorded"}
    assert exit_codes(capsys, ledger) == (1, 1)


# --- invariant 3: a model-emitted call is in its exchange's item ledger --------------------------

def test_a_model_emitted_call_missing_from_the_item_ledger_is_a_warning(ledger: Path, capsys) -> None:
    sql(ledger, "DELETE FROM model_items WHERE id IN "
                "(SELECT id FROM model_items WHERE kind = 'tool_call' ORDER BY id LIMIT 3)")
    section = graph(ledger)
    f = finding(section, "tool_call_not_in_items")
    assert (f["severity"], f["count"]) == ("warning", 3)
    assert {"id", "event_id", "model_call_id", "call_id"} <= set(f["examples"][0])
    assert section["status"] == "warn" and broken_codes(section) == {"tool_call_not_in_items"}
    assert exit_codes(capsys, ledger) == (0, 1)


# --- invariant 4: a result is carried back by a later exchange ----------------------------------

def test_a_result_carried_by_the_exchange_that_emitted_its_call_is_an_error(ledger: Path, capsys) -> None:
    # Both ledgers moved together, so only the order is wrong.
    for table in ("tool_responses", "model_items"):
        kind = " AND t.kind = 'tool_response'" if table == "model_items" else ""
        sql(ledger, f"""UPDATE {table} AS t SET model_call_id = (
                SELECT c.model_call_id FROM tool_calls AS c WHERE c.call_id = t.call_id)
            WHERE t.call_id IN (SELECT call_id FROM tool_responses ORDER BY id LIMIT 2){kind}""")
    section = graph(ledger)
    f = finding(section, "response_not_later")
    assert (f["severity"], f["count"]) == ("error", 2)
    assert all(e["model_call_id"] == e["call_model_call_id"] for e in f["examples"])
    assert broken_codes(section) == {"response_not_later"}
    assert exit_codes(capsys, ledger) == (1, 1)


# --- invariant 5: a turn lies in one trace and holds an exchange --------------------------------

def test_a_turn_in_two_traces_is_an_error_wherever_the_second_trace_is(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE fs_events SET trace_id = 'trace-elsewhere' WHERE id = "
                "(SELECT MIN(id) FROM fs_events WHERE turn_id IS NOT NULL)")
    sql(ledger, "UPDATE event_body_blobs SET trace_id = 'trace-elsewhere-too' WHERE id = "
                "(SELECT MAX(id) FROM event_body_blobs WHERE turn_id IS NOT NULL)")
    section = graph(ledger)
    f = finding(section, "turn_in_many_traces")
    assert f["severity"] == "error" and f["count"] in (1, 2)
    [turn] = sql(ledger, "SELECT turn_id FROM fs_events WHERE trace_id = 'trace-elsewhere'")
    assert turn[0] in {e["turn_id"] for e in f["examples"]}
    assert broken_codes(section) == {"turn_in_many_traces"}
    assert exit_codes(capsys, ledger) == (1, 1)


def test_every_table_carrying_turn_and_trace_is_compared() -> None:
    assert set(TURN_TABLES) == {
        "net_events", "model_calls", "event_body_blobs", "tool_calls", "tool_responses", "model_items",
        "fs_events", "exec_events", "dns_events", "audit_events", "substitution_events",
        "security_rule_events", "security_decision_events", "security_ask_events"}


def test_a_turn_without_a_model_exchange_is_only_an_info_without_a_home(ledger: Path, capsys) -> None:
    [(turn,)] = sql(ledger, "SELECT turn_id FROM model_calls ORDER BY id LIMIT 1")
    sql(ledger, "UPDATE model_calls SET turn_id = turn_id || '-moved' WHERE turn_id = ?", (turn,))
    section = graph(ledger)
    f = finding(section, "turn_without_model_call")
    assert (f["severity"], f["count"]) == ("info", 1) and f["examples"][0]["turn_id"] == turn
    assert exit_codes(capsys, ledger) == (0, 0)


# --- invariants 6 and 7: MCP and security rows join back by event_id ----------------------------

def test_an_mcp_call_without_a_logical_tool_call_is_a_security_error(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE security_rule_events SET event_id = printf('%012x', 1000 + id) WHERE id IN "
                "(SELECT id FROM security_rule_events WHERE event_type = 'mcp.tool_call' ORDER BY id LIMIT 2)")
    section = graph(ledger)
    f = finding(section, "mcp_call_without_tool_call")
    assert (f["severity"], f["count"]) == ("error", 2)
    assert broken_codes(section) == {"mcp_call_without_tool_call"}
    assert exit_codes(capsys, ledger) == (1, 1)


def test_a_security_row_about_a_missing_event_row_is_a_warning(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE security_decision_events SET event_id = printf('%012x', 2000 + id) WHERE id IN "
                "(SELECT id FROM security_decision_events WHERE event_type = 'http.request' ORDER BY id LIMIT 2)")
    sql(ledger, "UPDATE security_decision_events SET event_id = printf('%012x', 3000 + id) WHERE id = "
                "(SELECT MIN(id) FROM security_decision_events WHERE event_type = 'mcp.tool_call')")
    section = graph(ledger)
    f = finding(section, "security_event_unjoined")
    assert (f["severity"], f["count"]) == ("warning", 3)
    assert {(e["source_table"], e["event_type"]) for e in f["examples"]} == {
        ("security_decision_events", "http.request"), ("security_decision_events", "mcp.tool_call")}
    assert broken_codes(section) == {"security_event_unjoined"}
    assert exit_codes(capsys, ledger) == (0, 1)


def test_mcp_protocol_facts_without_a_row_of_their_own_are_exempt(ledger: Path, capsys) -> None:
    exempt = sql(ledger, "SELECT COUNT(*) FROM security_rule_events WHERE event_type IN ('mcp.tool_list', 'mcp.event')")
    assert exempt[0][0] > 0
    for table in ("security_rule_events", "security_decision_events"):
        sql(ledger, f"UPDATE {table} SET event_id = printf('%012x', 4000 + id) "
                    "WHERE event_type IN ('mcp.tool_list', 'mcp.event')")
    assert broken_codes(graph(ledger)) == set()
    assert exit_codes(capsys, ledger) == (0, 0)


def test_every_security_event_type_is_either_joined_to_its_table_or_exempt() -> None:
    assert set(EVENT_TABLES).isdisjoint(EXEMPT_EVENT_TYPES)
    assert set(EVENT_TABLES) | set(EXEMPT_EVENT_TYPES) == set(SECURITY_EVENT_TYPES)


# --- the report ---------------------------------------------------------------------------------

def test_examples_are_exact_in_json_and_escaped_on_a_terminal(ledger: Path, capsys) -> None:
    hostile = "ghost\x1b]8;;https://evil/\x07\u202e"
    sql(ledger, "UPDATE model_items SET call_id = ? WHERE id = "
                "(SELECT MIN(id) FROM model_items WHERE kind = 'tool_call')", (hostile,))
    _, out, _ = run_cli(capsys, "--db", str(ledger), "--json")
    f = finding(json.loads(out)["checks"]["identity_graph"], "tool_call_item_unrecorded")
    assert f["examples"][0]["call_id"] == hostile
    _, text, _ = run_cli(capsys, "--db", str(ledger))
    assert "\x1b" not in text and "\u202e" not in text
    assert "call_id=ghost\\x1b]8;;https://evil/\\x07\\u202e" in text


def test_the_section_comes_after_the_doctors_sections(ledger: Path) -> None:
    assert list(check_ledger(ledger).checks)[-2:] == ["verify_bodies", "identity_graph"]


def test_damaged_pages_skip_the_section_like_every_other(ledger: Path) -> None:
    conn = sqlite3.connect(ledger)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(ledger, "r+b") as f:
        f.seek(page_size * 3)
        f.write(b"\xff" * page_size)
    report = check_ledger(ledger)
    assert not report.sound and report.checks["identity_graph"].status == "skipped"


# --- invariant 8: route identity through a home -------------------------------------------------

@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A sample CAPSEM_HOME (stopped, persistent, vacuumed, running and crashed sessions), with
    the environment pointing at it."""
    summary = write_sample_home(tmp_path / "capsem", seed=16, sessions=7, bodies=120)
    monkeypatch.setenv("CAPSEM_HOME", str(summary.home))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    return summary


def _session(home, status: str):
    return next(s for s in home.sessions if s.status == status and s.ledger_dir is not None)


def _identity_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code, out, _ = run_cli(capsys, *argv, "--json")
    return code, json.loads(out)["checks"]["identity_graph"]


def test_every_session_of_a_sample_home_agrees_with_main_db_and_passes_strict(home, capsys) -> None:
    compared = 0
    for s in home.sessions:
        if s.ledger_dir is None:
            continue
        code, section = _identity_json(capsys, s.id, "--strict")
        assert code == 0 and broken_codes(section) == set(), (s.category, section["findings"])
        if s.status == "stopped":
            # Capsem's eight totals plus exec_count and audit_event_count, every one equal.
            assert section["counts"]["route_compared"] == 10 and section["counts"]["route_totals_differ"] == 0
            compared += 1
        else:
            note = finding(section, "route_not_compared")
            assert f"is {s.status} in main.db" in note["message"] and "not compared" in note["message"]
    assert compared >= 2


def test_main_db_totals_that_differ_from_the_ledger_are_a_warning_with_both_figures(home, capsys) -> None:
    s = _session(home, "stopped")
    [(files,)] = sql(s.ledger_dir / "session.db", "SELECT COUNT(*) FROM fs_events")
    sql(home.main_db, "UPDATE sessions SET total_file_events = total_file_events - 3 WHERE id = ?", (s.id,))
    code, section = _identity_json(capsys, s.id)
    f = finding(section, "route_totals_differ")
    assert (f["severity"], f["count"]) == ("warning", 1)
    assert f["examples"] == [{"column": "total_file_events", "main_db": files - 3, "ledger": files}]
    assert f"total_file_events {files - 3} in main.db, {files} from the ledger" in f["message"]
    assert code == 0
    assert run_cli(capsys, s.id, "--strict")[0] == 1


def test_another_sessions_figures_in_main_db_are_named_column_by_column(home, capsys) -> None:
    mine, other = [s for s in home.sessions if s.status == "stopped" and s.ledger_dir is not None][:2]
    columns = ("total_requests", "total_input_tokens", "total_estimated_cost", "total_tool_calls")
    sql(home.main_db, f"UPDATE sessions SET ({', '.join(columns)}) = (SELECT {', '.join(columns)} FROM sessions "
                      "WHERE id = ?) WHERE id = ?", (other.id, mine.id))
    _, section = _identity_json(capsys, mine.id)
    f = finding(section, "route_totals_differ")
    assert {e["column"] for e in f["examples"]} == set(columns)
    _, text, _ = run_cli(capsys, mine.id)
    assert "the wrong session's figures?" in text


def test_a_crashed_session_keeps_its_zeros_and_is_not_compared(home, capsys) -> None:
    s = _session(home, "crashed")
    code, section = _identity_json(capsys, s.id, "--strict")
    note = finding(section, "route_not_compared")
    assert "never rolled up" in note["message"] and code == 0


def test_a_turn_without_a_model_exchange_in_a_stopped_session_is_a_warning(home, capsys) -> None:
    s = _session(home, "stopped")
    db = s.ledger_dir / "session.db"
    [(turn,)] = sql(db, "SELECT turn_id FROM model_calls ORDER BY id LIMIT 1")
    sql(db, "UPDATE model_calls SET turn_id = turn_id || '-moved' WHERE turn_id = ?", (turn,))
    code, section = _identity_json(capsys, s.id)
    f = finding(section, "turn_without_model_call")
    assert (f["severity"], f["count"]) == ("warning", 1) and f["examples"][0]["turn_id"] == turn
    assert code == 0 and run_cli(capsys, s.id, "--strict")[0] == 1


# --- every lookup goes through an index ---------------------------------------------------------

def _plan_scans(conn: sqlite3.Connection, statement: str) -> list[tuple[str, str]]:
    """(what the scan is under, the scan) for every full-table SCAN of a statement's plan."""
    rows = conn.execute("EXPLAIN QUERY PLAN " + statement, [5] * statement.count("?")).fetchall()
    parents = {node: (parent, detail) for node, parent, _, detail in rows}
    out = []
    for node, parent, _, detail in rows:
        if not detail.startswith("SCAN ") or detail.startswith("SCAN (") or " USING " in detail:
            continue
        chain, up = [], parent
        while up in parents:
            chain.append(parents[up][1])
            up = parents[up][0]
        out.append((" / ".join(chain), detail))
    return out


def test_no_statement_of_the_section_scans_a_table_inside_a_lookup(ledger: Path) -> None:
    statements: list[str] = []
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    conn.set_trace_callback(statements.append)
    from capsem_core.check.identity import check_identity_graph
    from capsem_core.check.report import CheckResult
    check_identity_graph(conn, CheckResult("identity_graph", "Identity graph"), None)
    conn.set_trace_callback(None)
    checked = [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
    assert len(checked) >= 8
    for statement in checked:
        for under, scan in _plan_scans(conn, statement.replace("LIMIT 5", "LIMIT ?")):
            # A lookup (a correlated subquery) must search an index, never walk a table; the
            # one table Capsem gives no event_id index, tool_calls, is read once into an IN list.
            assert "CORRELATED" not in under, (scan, under, statement)
            if "LIST SUBQUERY" in under:
                assert scan == "SCAN tool_calls", (scan, statement)
    conn.close()


def test_the_plan_check_sees_a_lookup_that_walks_a_table(ledger: Path) -> None:
    # What the test above refuses: tool_calls.event_id has no index, so a correlated lookup walks it.
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    scans = _plan_scans(conn, "SELECT COUNT(*) FROM security_rule_events AS s WHERE NOT EXISTS "
                              "(SELECT 1 FROM tool_calls AS c WHERE c.event_id = s.event_id)")
    conn.close()
    assert any("CORRELATED" in under and scan.startswith("SCAN c") for under, scan in scans), scans


# --- ids chosen by a counterparty: megabytes long ---------------------------------------------

def _long(tail: str, size: int = 1 << 20) -> str:
    return "t" * size + tail


def test_long_ids_are_compared_whole_and_reported_cut_to_a_line(ledger: Path, capsys) -> None:
    # Two traces of one turn that differ only in their last character: a split turn.
    [(turn,)] = sql(ledger, "SELECT turn_id FROM fs_events WHERE turn_id IS NOT NULL GROUP BY turn_id "
                            "HAVING COUNT(*) >= 4 ORDER BY turn_id LIMIT 1")
    sql(ledger, "UPDATE fs_events SET turn_id = ?, trace_id = ? WHERE id = "
                "(SELECT MIN(id) FROM fs_events WHERE turn_id = ?)", (_long("T"), _long("a"), turn))
    sql(ledger, "UPDATE fs_events SET turn_id = ?, trace_id = ? WHERE id = "
                "(SELECT MIN(id) FROM fs_events WHERE turn_id = ?)", (_long("T"), _long("b"), turn))
    # Another turn whose two rows name one long trace, and a long BLOB turn: not split.
    sql(ledger, "UPDATE fs_events SET turn_id = ?, trace_id = ? WHERE id IN "
                "(SELECT id FROM fs_events WHERE turn_id = ? LIMIT 2)", (_long("U"), _long("c"), turn))
    sql(ledger, "UPDATE dns_events SET turn_id = ? WHERE id = (SELECT MIN(id) FROM dns_events)",
        (_long("V").encode(),))
    sql(ledger, "UPDATE model_items SET call_id = ? WHERE id = "
                "(SELECT MIN(id) FROM model_items WHERE kind = 'tool_call')", (_long("W"),))
    section = graph(ledger)
    split = finding(section, "turn_in_many_traces")
    assert split["count"] == 1
    [example] = split["examples"]
    assert example["turn_id"].startswith("t" * 200) and f"({(1 << 20) + 1} bytes, blake2b " in example["turn_id"]
    assert example["trace_id"] != example["other_trace_id"]
    assert {e["call_id"] for e in finding(section, "tool_call_item_unrecorded")["examples"]} \
        == {"t" * 200 + f"... ({(1 << 20) + 1} characters)"}
    for argv in (("--db", str(ledger)), ("--db", str(ledger), "--json")):
        _, out, _ = run_cli(capsys, *argv)
        assert max(len(line) for line in out.splitlines()) < 2000


def test_turns_of_long_ids_are_checked_in_memory_their_size_does_not_set(tmp_path: Path) -> None:
    directory = tmp_path / "sess"
    summary = write_sample_ledger(directory, seed=16, mix="realistic", bodies=SAMPLE_BODIES["realistic"])
    db = directory / "session.db"
    # 24 turns, each in its own trace, of ids of 2 MiB: 96 MiB of distinct ids. Grouped and
    # sorted whole, SQLite's temporary tables held each of them, several times over.
    for i in range(24):
        sql(db, "UPDATE fs_events SET turn_id = ?, trace_id = ? WHERE id = ?",
            (_long(f"turn{i}", 2 << 20), _long(f"trace{i}", 2 << 20), i + 1))
    got = measured(["check", "--db", str(db), "--json"], env=MEMORY_ENV, preload=MEMORY_PRELOAD)
    assert got.status == 0, got.stdout + got.stderr
    assert '"turn_without_model_call"' in got.stdout
    bound = (32 << 20) + 160 * summary.bodies
    assert got.grown <= bound, f"peak resident size grew {got.grown} bytes over a bound of {bound}"
