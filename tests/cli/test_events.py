"""``capsem-ledger events`` as a process: JSON lines with the exact values, a cursor on stderr
that resumes exactly, tables and limits, --follow ended by SIGINT, SIGTERM or SIGHUP (exit 0), a ledger
whose strings are hostile shown escaped on a terminal, one-line errors, and a closed pipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capsem_core import sessions
from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_home
from tests.check.test_check_terminal import (
    ALL, HOSTILE, assert_terminal_safe, run_on_a_terminal, write_hostile_ledger,
)
from tests.events.ledgers import all_rows, event_id, write_mixed


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "capsem_core", "events", *args]


def _run(*args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """The command with NO_COLOR set; ``env`` entries set to None are removed."""
    merged = {**os.environ, "NO_COLOR": "1", **(env or {})}
    return subprocess.run(_cli(*args), capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in merged.items() if v is not None})


def _cursor(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("cursor: ")]
    assert len(lines) == 1, stderr
    return lines[0][len("cursor: "):]


def _jsonl(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_jsonl_prints_every_event_exactly_and_a_cursor_that_resumes_after_them(tmp_path: Path) -> None:
    write_mixed(tmp_path, 70)
    done = _run("--db", str(tmp_path), "--jsonl")
    assert done.returncode == 0, done.stderr
    got = _jsonl(done.stdout)
    with Ledger(tmp_path) as ledger:
        want = ledger.events(limit=1000).events
    assert [(g["table"], g["id"], g["event_id"], g["timestamp"], g["bodies"], g["row"]) for g in got] == [
        (e.table, e.id, e.event_id, e.timestamp, list(e.bodies), e.row) for e in want]
    again = _run("--db", str(tmp_path / "session.db"), "--jsonl", "--after", _cursor(done.stderr))
    assert again.returncode == 0 and again.stdout == "" and _cursor(again.stderr) == _cursor(done.stderr)


def test_tables_and_a_limit_choose_what_is_printed_and_the_cursor_resumes_at_the_next(tmp_path: Path) -> None:
    write_mixed(tmp_path, 3000, flush_every=500)
    first = _run("--db", str(tmp_path), "--jsonl", "--table", "net_events", "--table", "fs_events",
                 "--limit", "1500")
    got = _jsonl(first.stdout)
    assert first.returncode == 0 and len(got) == 1500 and {g["table"] for g in got} == {"net_events", "fs_events"}
    rest = _jsonl(_run("--db", str(tmp_path), "--jsonl", "--table", "net_events", "--table", "fs_events",
                       "--after", _cursor(first.stderr)).stdout)
    keys = [(g["table"], g["id"]) for g in got + rest]
    assert len(keys) == len(set(keys)) == 2000


def test_latest_prints_nothing_and_a_cursor_for_what_comes_next(tmp_path: Path) -> None:
    write_mixed(tmp_path, 20)
    tail = _run("--db", str(tmp_path), "--after", "latest")
    assert tail.returncode == 0 and tail.stdout == ""
    write_mixed(tmp_path, 6, first=20)
    got = _jsonl(_run("--db", str(tmp_path), "--jsonl", "--after", _cursor(tail.stderr)).stdout)
    assert len(got) == 6


def test_a_session_is_found_by_id_or_as_the_latest_like_check_finds_it(tmp_path: Path) -> None:
    summary = write_sample_home(tmp_path / "home", sessions=4, bodies=40)
    env: dict[str, str | None] = {"CAPSEM_HOME": str(tmp_path / "home"), "CAPSEM_RUN_DIR": None}
    session = next(s for s in summary.sessions if s.ledger_dir is not None)
    by_id = _run(session.id, "--jsonl", "--limit", "5", env=env)
    assert by_id.returncode == 0, by_id.stderr
    assert _jsonl(by_id.stdout) == _jsonl(_run("--db", str(session.ledger_dir), "--jsonl", "--limit", "5").stdout)
    latest = sessions.resolve_session(None, home=tmp_path / "home", require_db=False)
    done = _run("--jsonl", "--limit", "1", env=env)
    if latest.has_ledger:
        assert done.returncode == 0 and len(_jsonl(done.stdout)) == 1
    else:
        assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    missing = _run("no-such-session", env=env)
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1 and "Traceback" not in missing.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["sigint", "sigterm", "sighup"])
def test_follow_prints_a_live_writers_rows_until_a_signal_then_exits_0_with_a_cursor(tmp_path: Path,
                                                                                  signum: int) -> None:
    writer = subprocess.Popen([sys.executable, "-m", "oracles.live_writer", str(tmp_path), "--rows", "1500"],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    follower = subprocess.Popen(_cli("--db", str(tmp_path), "--follow", "--jsonl"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})
    assert follower.stdout is not None
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 1500 and time.monotonic() < deadline:
        line = follower.stdout.readline()
        if not line:
            break
        got.append(json.loads(line))
    assert writer.wait(timeout=60) == 0
    follower.send_signal(signum)
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    assert out == "" and "Traceback" not in err
    keys = [(g["table"], g["id"]) for g in got]
    assert len(keys) == len(set(keys)) and set(keys) == all_rows(tmp_path)
    cursor = _cursor(err)
    write_mixed(tmp_path, 9, first=2000)
    resumed = _jsonl(_run("--db", str(tmp_path), "--jsonl", "--after", cursor).stdout)
    assert len(resumed) == 9 and not {(g["table"], g["id"]) for g in resumed} & set(keys)


def test_follow_with_a_limit_stops_after_that_many_events(tmp_path: Path) -> None:
    write_mixed(tmp_path, 50)
    done = _run("--db", str(tmp_path), "--follow", "--jsonl", "--limit", "20")
    assert done.returncode == 0 and len(_jsonl(done.stdout)) == 20
    rest = _jsonl(_run("--db", str(tmp_path), "--jsonl", "--after", _cursor(done.stderr)).stdout)
    assert len(rest) == 30


def test_hostile_strings_are_escaped_in_lines_and_kept_exactly_in_jsonl(tmp_path: Path) -> None:
    write_hostile_ledger(tmp_path)
    plain = _run("--db", str(tmp_path))
    assert plain.returncode == 0, plain.stderr
    assert_terminal_safe(plain.stdout, colour=False)
    assert "\\x1b" in plain.stdout and "\\u202e" in plain.stdout
    code, shown, errors = run_on_a_terminal(_cli("--db", str(tmp_path)))
    assert code == 0 and errors.startswith("cursor: ev1.")
    assert_terminal_safe(shown, colour=True)

    exact = _run("--db", str(tmp_path), "--jsonl")
    assert exact.stdout.isascii()
    values = {v for g in _jsonl(exact.stdout) for v in g["row"].values() if isinstance(v, str)}  # type: ignore[union-attr]
    assert ALL in values and any(HOSTILE["osc8"] in v for v in values)


def test_values_json_has_no_words_for_are_written_as_tagged_text(tmp_path: Path) -> None:
    import sqlite3

    write_mixed(tmp_path, 3)
    conn = sqlite3.connect(tmp_path / "session.db", isolation_level=None)
    conn.execute("UPDATE fs_events SET path = x'00ff', size = 1e999")
    conn.close()
    (fs,) = [g for g in _jsonl(_run("--db", str(tmp_path), "--jsonl").stdout) if g["table"] == "fs_events"]
    assert fs["row"]["path"] == {"base64": "AP8="} and fs["row"]["size"] == "inf"  # type: ignore[index]


def test_a_row_too_large_for_a_page_prints_the_events_before_it_their_cursor_then_one_line(tmp_path: Path) -> None:
    import sqlite3

    write_mixed(tmp_path, 30)
    conn = sqlite3.connect(tmp_path / "session.db", isolation_level=None)
    # Row 5 of fs_events, the ledger's 14th event, holds more than the 32 MiB a page takes.
    conn.execute("UPDATE fs_events SET path = ? WHERE id = 5", ("x" * (33 << 20),))
    conn.close()
    done = _run("--db", str(tmp_path), "--jsonl")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert [g["event_id"] for g in _jsonl(done.stdout)] == [event_id(i) for i in range(13)]
    cursor_line, error = done.stderr.splitlines()
    assert cursor_line.startswith("cursor: ev1.")
    assert str(tmp_path / "session.db") in error and "row 5 of fs_events" in error
    again = _run("--db", str(tmp_path), "--jsonl", "--after", _cursor(done.stderr))
    assert again.returncode == 1 and again.stdout == "" and again.stderr.splitlines() == [error]


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}])
def test_lines_escape_what_the_output_encoding_cannot_hold(tmp_path: Path, env: dict[str, str | None]) -> None:
    from capsem_core.writer import LedgerWriter

    with LedgerWriter(tmp_path) as writer:
        writer.insert("dns_events", {"event_id": "0000000000ff", "timestamp": "2026-01-01T00:00:09.000000Z",
                                     "qname": "caf\u00e9.\u4e2d\u6587", "qtype": 1, "qclass": 1, "rcode": 0,
                                     "decision": "allowed"})
    done = _run("--db", str(tmp_path), "--table", "dns_events", env={"PYTHONIOENCODING": None, **env})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "qname=caf\\xe9.\\u4e2d\\u6587" in done.stdout


@pytest.mark.parametrize("args, code, words", [
    (("--after", "ev1.AAAAAAAAAAAAAAAAAAAAAAAA"), 1, "integrity check"),
    (("--after", "yesterday"), 1, "starts with 'ev1.'"),
    (("--table", "tool_responses"), 2, "not an event table"),
    (("--limit", "0"), 2, "at least 1"),
    (("--limit", "-3"), 2, "negative"),
    (("some-session",), 2, "not both"),
])
def test_bad_arguments_are_one_line_and_no_traceback(tmp_path: Path, args: tuple[str, ...], code: int,
                                                     words: str) -> None:
    write_mixed(tmp_path, 3)
    done = _run("--db", str(tmp_path), *args)
    assert done.returncode == code and words in done.stderr and "Traceback" not in done.stderr
    if code == 1:
        assert len(done.stderr.splitlines()) == 1 and str(tmp_path / "session.db") in done.stderr


def test_a_missing_ledger_is_one_line_naming_it(tmp_path: Path) -> None:
    done = _run("--db", str(tmp_path / "nowhere"))
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1 and "nowhere" in done.stderr


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    write_mixed(tmp_path, 3000, flush_every=1000)
    proc = subprocess.Popen(_cli("--db", str(tmp_path), "--jsonl"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None and proc.stderr.read() == b""


@pytest.mark.parametrize("after", ["latest", "start"])
def test_a_follower_stopped_before_any_event_still_prints_a_cursor_that_misses_nothing(
        tmp_path: Path, after: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from capsem_core import cli
    from capsem_core.cli import events as events_command
    from capsem_core.writer import LedgerWriter

    if after == "latest":
        write_mixed(tmp_path, 20)
    else:
        LedgerWriter(tmp_path).close()   # nothing to print from the start either
    monkeypatch.setattr(events_command._Stop, "__call__", lambda self: True)   # a Ctrl-C at once, while idle
    assert cli.main(["events", "--db", str(tmp_path), "--follow", "--jsonl", "--after", after]) == 0
    printed = capsys.readouterr()
    assert printed.out == ""
    cursor = _cursor(printed.err)
    write_mixed(tmp_path, 6, first=20)
    assert len(_jsonl(_run("--db", str(tmp_path), "--jsonl", "--after", cursor).stdout)) == 6


def test_a_signal_mid_write_counts_only_the_lines_that_went_out_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C while a slow reader holds the pipe full: the write stops part-way, and
    the lines the cursor counts are exactly the whole ones the reader got."""
    from capsem_core.cli import events as events_command

    lines = [f'{{"n":{n}}}\n' for n in range(5)]
    whole = sum(len(line) for line in lines[:2])
    read_end, write_end = os.pipe()
    calls: list[int] = []

    def write(fd: int, data: memoryview) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise KeyboardInterrupt   # the second signal, in the blocked write
        return os.writev(fd, [bytes(data[:whole + 3])])   # two lines and a piece of the third

    class Out:
        encoding, errors = "utf-8", "strict"

        def fileno(self) -> int:
            return write_end

        def flush(self) -> None:
            pass

    monkeypatch.setattr(events_command.os, "write", write)
    done = [0]
    with pytest.raises(KeyboardInterrupt):
        events_command._deliver(Out(), lines, done)   # type: ignore[arg-type]
    monkeypatch.undo()
    os.close(write_end)
    with os.fdopen(read_end, "rb") as got:
        received = got.read()
    assert done == [2] and received.count(b"\n") == 2 and len(calls) == 2
