"""capsem-ledger check never lets a ledger's strings drive the terminal.

A ledger whose every printed text column holds escape sequences, carriage returns, bidi
overrides and other controls is checked as a process, with colour off (NO_COLOR) and on (a
pseudo-terminal). The text output may hold only printable characters and newlines, plus,
with colour on, the escape codes of cli.terminal.Style and nothing else; ``--json`` keeps every
hostile value exactly.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.ledger_cli import run_argv_on_a_terminal
from tests.check.test_check import TRACE, _bytes

from capsem_core import check
from capsem_core.check import check_ledger
from capsem_core.cli.check_text import PREVIEW_CELL_CHARS, render_text
from capsem_core.cli.terminal import Style
from capsem_core.writer import Body, LedgerWriter

# Every kind of character a counterparty could use against a terminal, each in its own value.
HOSTILE = {
    "esc": "\x1b[2J\x1b[31mred",                            # CSI: clear screen, colour
    "osc8": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "cr": "ok\rFAKE VERDICT",                                # carriage return overwrites
    "bel": "ding\x07\x08\x7f",                               # BEL, backspace, DEL
    "bidi": "\u202eevil\u2066txt\u2069\u200f",              # RLO, isolates, RLM
    "zw": "zero\u200bwidth\u200d\ufeff",                     # ZWSP, ZWJ, BOM
    "nel": "next\x85line\u2028\u2029",                        # NEL, LINE / PARAGRAPH SEPARATOR
    "c1": "\x9b31m\x9d8;;x\x9c",                             # C1 CSI, OSC, ST
}
ALL = "".join(HOSTILE.values())


def _h(key: str) -> str:
    return f"{key}:{HOSTILE[key]}"


def write_hostile_ledger(directory: Path) -> Path:
    """A sound ledger (apart from what the test damages) whose text columns are hostile."""
    w = LedgerWriter(directory)
    w.insert("net_events", {"timestamp": _h("esc"), "domain": HOSTILE["osc8"] + "api.anthropic.com",
                            "decision": _h("cr"), "method": _h("bel"), "path": _h("bidi"),
                            "status_code": 200, "trace_id": TRACE},
             [Body("request", _bytes(1, 3000), "http.request"), Body("response", _bytes(2, 5000), "http.request")])
    w.insert("net_events", {"timestamp": _h("zw"), "domain": _h("nel"), "decision": _h("c1"), "method": ALL,
                            "path": ALL, "status_code": 404})
    w.insert("model_calls", {"id": 1, "timestamp": _h("osc8"), "provider": _h("cr"), "model": _h("bidi"),
                             "method": "POST", "path": "/v1/messages",
                             "stop_reason": ALL, "input_tokens": 10, "output_tokens": 2,
                             "request_body_preview": ALL, "trace_id": TRACE},
             [Body("request", _bytes(3, 4000), "model.call")])
    # NULLs make the data-quality section print.
    w.insert("model_calls", {"id": 2, "timestamp": _h("nel"), "provider": _h("c1"), "model": None,
                             "method": "POST", "path": "/v1/messages", "trace_id": TRACE})
    for i, key in enumerate(HOSTILE):
        call_id = f"{key}-{i}\x1b]0;title\x07"
        w.insert("tool_calls", {"timestamp": "2025-06-02T09:00:05Z", "model_call_id": 1, "provider": "anthropic",
                                "status": "responded", "call_index": i, "call_id": call_id,
                                "tool_name": _h(key), "origin": f"origin-{HOSTILE[key]}",
                                "decision": _h("cr"), "duration_ms": 10 * i, "trace_id": TRACE},
                 [Body("request", _bytes(10 + i, 600), "mcp.tool_call")])
        # Carried back by the later exchange, as the identity graph requires.
        w.insert("tool_responses", {"model_call_id": 2, "call_id": call_id, "content_preview": ALL,
                                    "trace_id": TRACE})
    # One call without a response: the tool-lifecycle finding prints. No call is in the item
    # ledger, so the identity graph's warning quotes these hostile call_ids as its examples.
    w.insert("tool_calls", {"timestamp": "2025-06-02T09:00:05Z", "model_call_id": 1, "call_id": ALL, "call_index": 99,
                            "tool_name": ALL, "origin": ALL, "decision": ALL, "duration_ms": 1, "trace_id": TRACE})
    for key in HOSTILE:
        w.insert("fs_events", {"timestamp": _h(key), "action": _h(key), "path": "/w/" + _h(key), "size": 1})
    w.insert("fs_events", {"timestamp": ALL, "action": "overflow", "path": ALL, "size": 7})
    w.close()
    db = directory / "session.db"
    # kind has a CHECK the writer honours; a hostile hand does not.
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE fs_events SET kind = 'kind:' || path")
    finally:
        conn.close()
    return db


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    # The session label and the path are printed too: the directory name is hostile as well.
    return write_hostile_ledger(tmp_path / ("sess-\x1b]8;;x\x07" + "\r\u202e" + "\x85"))


def _damage_a_body_and_name_it_hostile(db: Path) -> str:
    """Flip a payload byte of the first segment and give the rows of its block a hostile
    event_id, so --verify-bodies prints findings that quote the ledger's values."""
    from tests.check.test_check_archive import blocks, flip, segments

    first, _, disk_len = blocks(db)[0]
    at, _, comp_len = segments(db.with_suffix(".bodies"), first, disk_len)[0]
    flip(db.with_suffix(".bodies"), at + 52 + comp_len // 2)
    event_id = "ev\x1b]8;;https://evil/\x07" + HOSTILE["cr"] + HOSTILE["bidi"]
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE event_body_blobs SET event_id = ? || id", (event_id,))
    finally:
        conn.close()
    return event_id


def _run(db: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsem_core", "check", "--db", str(db), "-n", "20", *extra],
                          capture_output=True, text=True, env=env, timeout=120)


def _run_on_a_terminal(db: Path, *extra: str) -> tuple[int, str]:
    """Run check with stdout on a raw pseudo-terminal (no newline translation): colour on."""
    code, shown, errors = run_on_a_terminal([sys.executable, "-m", "capsem_core", "check", "--db", str(db), "-n",
                                             "20", *extra])
    assert errors == ""
    return code, shown


def run_on_a_terminal(argv: list[str]) -> tuple[int, str, str]:
    """Run a command with stdout on a raw pseudo-terminal (colour on); its exit status, output and stderr."""
    code, shown, errors = run_argv_on_a_terminal(argv)
    return code, shown.decode("utf-8"), errors.decode("utf-8")


def assert_terminal_safe(text: str, *, colour: bool) -> None:
    if colour:
        ours = sorted(set(Style.CODES.values()) | {Style.RESET}, key=len, reverse=True)
        for m in re.finditer("\x1b", text):
            assert any(text.startswith(code, m.start()) for code in ours), repr(text[m.start(): m.start() + 20])
        for code in ours:
            text = text.replace(code, "")
    bad = sorted({ch for ch in text if ch != "\n" and not ch.isprintable()})
    assert not bad, f"unescaped characters reached the terminal: {bad!r}"


def _every_hostile_kind_shown_escaped(text: str) -> None:
    # The values are there, made visible: each control became its escape text.
    for visible in ("\\x1b]8;;https://evil.example/", "ok\\x0dFAKE VERDICT", "\\u202eevil", "zero\\u200bwidth",
                    "next\\x85line", "\\x9b31m", "ding\\x07"):
        assert visible in text, visible


def test_text_output_with_colour_off_holds_only_printable_characters(hostile: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    proc = _run(hostile, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert_terminal_safe(out, colour=False)
    assert "\x1b" not in out
    _every_hostile_kind_shown_escaped(out)
    # Every section that prints ledger strings printed (so each was put to the test).
    for marker in ("Session: sess-\\x1b]8;;x\\x07\\x0d\\u202e\\x85", "Tool origins: ", "Tool usage:",
                   "tool_calls without responses: 1/9", "Data quality warnings:", "NULL model: 1/2",
                   "2 model_calls from 1 AI-provider net_events", "File monitor held 7 changes",
                   "net_events (2 total", "model_calls (2 total", "tool_calls (9 total", "tool_responses (8 total",
                   "fs_events (9 total", "Ledger sound, with warnings."):
        assert marker in out, marker


def test_table_columns_stay_aligned_after_escaping(hostile: Path) -> None:
    out = _run(hostile, env={**os.environ, "NO_COLOR": "1"}).stdout
    lines = out.splitlines()
    start = lines.index("Tool usage:")
    header, rule = lines[start + 1], lines[start + 2]
    rows = lines[start + 3: lines.index("", start)]
    assert rows
    # Each column starts where the rule's dashes start, on every row.
    starts = [m.start() for m in re.finditer(r"-+", rule)]
    for row in [header, *rows]:
        for s in starts[1:]:
            assert row[s - 2: s] == "  ", (row, s)
    # Preview cells are cut after escaping: no cell is longer than the limit.
    start = next(i for i, line in enumerate(lines) if line.startswith("net_events ("))
    rule = lines[start + 2]
    assert max(len(d) for d in rule.split()) <= PREVIEW_CELL_CHARS


def test_text_output_with_colour_on_holds_only_styles_own_escape_codes(hostile: Path) -> None:
    code, out = _run_on_a_terminal(hostile)
    assert code == 0, out
    assert Style.CODES["green"] in out and Style.RESET in out  # colour really is on
    assert_terminal_safe(out, colour=True)
    _every_hostile_kind_shown_escaped(out)


def test_verify_findings_quoting_ledger_values_are_escaped_and_json_keeps_them(hostile: Path) -> None:
    event_id = _damage_a_body_and_name_it_hostile(hostile)
    proc = _run(hostile, "--verify-bodies", env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 1
    assert_terminal_safe(proc.stdout, colour=False)
    assert "ev\\x1b]8;;https://evil/\\x07ok\\x0dFAKE VERDICT\\u202eevil" in proc.stdout
    code, out = _run_on_a_terminal(hostile, "--verify-bodies")
    assert code == 1
    assert_terminal_safe(out, colour=True)
    report = json.loads(_run(hostile, "--verify-bodies", "--json").stdout)
    findings = report["checks"]["verify_bodies"]["findings"]
    assert findings and all(f["location"]["event_id"].startswith(event_id) for f in findings)
    assert all(f["message"].startswith(event_id) for f in findings)


def test_json_output_keeps_every_hostile_value_exactly(hostile: Path) -> None:
    proc = _run(hostile, "--json")
    assert proc.returncode == 0
    assert_terminal_safe(proc.stdout, colour=False)  # JSON escapes controls itself
    report = json.loads(proc.stdout)
    assert report["session"] == hostile.parent.name and report["db"] == str(hostile)
    previews = report["checks"]["previews"]["tables"]

    def column(table: str, name: str) -> list:
        t = previews[table]
        i = t["columns"].index(name)
        return [row[i] for row in t["rows"]]

    assert set(column("net_events", "domain")) == {HOSTILE["osc8"] + "api.anthropic.com", _h("nel")}
    assert set(column("net_events", "path")) == {_h("bidi"), ALL}
    assert set(column("model_calls", "model")) == {_h("bidi"), None}
    assert set(column("tool_calls", "tool_name")) == {_h(k) for k in HOSTILE} | {ALL}
    assert set(column("fs_events", "path")) == {"/w/" + _h(k) for k in HOSTILE} | {ALL}
    usage = report["checks"]["tool_usage"]["tables"]
    assert {row[0] for row in usage["usage"]["rows"]} == {_h(k) for k in HOSTILE} | {ALL}
    assert {row[0] for row in usage["origins"]["rows"]} == {f"origin-{v}" for v in HOSTILE.values()} | {ALL}


def test_page_damage_and_archive_findings_are_escaped_in_text(hostile: Path) -> None:
    """Findings whose messages quote SQLite's or the disk's words (quick_check lines name
    tables and indexes; a bad header names the archive's path) print escaped."""
    report = check_ledger(hostile)
    report.checks["body_archive"].add(check.Finding("bad_file_header", check.ERROR,
                                                    f"{hostile.with_suffix('.bodies')} is not a capsem body archive"))
    for colour in (False, True):
        text = render_text(report, colour=colour)
        assert_terminal_safe(text, colour=colour)
        assert "is not a capsem body archive" in text
    report.checks["pages"].add(check.Finding("page_damage", check.ERROR, "row 3 missing from index " + ALL))
    for colour in (False, True):
        text = render_text(report, colour=colour)
        assert_terminal_safe(text, colour=colour)
        assert "row 3 missing from index \\x1b[2J" in text


def test_an_unread_wal_quoting_a_hostile_path_is_escaped_in_text(hostile: Path) -> None:
    """The tables section's -wal finding names the -wal by its path, which the disk chose."""
    report = check_ledger(hostile)
    wal = hostile.parent / ("evil" + ALL) / "session.db-wal"
    report.checks["tables"].add(check.Finding("wal_not_read", check.ERROR, f"{wal} holds 1 committed transaction(s)",
                                              count=1, location={"file": str(wal)}))
    for colour in (False, True):
        text = render_text(report, colour=colour)
        assert_terminal_safe(text, colour=colour)
        assert "holds 1 committed transaction(s)" in text


def test_error_messages_quoting_a_hostile_path_are_escaped(tmp_path: Path) -> None:
    missing = tmp_path / ("no-\x1b]8;;x\x07such" + "\r\u202e") / "session.db"
    proc = _run(missing)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert_terminal_safe(proc.stderr, colour=False)
    assert "no-\\x1b]8;;x\\x07such\\x0d\\u202e" in proc.stderr


def test_text_that_is_not_utf8_gives_a_report_never_an_error(hostile: Path) -> None:
    """SQLite keeps a TEXT value's bytes as written: a hostile hand can store bytes that are
    not UTF-8, which quick_check calls sound. The sections quoting such values (a tool name,
    a turn's traces, a preview) report them, escaped in text, as surrogates in --json."""
    conn = sqlite3.connect(hostile, isolation_level=None)
    try:
        conn.execute("UPDATE tool_calls SET tool_name = CAST(x'746f6f6cff' AS TEXT) WHERE call_index = 0")
        conn.execute("UPDATE net_events SET domain = CAST(x'6576696cc92e6578616d706c65' AS TEXT) WHERE status_code = 404")
        # One turn, two traces, one of them not UTF-8: the identity graph quotes both.
        conn.execute("UPDATE model_calls SET turn_id = 'turn-1', trace_id = CAST(x'7472616365c9' AS TEXT) WHERE id = 1")
        conn.execute("UPDATE model_calls SET turn_id = 'turn-1' WHERE id = 2")
    finally:
        conn.close()
    proc = _run(hostile, "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and "error" not in report, proc.stdout + proc.stderr
    split = next(f for f in report["checks"]["identity_graph"]["findings"] if f["code"] == "turn_in_many_traces")
    assert {split["examples"][0]["trace_id"], split["examples"][0]["other_trace_id"]} == {"trace\udcc9", TRACE}
    usage = report["checks"]["tool_usage"]["tables"]["usage"]["rows"]
    assert "tool\udcff" in {row[0] for row in usage}
    proc = _run(hostile, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    assert_terminal_safe(proc.stdout, colour=False)
    assert "tool\\udcff" in proc.stdout or "tool\\xff" in proc.stdout


def test_text_output_escapes_what_the_output_encoding_cannot_hold(tmp_path: Path) -> None:
    # A session directory's name is a string the report shows; é is printable, so the
    # sanitizer keeps it, and an ASCII stdout must escape it rather than fail.
    db = write_hostile_ledger(tmp_path / "s\u00e9ss")
    utf8 = _run(db, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    done = _run(db, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert "Traceback" not in done.stderr and done.returncode == utf8.returncode, done.stderr
    assert done.stdout.isascii() and "s\\xe9ss" in done.stdout and "s\u00e9ss" in utf8.stdout
