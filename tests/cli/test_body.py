"""``capsem-ledger body``: exact bytes to a pipe or a file, sanitized text or a refusal on a
terminal, a list when the event has several bodies, one-line errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capsem_core.writer import Body, LedgerWriter

from tests.cli.ledger_cli import run, run_on_a_terminal

TEXT = b"line one\n\x1b]8;;http://evil\x07click\x1b]8;;\x07 \xe2\x80\xae reversed\nlast\n"
BINARY = bytes(range(256)) * 4


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", {"event_id": "0000000000aa", "timestamp": "2026-11-30T12:00:00.000000Z",
                                "domain": "api.anthropic.com", "decision": "allowed"},
                 bodies=[Body("request", TEXT, "http.request", "text/plain"),
                         Body("response", BINARY, "http.request", "application/octet-stream")])
        w.insert("net_events", {"event_id": "0000000000bb", "timestamp": "2026-11-30T12:00:01.000000Z",
                                "domain": "api.anthropic.com", "decision": "allowed"},
                 bodies=[Body("response", BINARY[::-1], "http.request")])
    return tmp_path


def test_the_exact_bytes_go_to_a_pipe(ledger: Path) -> None:
    done = run("body", "0000000000bb", "--db", str(ledger))
    assert (done.returncode, done.stdout, done.stderr) == (0, BINARY[::-1], b"")
    done = run("body", "0000000000aa", "--db", str(ledger / "session.db"), "--direction", "request")
    assert (done.returncode, done.stdout) == (0, TEXT)


def test_o_writes_the_file_whole_and_replaces_a_link_instead_of_following_it(ledger: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep me")
    out = tmp_path / "out.bin"
    os.symlink(target, out)
    done = run("body", "0000000000aa", "--db", str(ledger), "--direction", "response", "-o", str(out))
    assert done.returncode == 1 and b"symbolic link" in done.stderr
    out.unlink()
    done = run("body", "0000000000aa", "--db", str(ledger), "--direction", "response", "-o", str(out))
    assert done.returncode == 0 and out.read_bytes() == BINARY and target.read_bytes() == b"keep me"
    assert [p.name for p in tmp_path.iterdir() if ".part-" in p.name] == []


def test_several_bodies_and_no_choice_are_listed_on_stderr(ledger: Path) -> None:
    done = run("body", "0000000000aa", "--db", str(ledger))
    assert done.returncode == 1 and done.stdout == b""
    text = done.stderr.decode()
    assert "2 bodies" in text and "request" in text and "response" in text and "text/plain" in text


@pytest.mark.parametrize("stdout", [(), ("-o", "-")], ids=["no -o", "-o -"])
def test_a_text_body_on_a_terminal_is_shown_sanitized(ledger: Path, stdout: tuple[str, ...]) -> None:
    code, shown, err = run_on_a_terminal("body", "0000000000aa", "--db", str(ledger), "--direction", "request",
                                         *stdout)
    assert code == 0 and err == b""
    assert b"\x1b" not in shown and b"\x07" not in shown and "\u202e".encode() not in shown
    assert b"line one" in shown and b"\\x1b]8;;http://evil\\x07click" in shown and b"\\u202e" in shown


@pytest.mark.parametrize("stdout", [(), ("-o", "-")], ids=["no -o", "-o -"])
def test_a_binary_body_is_refused_on_a_terminal(ledger: Path, stdout: tuple[str, ...]) -> None:
    code, shown, err = run_on_a_terminal("body", "0000000000bb", "--db", str(ledger), *stdout)
    assert code == 1 and shown == b""
    assert b"binary body" in err and b"-o FILE" in err and err.count(b"\n") == 1


def test_an_event_id_table_or_direction_that_is_not_utf8_is_a_usage_error(ledger: Path) -> None:
    # A shell hands over bytes that are not UTF-8 as they are (Python keeps them as surrogates).
    for extra in (["\udc9b"], ["0000000000aa", "--table", "t\udc9b"], ["0000000000aa", "--direction", "d\udc9b"]):
        done = run("body", *extra, "--db", str(ledger))   # each word exec'd as os.fsencode gives it
        assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr
        assert b"is not UTF-8 text" in done.stderr and b"\\udc9b" in done.stderr


def test_an_unknown_event_and_both_session_and_db_are_one_line_errors(ledger: Path) -> None:
    done = run("body", "\x1b[31mffff", "--db", str(ledger))
    assert done.returncode == 1 and b"no body for event" in done.stderr and b"\x1b" not in done.stderr
    assert done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr
    done = run("body", "0000000000bb", "some-session", "--db", str(ledger))
    assert done.returncode == 2 and b"not both" in done.stderr


def test_a_damaged_body_is_an_error_not_bytes(ledger: Path) -> None:
    with open(ledger / "session.bodies", "r+b") as f:
        f.seek(16 + 8 + 52 + 20)
        b = f.read(1)
        f.seek(16 + 8 + 52 + 20)
        f.write(bytes([b[0] ^ 1]))
    done = run("body", "0000000000bb", "--db", str(ledger))
    assert done.returncode == 1 and done.stdout == b"" and done.stderr.count(b"\n") == 1
