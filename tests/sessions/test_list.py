"""``capsem-ledger list``: filters, the ledger marker, formatting and JSON, on real main.db files."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core import sessions as S
from capsem_core.cli import list as list_command
from capsem_core.cli import sessions as forms
from capsem_core.sessions import listing, vmnames
from capsem_core.errors import LedgerError, LedgerWarning, SchemaMismatch
from capsem_core.format import pack_file_header
from tests.sessions.test_sessions import home, old_main_db, register, write_ledger  # noqa: F401  (home is a fixture)

HEADER = ("ID                                             Created     Dur     Cost    net   tokens   tool     fs  Name")


def set_totals(home: S.Home, sid: str, **values: object) -> None:
    conn = sqlite3.connect(home.main_db)
    with conn:
        conn.execute(f"UPDATE sessions SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
                     (*values.values(), sid))
    conn.close()


def run(*argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    list_command.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = list_command.run(parser.parse_args(list(argv)), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def ids(text: str) -> list[str]:
    return [line[:36].rstrip() for line in text.splitlines()[2:] if line and not line.startswith("*")]


def pair(directory: Path) -> None:
    """A ledger pair on disk (contents do not matter to list)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / S.SESSION_DB).write_bytes(b"")
    (directory / S.SESSION_BODIES).write_bytes(pack_file_header())


@pytest.fixture(params=[1, 2, 256], ids=lambda n: f"probe{n}")
def probe(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """--with-db checks this many rows one by one before it reads the directories; small
    values drive the directory-scan path on small main.dbs."""
    monkeypatch.setattr(listing, "_WITH_DB_PROBE_ROWS", request.param)
    return int(request.param)


@pytest.fixture(scope="module")
def six_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six sessions with distinct totals, created one a day (s6 newest); built once, copied
    into each test's home."""
    layout = S.home_layout(tmp_path_factory.mktemp("six") / "capsem")
    spec = {
        "s1": dict(total_requests=3, total_estimated_cost=0.0),
        "s2": dict(total_input_tokens=10, total_output_tokens=0, total_estimated_cost=0.01),
        "s3": dict(total_tool_calls=2, total_estimated_cost=0.009),
        "s4": dict(total_requests=1, total_input_tokens=0, total_output_tokens=5, total_tool_calls=1,
                   total_estimated_cost=1.5),
        "s5": dict(total_file_events=9),
        "s6": dict(total_requests=2, total_output_tokens=1, total_estimated_cost=0.02),
    }
    for i, (sid, totals) in enumerate(spec.items(), start=1):
        register(layout, sid, f"2026-03-0{i}T10:00:00Z", status="stopped" if i % 2 else "running",
                 stopped_at=f"2026-03-0{i}T10:00:30Z" if i % 2 else None)
        set_totals(layout, sid, **totals)
    pair(layout.sessions_root / "s2")
    pair(layout.sessions_root / "s4")
    return layout.home


@pytest.fixture
def six(home: S.Home, six_template: Path) -> S.Home:
    shutil.copytree(six_template, home.home)
    return home


# --- filters -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    ((), ["s6", "s5", "s4", "s3", "s2", "s1"]),
    (("-n", "2"), ["s6", "s5"]),
    (("--with-model",), ["s6", "s4", "s2"]),
    (("--with-net",), ["s6", "s4", "s1"]),
    (("--with-tools",), ["s4", "s3"]),
    (("--min-cost", "0.01"), ["s6", "s4", "s2"]),
    (("--min-cost", "0"), ["s6", "s5", "s4", "s3", "s2", "s1"]),
    (("--min-cost", "1.5"), ["s4"]),
    (("--status", "stopped"), ["s5", "s3", "s1"]),
    (("--status", "crashed"), []),
    (("--with-db",), ["s4", "s2"]),
    (("--with-db", "--with-model"), ["s4", "s2"]),
    (("--with-db", "--with-tools"), ["s4"]),
    (("--with-net", "--with-model"), ["s6", "s4"]),
    (("--with-net", "--with-model", "--min-cost", "1"), ["s4"]),
    (("--with-model", "--status", "running"), ["s6", "s4", "s2"]),
    (("--with-model", "--status", "stopped"), []),
    (("--with-db", "--with-model", "--with-net", "--with-tools", "--min-cost", "1", "--status", "running"), ["s4"]),
    (("--with-model", "-n", "1"), ["s6"]),
])
def test_each_filter_and_their_combinations(six: S.Home, probe: int, argv: tuple[str, ...], expected: list[str]) -> None:
    code, out, _ = run(*argv)
    assert code == 0
    if expected:
        assert ids(out) == expected
    else:
        assert out == "No sessions found\n"
    code, out, _ = run(*argv, "--json")
    assert [o["id"] for o in json.loads(out)] == expected


def test_with_db_filters_before_the_limit(home: S.Home, probe: int) -> None:
    S.create_main_db(home.main_db)
    conn = sqlite3.connect(home.main_db)
    with conn:  # one transaction: thirty registrations would cost thirty fsyncs
        conn.executemany("INSERT INTO sessions (id, mode, created_at) VALUES (?, 'cli', ?)",
                         ((f"s{i:02d}", f"2026-03-01T10:{i:02d}:00Z") for i in range(30)))
    conn.close()
    for sid in ("s00", "s01", "s02"):  # only the three oldest still have ledgers
        pair(home.sessions_root / sid)
    _, out, _ = run("-n", "2", "--with-db")
    assert ids(out) == ["s02", "s01"]
    _, out, _ = run("-n", "10", "--with-db")
    assert ids(out) == ["s02", "s01", "s00"]
    _, out, _ = run("-n", "10")
    assert len(ids(out)) == 10 and "*" not in out.split("\n\n")[0].replace("* =", "")


def test_with_db_skips_a_directory_that_lacks_the_pair(home: S.Home, tmp_path: Path, probe: int) -> None:
    register(home, "a", "2026-03-01T10:00:00Z")
    register(home, "b", "2026-03-02T10:00:00Z")
    register(home, "c", "2026-03-03T10:00:00Z")
    register(home, "d", "2026-03-04T10:00:00Z")
    pair(home.sessions_root / "a")
    write_ledger(home.sessions_root / "b", bodies=False)  # session.db alone is not a ledger
    outside = tmp_path / "outside"
    pair(outside)
    (home.sessions_root / "c").symlink_to(outside)  # a link out of the run dir is not a ledger
    (home.sessions_root / "d").mkdir()
    _, out, _ = run("--with-db")
    assert ids(out) == ["a"]
    _, out, _ = run()
    markers = {line[:36].rstrip(): line[36] for line in out.splitlines()[2:6]}
    assert markers == {"d": " ", "c": " ", "b": " ", "a": "*"}


def test_with_db_continues_past_sessions_created_at_the_same_instant(home: S.Home, probe: int) -> None:
    for sid in ("a", "b", "c", "d", "e"):
        register(home, sid, "2026-03-01T10:00:00Z")
    register(home, "named-id", "2026-03-01T10:00:00Z", name="zed")
    register(home, "other-id", "2026-03-01T10:00:00Z", name="yon")
    for directory in ("b", "d"):
        pair(home.sessions_root / directory)
    pair(home.persistent_root / "zed")
    pair(home.sessions_root / "other-id")  # not yon's directory: yon's ledger is gone
    assert ids(run("--with-db")[1]) == ["named-id", "d", "b"]
    assert "other-id" in ids(run()[1])
    assert ids(run("--with-db", "-n", "2")[1]) == ["named-id", "d"]


def test_directory_names_that_are_not_session_words_are_ignored(home: S.Home, probe: int) -> None:
    register(home, "s1", "2026-03-01T10:00:00Z")
    register(home, "s2", "2026-03-02T10:00:00Z")
    pair(home.sessions_root / "s1")
    os.mkdir(bytes(home.sessions_root) + b"/\xff\xfe-not-utf8")
    (home.sessions_root / "has space").mkdir()
    (home.sessions_root / ('"],"s2')).mkdir()  # JSON-looking junk must not match s2
    assert ids(run("--with-db")[1]) == ["s1"]


def test_a_negative_limit_and_a_nan_cost_are_usage_errors() -> None:
    parser = argparse.ArgumentParser()
    list_command.add_arguments(parser)
    for argv in (["-n", "-1"], ["-n", "x"], ["--min-cost", "nan"], ["--min-cost", "-1"], ["--min-cost", "inf"],
                 ["--status", "stopped\udc9b"]):   # bytes that are not UTF-8, as a shell hands them over
        with pytest.raises(SystemExit):
            parser.parse_args(argv)


# --- the ledger marker ---------------------------------------------------------------------

def test_the_marker_follows_both_directory_kinds_and_the_display_name(home: S.Home, probe: int) -> None:
    register(home, "eph-1", "2026-03-01T10:00:00Z")
    register(home, "vm-7f3a", "2026-03-02T10:00:00Z", name="co-work1")
    register(home, "vm-8b2c", "2026-03-03T10:00:00Z", name="code-vm1")
    pair(home.sessions_root / "eph-1")
    pair(home.persistent_root / "co-work1")
    pair(home.persistent_root / "vm-8b2c")  # named after the id: not code-vm1's ledger
    pair(home.sessions_root / "vm-8b2c")    # nor is an ephemeral directory of that id
    _, out, _ = run()
    rows = out.splitlines()[2:5]
    assert rows[0].startswith("vm-8b2c" + " " * 29 + " ")
    assert rows[1].startswith("vm-7f3a" + " " * 29 + "*")
    assert rows[2].startswith("eph-1" + " " * 31 + "*")
    _, out, _ = run("--with-db")
    assert ids(out) == ["vm-7f3a", "eph-1"]
    objs = {o["id"]: o for o in json.loads(run("--json")[1])}
    assert objs["vm-7f3a"]["ledger_dir"] == str(home.persistent_root / "co-work1")
    assert objs["vm-7f3a"]["name"] == "co-work1"
    assert objs["vm-8b2c"]["has_ledger"] is False and objs["vm-8b2c"]["ledger_dir"] is None
    # The resolver agrees with the marker.
    assert S.resolve_session("co-work1").has_ledger
    assert not S.resolve_session("vm-8b2c", require_db=False).has_ledger


def test_list_honours_capsem_run_dir(home: S.Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    register(home, "s1", "2026-03-01T10:00:00Z")
    pair(tmp_path / "elsewhere" / "sessions" / "s1")
    assert ids(run("--with-db")[1]) == []
    monkeypatch.setenv("CAPSEM_RUN_DIR", str(tmp_path / "elsewhere"))
    assert ids(run("--with-db")[1]) == ["s1"]


# --- formatting ----------------------------------------------------------------------------

def test_header_rule_row_and_footer_are_exact(home: S.Home) -> None:
    register(home, "20260327-154418-f907", "2026-03-27T15:44:18Z", status="stopped",
             stopped_at="2026-03-27T16:50:20Z")
    set_totals(home, "20260327-154418-f907", total_requests=42, total_input_tokens=1200, total_output_tokens=345,
               total_estimated_cost=0.126, total_tool_calls=7, total_file_events=3)
    pair(home.sessions_root / "20260327-154418-f907")
    code, out, err = run()
    assert code == 0 and err == ""
    assert out.splitlines() == [
        HEADER,
        "-" * len(HEADER),
        "20260327-154418-f907                *   03-27 15:44:18    1h6m  $  0.13     42     1545      7      3",
        "",
        "* = session.db on disk (queryable)",
    ]
    assert len(HEADER) == 36 + 2 + 16 + 2 + 6 + 2 + 7 + 2 + 5 + 2 + 7 + 2 + 5 + 2 + 5 + 2 + len("Name")
    assert "\x1b" not in out  # not a terminal


@pytest.mark.parametrize("created, stopped, status, want", [
    ("2026-03-27T15:44:18Z", None, "running", "running"),
    ("2026-03-27T15:44:18Z", None, "stopped", "?"),
    ("2026-03-27T15:44:18Z", None, None, "?"),
    (None, "2026-03-27T15:44:18Z", "running", "running"),
    ("2026-03-27T15:44:18Z", "", "crashed", "?"),
    ("2026-03-27T15:44:18Z", "2026-03-27T15:44:18Z", "stopped", "0s"),
    ("2026-03-27T15:44:18Z", "2026-03-27T15:45:17Z", "stopped", "59s"),
    ("2026-03-27T15:44:18Z", "2026-03-27T15:45:18Z", "stopped", "1m0s"),
    ("2026-03-27T15:44:18Z", "2026-03-27T16:44:17Z", "stopped", "59m59s"),
    ("2026-03-27T15:44:18Z", "2026-03-27T16:44:18Z", "stopped", "1h0m"),
    ("2026-03-27T15:44:18Z", "2026-03-29T17:50:18Z", "stopped", "50h6m"),
    ("2026-03-27T15:44:18+00:00", "2026-03-27T17:44:20+02:00", "stopped", "2s"),
    ("2026-03-27T15:44:18.900Z", "2026-03-27T15:44:20.100Z", "stopped", "1s"),
    ("2026-03-27T15:44:18Z", "2026-03-27T15:44:13Z", "stopped", "-5s"),
    ("2026-03-27T15:44:18Z", "2026-03-27T14:44:18Z", "stopped", "-3600s"),
    ("not a time", "2026-03-27T15:44:18Z", "stopped", "?"),
    ("2026-03-27T15:44:18", "2026-03-27T15:44:28Z", "stopped", "?"),  # naive minus aware
])
def test_duration_rules(created: str | None, stopped: str | None, status: str | None, want: str) -> None:
    assert forms.format_duration(created, stopped, status) == want


@pytest.mark.parametrize("created, want", [
    ("2026-03-27T15:44:18Z", "03-27 15:44:18"),
    ("2026-03-27T15:44:18.123456+00:00", "03-27 15:44:18"),
    ("2026-12-01 08:09:10", "12-01 08:09:10"),
    ("yesterday around noon, roughly", "yesterday around"),
    ("", ""),
    (None, ""),
])
def test_created_is_month_day_and_time_or_the_raw_prefix(created: str | None, want: str) -> None:
    assert forms.format_created(created) == want


def test_every_cell_of_a_row(home: S.Home) -> None:
    register(home, "a", "2026-01-02T03:04:05Z")
    set_totals(home, "a", total_estimated_cost=1234.567, total_requests=123456, total_input_tokens=5,
               total_output_tokens=6, total_tool_calls=0, total_file_events=99999)
    register(home, "b", "junk-date-that-is-long", status="stopped", stopped_at="2026-01-02T03:04:05Z")
    _, out, _ = run()
    b, a = out.splitlines()[2:4]  # text order: "junk" sorts after "2026"
    assert a == "a                                       01-02 03:04:05  running  $1234.57  123456       11      0  99999"
    assert b == "b                                     junk-date-that-i       ?  $  0.00      0        0      0      0"


def test_control_characters_from_main_db_never_reach_the_terminal(home: S.Home) -> None:
    S.create_main_db(home.main_db)
    conn = sqlite3.connect(home.main_db)
    with conn:
        conn.execute("INSERT INTO sessions (id, mode, created_at) VALUES (?, 'cli', ?)",
                     ("evil\x1b[2J\nid", "\x1b]0;pwned\x07 junk"))
    conn.close()
    _, out, _ = run()
    assert "\x1b" not in out and "\x07" not in out
    assert out.splitlines()[2].startswith("evil\\x1b[2J\\x0aid")
    assert json.loads(run("--json")[1])[0]["id"] == "evil\x1b[2J\nid"  # JSON keeps the raw value


def test_a_missing_main_db_is_named_escaped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "evil\x1b[31m\u202e"))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    code, _, err = run()
    assert code == 1 and "\x1b" not in err and "\u202e" not in err
    assert err == f"No main.db found at {tmp_path}/evil\\x1b[31m\\u202e/sessions/main.db\n"


def test_colour_only_on_a_terminal_and_never_with_no_color(six: S.Home, monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    parser = argparse.ArgumentParser()
    list_command.add_arguments(parser)
    out = Tty()
    list_command.run(parser.parse_args([]), stdout=out)
    text = out.getvalue()
    assert text.startswith("\x1b[1mID") and "\x1b[2m---" in text and "\x1b[2m* = session.db" in text
    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    list_command.run(parser.parse_args([]), stdout=out)
    assert "\x1b" not in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: an empty value does not count (cli.terminal)
    out = Tty()
    list_command.run(parser.parse_args([]), stdout=out)
    assert out.getvalue().startswith("\x1b[1mID")


# --- main.db states ------------------------------------------------------------------------

def test_a_missing_main_db_is_reported_on_stderr_with_exit_1(home: S.Home) -> None:
    code, out, err = run()
    assert (code, out, err) == (1, "", f"No main.db found at {home.main_db}\n")
    assert run("--json")[0] == 1


def test_an_empty_main_db_lists_no_sessions_with_exit_0(home: S.Home) -> None:
    S.create_main_db(home.main_db)
    assert run() == (0, "No sessions found\n", "")
    assert run("--json") == (0, "[]\n", "")
    assert run("-n", "0") == (0, "No sessions found\n", "")


def test_a_main_db_of_an_older_capsem_without_our_columns_is_listed(home: S.Home) -> None:
    old_main_db(home.main_db, 3)
    code, out, err = run()
    assert code == 0 and err == ""
    assert out.splitlines()[2].startswith("old-1 ")


def test_a_main_db_lacking_a_column_list_reads_is_refused_naming_the_file_and_column(home: S.Home) -> None:
    old_main_db(home.main_db)
    conn = sqlite3.connect(home.main_db)
    conn.execute("ALTER TABLE sessions DROP COLUMN storage_mode")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaMismatch, match="lacks column\\(s\\) storage_mode$") as err:
        run()
    assert err.value.path == home.main_db


def test_main_db_is_opened_read_only(six: S.Home) -> None:
    before = six.main_db.read_bytes()
    run("--with-db", "--with-model")
    assert six.main_db.read_bytes() == before


def test_a_file_where_the_sessions_directory_belongs_holds_no_ledgers(home: S.Home) -> None:
    register(home, "s1", "2026-03-01T10:00:00Z")
    home.run.mkdir(parents=True)
    home.sessions_root.write_text("a file where a directory belongs")
    assert run("--with-db") == (0, "No sessions found\n", "")
    assert ids(run()[1]) == ["s1"]


# --- JSON ----------------------------------------------------------------------------------

def test_json_has_every_column_raw_and_formatted(six: S.Home) -> None:
    code, out, _ = run("--json", "--with-db")
    assert code == 0
    objs = json.loads(out)
    assert [o["id"] for o in objs] == ["s4", "s2"]
    o = objs[0]
    assert set(o) == set(S.DOCTOR_COLUMNS) | {"name", "total_tokens", "has_ledger", "ledger_dir", "formatted"}
    assert set(o["formatted"]) == {"created", "duration", "cost", "net", "tokens", "tool", "fs"}
    assert o["total_estimated_cost"] == 1.5 and o["formatted"]["cost"] == "$1.50"
    assert o["total_tokens"] == 5 and o["formatted"]["tokens"] == "5"
    assert o["formatted"]["created"] == "03-04 10:00:00" and o["formatted"]["duration"] == "running"
    assert o["has_ledger"] is True and o["ledger_dir"] == str(six.sessions_root / "s4")
    for key in ("total_requests", "allowed_requests", "denied_requests", "total_input_tokens",
                "total_output_tokens", "total_tool_calls", "total_file_events"):
        assert isinstance(o[key], int)
    assert o["mode"] == "cli" and o["storage_mode"] == "block" and o["name"] is None


# --- a hostile home: what stands where main.db and the VM name links belong -----------------------

def _cli(home: S.Home, *argv: str) -> subprocess.CompletedProcess[str]:
    """The command in a real process; the timeout only keeps a regression from hanging the suite."""
    env = {**os.environ, "CAPSEM_HOME": str(home.home)}
    env.pop("CAPSEM_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "capsem_core", *argv], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("argv, code", [(("list",), 1), (("check",), 1), (("check", "--all"), 0),
                                        (("check", "--all", "--strict"), 1)])
def test_a_fifo_where_main_db_belongs_is_refused_in_one_line_never_waited_on(home: S.Home, argv: tuple[str, ...],
                                                                             code: int) -> None:
    """SQLite opens a FIFO and waits for a writer, retrying through Ctrl-C and SIGTERM: every
    reader of main.db refuses anything but a regular file before it connects (``check --all``
    reports it as an unreadable main.db, a warning unless ``--strict``)."""
    write_ledger(home.sessions_root / "s1")
    home.main_db.parent.mkdir(parents=True)
    os.mkfifo(home.main_db)
    done = _cli(home, *argv)
    assert done.returncode == code, done
    assert "main.db is not a regular file" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert stat.S_ISFIFO(os.lstat(home.main_db).st_mode)


def test_a_directory_where_main_db_belongs_is_named_as_not_a_regular_file(home: S.Home) -> None:
    home.main_db.mkdir(parents=True)
    with pytest.raises(LedgerError, match="main.db is not a regular file$") as err:
        S.open_main_db(home.main_db)
    assert err.value.path == home.main_db


def test_a_fifo_where_the_vm_name_links_belong_is_ignored_with_a_warning(home: S.Home) -> None:
    register(home, "s1", "2026-03-01T10:00:00Z")
    os.mkfifo(vmnames.sidecar_path(home.main_db))
    done = _cli(home, "list")
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[2].startswith("s1 ")
    assert done.stderr.splitlines() == [
        f"capsem-ledger: warning: {vmnames.sidecar_path(home.main_db)}: ignoring VM name links: not a regular file"]


def test_vm_name_links_nested_too_deeply_for_the_decoder_are_ignored_not_a_traceback(home: S.Home) -> None:
    register(home, "s1", "2026-03-01T10:00:00Z")
    vmnames.sidecar_path(home.main_db).write_text("[" * 200_000 + "]" * 200_000)
    with pytest.warns(LedgerWarning, match="ignoring damaged VM name links \\(not JSON: nested too deeply\\)"):
        assert vmnames.read_links(home.main_db) == {}
    done = _cli(home, "list")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    assert ids(done.stdout) == ["s1"]


def test_text_in_main_db_that_is_not_utf8_is_listed_escaped_never_an_error(home: S.Home, probe: int) -> None:
    """SQLite keeps TEXT that is not UTF-8 (its checks call it sound); one such row failed the
    whole list ("Could not decode to UTF-8"). It is read as its bytes, shown escaped, kept as
    surrogates in JSON, and --with-db pages past it with its exact bytes."""
    register(home, "s1", "2026-03-01T10:00:00Z")
    register(home, "s2", "2026-03-02T10:00:00Z")
    pair(home.sessions_root / "s1")
    conn = sqlite3.connect(home.main_db)
    with conn:
        conn.execute("INSERT INTO sessions (id, mode, status, created_at) VALUES "
                     "(CAST(X'6162ff1b5b33316d' AS TEXT), 'x', CAST(X'73746f70ff' AS TEXT), '2026-03-03T10:00:00Z')")
    conn.close()
    code, out, err = run()
    assert (code, err) == (0, "")
    assert ids(out) == ["ab\\udcff\\x1b[31m", "s2", "s1"]
    assert "\x1b" not in out
    assert json.loads(run("--json")[1])[0]["id"] == "ab\udcff\x1b[31m"
    assert ids(run("--with-db", "-n", "1")[1]) == ["s1"]   # probe1: the keyset starts at that row
