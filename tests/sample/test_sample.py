"""Sample ledgers: deterministic, on the identity graph, readable, and shaped like real sessions."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from oracles.archive_reader import archived_bodies, check_index_extents
from capsem_core import cli, schema, sessions
from capsem_core.errors import LedgerError
from capsem_core.sample import (
    HomeSummary,
    SampleSummary,
    parse_size,
    write_sample_home,
    write_sample_ledger,
)

ALL_TABLES = ("net_events", "model_calls", "tool_calls", "tool_responses", "model_items", "fs_events",
              "exec_events", "dns_events", "audit_events", "substitution_events", "security_rule_events",
              "security_decision_events", "security_ask_events", "profile_mutation_events",
              "transport_events", "event_body_blobs", "body_blocks")


def _db(directory: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{directory / 'session.db'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def _all_rows(directory: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(f"file:{directory / 'session.db'}?mode=ro", uri=True)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in ALL_TABLES}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def realistic(tmp_path_factory: pytest.TempPathFactory) -> SampleSummary:
    return write_sample_ledger(tmp_path_factory.mktemp("realistic") / "ledger", seed=11, bodies=2500)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> SampleSummary:
    return write_sample_ledger(tmp_path_factory.mktemp("small") / "ledger", seed=5, mix="small", bodies=3000)


# --- determinism ----------------------------------------------------------------------------

def test_the_same_seed_writes_byte_identical_bodies_and_identical_rows(tmp_path: Path) -> None:
    a = write_sample_ledger(tmp_path / "a", seed=7, bodies=500)
    b = write_sample_ledger(tmp_path / "b", seed=7, bodies=500)
    assert (tmp_path / "a" / "session.bodies").read_bytes() == (tmp_path / "b" / "session.bodies").read_bytes()
    assert _all_rows(tmp_path / "a") == _all_rows(tmp_path / "b")
    assert (a.bodies, a.raw_bytes, a.rows) == (b.bodies, b.raw_bytes, b.rows)


def test_a_different_seed_writes_a_different_session(tmp_path: Path) -> None:
    write_sample_ledger(tmp_path / "a", seed=7, bodies=300)
    write_sample_ledger(tmp_path / "b", seed=8, bodies=300)
    assert (tmp_path / "a" / "session.bodies").read_bytes() != (tmp_path / "b" / "session.bodies").read_bytes()
    rows_a, rows_b = _all_rows(tmp_path / "a"), _all_rows(tmp_path / "b")
    assert rows_a["model_calls"] != rows_b["model_calls"]
    assert rows_a["net_events"] != rows_b["net_events"]


# --- identity graph -------------------------------------------------------------------------

def test_every_tool_response_reuses_the_call_id_of_a_tool_call_in_the_same_trace(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    orphans = conn.execute(
        "SELECT COUNT(*) FROM tool_responses r WHERE NOT EXISTS (SELECT 1 FROM tool_calls c "
        "WHERE c.call_id = r.call_id AND c.trace_id IS r.trace_id)").fetchone()[0]
    responses = conn.execute("SELECT COUNT(*) FROM tool_responses").fetchone()[0]
    assert responses > 50 and orphans == 0
    # The response is carried by a later exchange than the one that emitted the call.
    earlier = conn.execute(
        "SELECT COUNT(*) FROM tool_responses r JOIN tool_calls c ON c.call_id = r.call_id "
        "WHERE r.model_call_id <= c.model_call_id").fetchone()[0]
    assert earlier == 0


def test_every_model_emitted_tool_call_names_an_existing_model_call_of_its_trace(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    dangling = conn.execute(
        "SELECT COUNT(*) FROM tool_calls c WHERE c.model_call_id IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM model_calls m WHERE m.id = c.model_call_id AND m.trace_id = c.trace_id "
        "AND m.turn_id = c.turn_id)").fetchone()[0]
    emitted = conn.execute("SELECT COUNT(*) FROM tool_calls WHERE model_call_id IS NOT NULL").fetchone()[0]
    assert emitted > 50 and dangling == 0
    # One model call can emit many tool calls.
    assert conn.execute("SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM tool_calls GROUP BY model_call_id)"
                        ).fetchone()[0] > 1


def test_mcp_tool_calls_are_one_logical_call_with_origin_mcp_and_their_exchange_archived(
        realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    mcp = conn.execute("SELECT * FROM tool_calls WHERE origin = 'mcp'").fetchall()
    assert mcp
    for row in mcp:
        assert row["method"] == "tools/call" and row["server_name"] == "github" and row["request_id"]
        assert row["model_call_id"] is not None
        dirs = {d for (d,) in conn.execute(
            "SELECT direction FROM event_body_blobs WHERE event_id = ? AND source_table = 'tool_calls' "
            "AND event_type = 'mcp.tool_call'", (row["event_id"],))}
        assert dirs == {"request", "response"}
    # MCP is not a second ledger: no call id appears twice in tool_calls.
    assert conn.execute("SELECT COUNT(*) FROM (SELECT call_id FROM tool_calls GROUP BY call_id "
                        "HAVING COUNT(*) > 1)").fetchone()[0] == 0
    origins = {o for (o,) in conn.execute("SELECT DISTINCT origin FROM tool_calls")}
    assert {"native", "mcp", "builtin"} <= origins
    # MCP protocol facts are security events with archived payloads.
    kinds = {k for (k,) in conn.execute("SELECT DISTINCT event_type FROM security_rule_events")}
    assert {"mcp.event", "mcp.tool_list", "mcp.tool_call"} <= kinds


def test_model_items_cover_every_kind_and_never_repeat_within_a_trace(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    kinds = {k for (k,) in conn.execute("SELECT DISTINCT kind FROM model_items")}
    assert kinds == {"request", "reasoning", "response", "tool_call", "tool_response"}
    assert conn.execute("SELECT COUNT(*) FROM model_items i WHERE NOT EXISTS "
                        "(SELECT 1 FROM model_calls m WHERE m.id = i.model_call_id)").fetchone()[0] == 0


# --- bodies ---------------------------------------------------------------------------------

def test_every_archived_body_reads_back_and_matches_its_hash(realistic: SampleSummary) -> None:
    db = realistic.directory / "session.db"
    check_index_extents(db)
    bodies = archived_bodies(db)
    assert len(bodies) == realistic.bodies
    assert sum(b.body_len for b in bodies) == realistic.raw_bytes


def test_a_zstd_sample_reads_back_too(tmp_path: Path) -> None:
    s = write_sample_ledger(tmp_path / "z", seed=3, bodies=300, codec="zstd")
    assert len(archived_bodies(tmp_path / "z" / "session.db")) == s.bodies >= 300


def test_a_realistic_session_compresses_like_a_real_one(realistic: SampleSummary) -> None:
    assert realistic.archive_bytes == (realistic.directory / "session.bodies").stat().st_size
    assert realistic.compression_ratio >= 6.0


def test_requests_carry_the_whole_conversation_so_far(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    by_trace: dict[str, list[tuple[int, str, str]]] = {}
    for mid, trace, eid, provider in conn.execute(
            "SELECT id, trace_id, event_id, provider FROM model_calls ORDER BY id"):
        by_trace.setdefault(trace, []).append((mid, eid, provider))
    bodies = {(b.event_id, b.direction): b.data for b in archived_bodies(realistic.directory / "session.db")
              if b.source_table == "model_calls"}
    grown = 0
    for calls in by_trace.values():
        history: list[object] | None = None
        for _, eid, provider in calls:
            request = json.loads(bodies[(eid, "request")])
            messages = request["contents"] if provider == "google" else request["messages"]
            if history is not None:
                assert messages[:len(history)] == history  # nothing earlier is dropped or changed
                assert len(messages) > len(history)
                grown += 1
            history = messages
    assert grown > 20


def test_each_provider_streams_its_own_sse_shape(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    seen = set()
    for b in archived_bodies(realistic.directory / "session.db"):
        if b.source_table != "model_calls" or b.direction != "response":
            continue
        (provider,) = conn.execute("SELECT provider FROM model_calls WHERE event_id = ?", (b.event_id,)).fetchone()
        seen.add(provider)
        if provider == "anthropic":
            assert b.data.startswith(b"event: message_start\ndata: ")
            assert b.data.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        elif provider == "openai":
            assert b'"object":"chat.completion.chunk"' in b.data and b.data.endswith(b"data: [DONE]\n\n")
        else:
            assert b.data.startswith(b'data: {"candidates":') and b'"finishReason":"STOP"' in b.data
    assert seen == {"anthropic", "openai", "google"}


def test_model_calls_are_complete_and_priced(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    bad = conn.execute("SELECT COUNT(*) FROM model_calls WHERE model IS NULL OR input_tokens IS NULL "
                       "OR output_tokens IS NULL OR request_body_preview IS NULL OR stop_reason IS NULL "
                       "OR estimated_cost_usd <= 0").fetchone()[0]
    assert bad == 0
    paths = {(p, path) for p, path in conn.execute("SELECT DISTINCT provider, path FROM model_calls")}
    assert paths == {("anthropic", "/v1/messages"), ("openai", "/v1/chat/completions"),
                     ("google", "/v1beta/models/gemini-2.5-pro:streamGenerateContent")}
    provider_net = conn.execute(
        "SELECT COUNT(*) FROM net_events WHERE domain LIKE '%.googleapis.com' OR domain LIKE '%.anthropic.com' "
        "OR domain LIKE '%.openai.com'").fetchone()[0]
    assert provider_net == conn.execute("SELECT COUNT(*) FROM model_calls").fetchone()[0]
    # The request body archived for the call is the one the proxy saw (one span, deduplicated).
    spans = conn.execute(
        "SELECT COUNT(*) FROM model_calls m JOIN event_body_blobs a ON a.event_id = m.event_id "
        "AND a.source_table = 'model_calls' AND a.direction = 'request' WHERE a.body_len <> m.request_bytes"
    ).fetchone()[0]
    assert spans == 0


def test_rule_and_decision_share_one_archived_payload(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    shared = conn.execute(
        "SELECT COUNT(*) FROM event_body_blobs r JOIN event_body_blobs d ON d.event_id = r.event_id "
        "AND d.source_table = 'security_decision_events' AND d.direction = 'payload' "
        "WHERE r.source_table = 'security_rule_events' AND r.direction = 'payload' "
        "AND r.block_offset = d.block_offset AND r.body_offset = d.body_offset AND r.body_hash = d.body_hash"
    ).fetchone()[0]
    assert shared > 100
    for b in archived_bodies(realistic.directory / "session.db"):
        if b.direction == "payload":
            payload = json.loads(b.data)
            assert payload["event_id"] == b.event_id
    asks = conn.execute("SELECT DISTINCT status FROM security_ask_events").fetchall()
    assert asks  # an ask was raised and resolved


def test_exec_output_is_cut_to_one_kibibyte_and_says_so(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    rows = conn.execute("SELECT original_bytes, stored_bytes, truncated FROM event_body_blobs "
                        "WHERE source_table = 'exec_events'").fetchall()
    assert rows and all(stored <= 1024 for _, stored, _ in rows)
    assert all(t == int(orig > stored) for orig, stored, t in rows)
    assert any(t for _, _, t in rows)


def test_the_file_monitor_overflows_and_counts_what_it_deferred(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    rows = conn.execute("SELECT path, directory, name, size, kind FROM fs_events WHERE action = 'overflow'").fetchall()
    assert rows
    assert all(r["path"] == "" and r["directory"] is None and r["size"] > 0 and r["kind"] == "other" for r in rows)


def test_every_row_uses_only_columns_of_its_v2_table(realistic: SampleSummary) -> None:
    conn = _db(realistic.directory)
    for table in ALL_TABLES:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        assert tuple(cols) == tuple(schema.table_columns(table))
    assert all(realistic.rows[t] > 0 for t in ALL_TABLES)


# --- mixes and targets ----------------------------------------------------------------------

def test_the_small_mix_writes_mostly_100_to_300_byte_bodies(small: SampleSummary) -> None:
    conn = _db(small.directory)
    total, within = conn.execute(
        "SELECT COUNT(*), SUM(body_len BETWEEN 100 AND 300) FROM event_body_blobs").fetchone()
    assert small.bodies == total >= 3000
    assert within / total >= 0.9


def test_generation_stops_at_whichever_target_comes_first(tmp_path: Path) -> None:
    by_bytes = write_sample_ledger(tmp_path / "a", seed=1, bodies=10**9, raw_bytes=1 << 20)
    assert by_bytes.raw_bytes >= 1 << 20 and by_bytes.bodies < 10**9
    by_count = write_sample_ledger(tmp_path / "b", seed=1, bodies=200, raw_bytes=1 << 40)
    assert 200 <= by_count.bodies < 600


def test_the_large_mix_writes_large_bodies(tmp_path: Path) -> None:
    s = write_sample_ledger(tmp_path / "l", seed=2, mix="large", raw_bytes=12 << 20)
    conn = _db(tmp_path / "l")
    (biggest,) = conn.execute("SELECT MAX(body_len) FROM event_body_blobs").fetchone()
    assert biggest >= 256 << 10 and s.raw_bytes >= 12 << 20
    assert biggest <= 10 << 20  # never past the writer's cut


def test_an_existing_ledger_is_never_overwritten(tmp_path: Path) -> None:
    write_sample_ledger(tmp_path / "x", bodies=100)
    before = (tmp_path / "x" / "session.bodies").read_bytes()
    with pytest.raises(LedgerError, match="already exists"):
        write_sample_ledger(tmp_path / "x", bodies=100)
    assert (tmp_path / "x" / "session.bodies").read_bytes() == before


# --- a whole home ---------------------------------------------------------------------------

def test_a_sample_home_has_every_kind_of_session(tmp_path: Path) -> None:
    home = write_sample_home(tmp_path / "home", seed=4, sessions=6, bodies=60)
    assert isinstance(home, HomeSummary)
    conn = sqlite3.connect(f"file:{home.main_db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM sessions")}
    assert len(rows) == 6
    assert {s.category for s in home.sessions} == {"stopped", "running", "crashed", "vacuumed", "persistent"}
    assert {r["status"] for r in rows.values()} >= {"running", "stopped", "crashed"}
    for s in home.sessions:
        row = rows[s.id]
        assert row["status"] == s.status and row["created_at"] == s.created_at
        if s.kind == "persistent":
            assert s.name and s.name != s.id and row["persistent"] == 1
            assert sessions.vm_name(s.id, home=tmp_path / "home") == s.name
            assert s.ledger_dir == tmp_path / "home" / "run" / "persistent" / s.name
        else:
            assert row["persistent"] == 0 and sessions.vm_name(s.id, home=tmp_path / "home") is None
        if s.category == "vacuumed":
            assert s.ledger_dir is None
            assert not (tmp_path / "home" / "run" / "sessions" / s.id).exists()
            assert row["total_requests"] > 0  # the stats outlive the ledger
        else:
            assert s.ledger_dir is not None and (s.ledger_dir / "session.db").is_file()
            assert (s.ledger_dir / "session.bodies").is_file()
        if s.rolled_up and s.ledger_dir is not None:
            totals = sessions.read_totals(s.ledger_dir / "session.db", s.id, ("exec_count", "audit_event_count"))
            for column in ("total_requests", "total_input_tokens", "total_tool_calls", "total_file_events",
                           "exec_count", "audit_event_count"):
                assert row[column] == getattr(totals, column), column
        elif not s.rolled_up:
            assert row["total_requests"] == 0 and row["total_file_events"] == 0
        assert (row["stopped_at"] is None) == (s.status == "running")
        if s.category == "stopped":
            assert s.rolled_up and row["total_requests"] > 0 and row["total_input_tokens"] > 0
    assert (tmp_path / "home" / "run" / "sessions").is_dir() and (tmp_path / "home" / "run" / "persistent").is_dir()


# --- command line ---------------------------------------------------------------------------

def test_the_sample_command_prints_a_summary_and_refuses_to_overwrite(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cli"
    assert cli.main(["sample", str(target), "--bodies", "150", "--seed", "9"]) == 0
    out = capsys.readouterr().out
    assert "bodies" in out and "ratio" in out and "archive bytes" in out
    assert cli.main(["sample", str(target), "--bodies", "150"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_the_sample_command_echoes_its_directory_escaped(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "evil\x1b[31m\u202e"
    assert cli.main(["sample", str(target), "--bodies", "40"]) == 0
    assert cli.main(["sample", str(tmp_path / "h\x07"), "--home", "--sessions", "1", "--bodies", "40"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "evil\\x1b[31m\\u202e" in out and "h\\x07" in out


def test_the_sample_command_lays_out_a_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sample", str(tmp_path / "h"), "--home", "--sessions", "5", "--bodies", "40"]) == 0
    assert (tmp_path / "h" / "sessions" / "main.db").is_file()
    assert "5 sessions" in capsys.readouterr().out


@pytest.mark.parametrize("text, value", [("1000", 1000), ("64K", 64 << 10), ("64M", 64 << 20), ("1G", 1 << 30),
                                         ("1.5GiB", 3 << 29), ("2mb", 2 << 20)])
def test_sizes_accept_binary_suffixes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "M", "-1M", "0", "12Q", "1e6"])
def test_a_bad_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_a_bad_size_on_the_command_line_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["sample", str(tmp_path / "s"), "--raw-bytes", "lots"])
    assert exc.value.code == 2
    assert not os.path.exists(tmp_path / "s")


def _sample_process(*argv: str, cwd: Path) -> tuple[int, str, str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "capsem_core", "sample", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("home", [False, True])
@pytest.mark.parametrize("where, why", [("file", "the output path is not a directory"),
                                        ("under-file", "cannot create the output directory: Not a directory"),
                                        ("proc", "cannot create the output directory"),
                                        ("no-parent", "the directory holding the output directory does not exist")])
def test_sample_onto_an_unusable_path_is_one_line_naming_it_exit_1(tmp_path: Path, home: bool, where: str,
                                                                   why: str) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    target = {"file": a_file, "under-file": a_file / "x", "proc": Path("/proc/capsem-sample-x"),
              "no-parent": tmp_path / "missing" / "x"}[where]
    code, out, err = _sample_process(str(target), "--bodies", "3", *(["--home", "--sessions", "1"] if home else []),
                                     cwd=tmp_path)
    assert code == 1, err
    assert out == ""
    assert err.startswith(f"capsem-ledger sample: {target}: {why}")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert a_file.read_text() == "not a directory\n"


@pytest.mark.parametrize("argv", [[""], ["", "--home"], ["DIR", "--home", "--raw-bytes", "1M"]])
def test_an_empty_dir_or_conflicting_arguments_are_usage_errors_exit_2(tmp_path: Path, argv: list[str]) -> None:
    code, out, err = _sample_process(*argv, cwd=tmp_path)
    assert code == 2
    assert out == ""
    assert err.startswith("usage: capsem-ledger sample ")
    assert err.splitlines()[-1].startswith("capsem-ledger sample: error: ")
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written, not even into the current directory


def test_sample_onto_an_existing_ledger_is_one_line_exit_1(tmp_path: Path) -> None:
    assert _sample_process(str(tmp_path / "s"), "--bodies", "3", cwd=tmp_path)[0] == 0
    code, out, err = _sample_process(str(tmp_path / "s"), "--bodies", "3", cwd=tmp_path)
    assert code == 1 and out == ""
    assert err == (f"capsem-ledger sample: {tmp_path / 's' / 'session.db'}: a ledger already exists here; "
                   "refusing to overwrite it with a sample\n")


def test_a_sample_that_fails_midway_says_what_it_left_in_one_line(tmp_path: Path) -> None:
    """RLIMIT_FSIZE stands in for a disk that fills: the line names the failure and says the
    directory holds a partial sample a rerun will not write over."""
    import resource
    import signal
    import subprocess
    import sys

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 10, 512 << 10))

    proc = subprocess.run([sys.executable, "-m", "capsem_core", "sample", str(tmp_path / "s"), "--mix", "large",
                           "--bodies", "50"], capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"capsem-ledger sample: {tmp_path / 's'}")
    assert proc.stderr.endswith(f"{tmp_path / 's'} holds the partial sample written before it (remove it to write "
                                "the sample again)\n")


def test_a_sample_written_without_syncs_is_the_ledger_a_durable_writer_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from capsem_core.sample import ledger as sample_ledger
    from capsem_core.writer import LedgerWriter

    fast = write_sample_ledger(tmp_path / "fast", seed=7, mix="small", bodies=600)
    seen: list[bool] = []

    def durable(*args: object, **kwargs: object) -> LedgerWriter:
        seen.append(bool(kwargs.pop("durable", True)))
        return LedgerWriter(*args, durable=True, **kwargs)   # type: ignore[arg-type]

    monkeypatch.setattr(sample_ledger, "LedgerWriter", durable)
    slow = write_sample_ledger(tmp_path / "durable", seed=7, mix="small", bodies=600)
    assert seen == [False]   # the sample asks for a writer without syncs; this one had them
    for name in ("session.db", "session.bodies"):
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "durable" / name).read_bytes(), name
    assert (fast.bodies, fast.rows) == (slow.bodies, slow.rows)
    # Closed: every commit checkpointed into session.db, nothing left in a -wal.
    wal = tmp_path / "fast" / "session.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
