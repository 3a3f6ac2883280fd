"""The whole command line's contract, generated from the parser itself.

Every subcommand of ``capsem_core.cli.app.build_parser()`` and every one of its options and
positionals (found by walking the parser, so a new option joins without touching this file)
is given hostile values: huge, negative and zero numbers, empty text, NUL, control and bidi
characters, 100 KiB strings, and paths to a FIFO, a character device, a directory, dangling
and live symbolic links and a file that is not SQLite. Whatever comes in:

* no traceback, ever (an exception escaping ``main`` or "Traceback" on stderr);
* exit status 0, 1 or 2 (the documented ones);
* stderr holds at most argparse's usage block and one line, and an error line carries the
  ``capsem-ledger <command>:`` prefix;
* with ``--json``, stdout is one JSON document, and an error is an object with ``"error"``;
* nothing appears in the working directory or the CAPSEM_HOME except under the output the
  command was given (a usage error creates nothing at all).

The runs are in-process through ``capsem_core.cli.app.main(argv)`` (milliseconds each, and
the only way to hand a NUL to the parser: exec cannot carry one), against one sample home
made per module; a handful of real processes cover the exec path.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capsem_core.cli import app
from capsem_core.sample import write_sample_home

PARSER = app.build_parser(every=True)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("capsem-ledger has no subcommands")


COMMANDS = _subcommands(PARSER)

# Flags that cannot end on their own: covered where a signal ends them.
UNENDING = {"--follow": "runs until a signal; tests/events/test_follow.py and tests/cli/test_events.py"}
# Flags whose run costs a process pool per example: drawn, but rarely (see _argv).
COSTLY = {"--all"}
# The option values that name what a command writes: new files may appear under them only.
# (export's "words" are [SESSION] DIR: one word given alone is the directory it writes.)
OUTPUT_DESTS = {"directory", "output", "warc", "words"}
# Options that only mean something beside another (given with it when they are the subject),
# and the output that other names.
COMPANIONS = {"warc_level": ("--warc", "out-warc")}


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]


def _is_flag(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.nargs == 0


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(a.option_strings[-1] for a in _actions(parser) if _is_flag(a) and a.option_strings[-1] not in UNENDING)


# --- hostile values ----------------------------------------------------------------------------

NUMBERS = ["0", "-1", "1", "2", "-0", "+3", "99999999999999999999", str(2**31), str(2**63 - 1), str(2**63),
           str(2**64), str(-2**63 - 1), "1" * 5000, "1e3", "0x10", "1_0", " 3 ", "\u0663", "inf", "nan", "1.5",
           "9" * 400 + "T", "1e400", "99999999999999999999d", "99999999999999999999/99999999999999999999",
           "1e400%", "99999999999999999999G"]
TEXTS = ["", "\0", "a\0b", "\x1b[31mred\x1b[0m", "\u202eevil", "\u200b", "\r", "line\nbreak", "-", ".", "..",
         "../../../../etc/passwd", "/", "x" * (100 << 10), "\udcff", "%s%n", "latest", "start",
         "net_events", "request"]
ZOO = ["fifo", "chardev", "dir", "link-to-dir", "dangling-link", "not-sqlite", "not-sqlite/under", "empty"]


def hostile() -> st.SearchStrategy[str]:
    zoo = st.sampled_from(ZOO).map(lambda name: f"@zoo/{name}")  # placed under the zoo at run time
    noisy = st.text(st.characters(codec="utf-8", categories=("Cc", "Cf", "Zs", "Nd", "Lo")), max_size=12)
    return st.one_of(st.sampled_from(NUMBERS), st.sampled_from(TEXTS), zoo, noisy)


# --- the environment -----------------------------------------------------------------------------

@dataclass
class World:
    root: Path
    home: Path
    event_id: str
    counter: itertools.count  # type: ignore[type-arg]

    def fresh(self) -> Run:
        """A new working directory and a new zoo of hostile paths beside it (a command may
        replace what it was told to write, so no run sees another's)."""
        top = self.root / "runs" / f"r{next(self.counter)}"
        # Deep enough that "../../.." in a value stays inside this run's directory.
        cwd = top / "a" / "b" / "c" / "cwd"
        cwd.mkdir(parents=True)
        _make_zoo(top / "zoo")
        return Run(cwd, top / "zoo")


@dataclass
class Run:
    cwd: Path
    zoo: Path

    def place(self, text: str) -> str:
        return text.replace("@zoo", str(self.zoo))


def _make_zoo(zoo: Path) -> None:
    zoo.mkdir()
    os.mkfifo(zoo / "fifo")
    try:
        os.mknod(zoo / "chardev", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    except (PermissionError, AttributeError):
        (zoo / "chardev").write_bytes(b"")  # no CAP_MKNOD: a plain file stands in
    (zoo / "dir").mkdir()
    (zoo / "link-to-dir").symlink_to(zoo / "dir")
    (zoo / "dangling-link").symlink_to(zoo / "nowhere")
    (zoo / "not-sqlite").write_bytes(b"not a SQLite database, not at all\n" * 4)
    (zoo / "empty").write_bytes(b"")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("contract")
    home = root / "home"
    summary = write_sample_home(home, seed=5, sessions=3, bodies=30)
    import sqlite3

    with_ledger = next(s for s in summary.sessions if s.ledger_dir is not None)
    assert with_ledger.ledger_dir is not None
    conn = sqlite3.connect(f"file:{with_ledger.ledger_dir / 'session.db'}?mode=ro", uri=True)
    # An event with one body: body's list of an event's several bodies is its one documented
    # multi-line stderr (tests/cli/test_body.py).
    (event_id,) = conn.execute("SELECT event_id FROM event_body_blobs GROUP BY event_id HAVING COUNT(*) = 1 "
                               "LIMIT 1").fetchone()
    conn.close()
    # That session is made the latest, so a command given no SESSION reaches a ledger (and the
    # event above) instead of ending at "session.db not found" for a vacuumed one.
    conn = sqlite3.connect(home / "sessions" / "main.db")
    with conn:
        conn.execute("UPDATE sessions SET created_at = '2099-12-31T23:59:59.000Z' WHERE id = ?", (with_ledger.id,))
    conn.close()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAPSEM_HOME", str(home))
        mp.delenv("CAPSEM_RUN_DIR", raising=False)
        mp.setenv("NO_COLOR", "1")
        yield World(root, home, str(event_id), itertools.count())


def _tree(*roots: Path) -> set[Path]:
    found: set[Path] = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            found.update(Path(dirpath, n) for n in dirnames + filenames)
    return found


# --- running one command line --------------------------------------------------------------------

@dataclass
class Outcome:
    code: int
    out: str
    err: str
    escaped: BaseException | None


def run_in_process(argv: list[str]) -> Outcome:
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    # What a real process has: UTF-8 stdout (strict) with a buffer, stderr backslash-escaping.
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace", write_through=True)
    escaped: BaseException | None = None
    code = -1
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = app.main(argv)
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:  # a traceback, as the user would see it
            escaped = exc
        out.flush()
        err.flush()
    return Outcome(code, out_bytes.getvalue().decode("utf-8", "replace"),
                   err_bytes.getvalue().decode("utf-8", "replace"), escaped)


def _stderr_lines_after_usage(err: str) -> list[str]:
    lines = err.splitlines()
    if lines and lines[0].startswith("usage:"):
        lines = lines[1:]
        while lines and lines[0].startswith(" "):  # the usage line, wrapped
            lines = lines[1:]
    return lines


def _option_words(option: str, value: str) -> list[str]:
    if option.startswith("--"):
        return [f"{option}={value}"]  # a value starting with '-' stays a value
    return [option + value] if value.startswith("-") or value == "" else [option, value]


def _argv(world: World, run: Run, command: str, subject: argparse.Action | None, value: str,
          flags: list[str]) -> tuple[list[str], list[Path]]:
    """The command line, and the outputs it names (where new files may appear)."""
    parser = COMMANDS[command]
    value = run.place(value)
    options: list[str] = []
    positionals: list[str] = []
    outputs: list[Path] = []
    for action in _actions(parser):
        if _is_flag(action):
            continue
        if action is subject:
            given = value
        elif not action.option_strings and action.nargs is None:  # a required positional
            given = world.event_id if action.dest == "event_id" else f"out-{action.dest}"
        elif not action.option_strings and action.dest in OUTPUT_DESTS and not _other_output(subject):
            given = f"out-{action.dest}"  # an optional output positional (export's DIR, or --warc)
        else:
            continue
        if action.dest in OUTPUT_DESTS:
            outputs.append(run.cwd / given if "\0" not in given else run.cwd)
        if action.option_strings:
            options += _option_words(action.option_strings[-1], given)
        else:
            positionals.append(given)
    if subject is not None and subject.dest in COMPANIONS:
        option, name = COMPANIONS[subject.dest]
        options.append(f"{option}={name}")
        outputs.append(run.cwd / name)
    if command == "sample":
        # A sample stays small, in the mode its options ask for (sample refuses an option of the
        # other mode before it writes, so a mixed line would test only that usage error): a
        # --home of one session of 20 bodies, or one ledger of 20 bodies (bounded by bytes when
        # the count is the subject). --sessions needs --home; the sizes and --progress need
        # one ledger.
        dest = subject.dest if subject is not None else None
        home = dest == "sessions" or (dest not in ("bodies", "raw_bytes") and "--home" in flags)
        flags = [f for f in flags if f not in ("--home", "--progress")] + (["--home"] if home else
                                                                          [f for f in flags if f == "--progress"])
        if dest != "bodies":
            options.append("--bodies=20")
        elif not home:
            options.append("--raw-bytes=64K")
        if home and dest != "sessions":
            options.append("--sessions=1")
    # "--" only before positionals: a command that takes none (list) refuses a bare "--".
    return [command, *flags, *options, *(["--", *positionals] if positionals else [])], outputs


def _other_output(subject: argparse.Action | None) -> bool:
    """True when the subject is an output of its own (or needs one): an optional output
    positional is then left out, as the command takes one output at a time."""
    return subject is not None and bool(subject.option_strings) and (subject.dest in OUTPUT_DESTS
                                                                    or subject.dest in COMPANIONS)


def assert_contract(world: World, run: Run, argv: list[str], outputs: list[Path] = ()) -> Outcome:  # type: ignore[assignment]
    roots = (run.cwd, run.zoo, world.home)
    before = _tree(*roots)
    previous = os.getcwd()
    os.chdir(run.cwd)
    try:
        outcome = run_in_process(argv)
    finally:
        os.chdir(previous)
    after = _tree(*roots)
    shown = repr(argv)[:400]
    assert outcome.escaped is None, f"{shown}: {type(outcome.escaped).__name__}: {outcome.escaped}"
    assert "Traceback" not in outcome.err, f"{shown}: {outcome.err[-2000:]}"
    assert outcome.code in (0, 1, 2), f"{shown}: exit {outcome.code}"
    lines = _stderr_lines_after_usage(outcome.err)
    assert len(lines) <= 1, f"{shown}: stderr has {len(lines)} lines: {outcome.err[:1000]!r}"
    command = argv[0]
    if outcome.code in (1, 2) and lines and not lines[0].startswith("cursor: "):
        assert lines[0].startswith(f"capsem-ledger {command}:"), f"{shown}: {lines[0][:300]!r}"
    if outcome.code == 2:
        assert outcome.err.startswith("usage:"), f"{shown}: exit 2 without the usage line: {outcome.err[:300]!r}"
    if "--json" in argv and (outcome.out or outcome.code != 0):
        try:
            doc = json.loads(outcome.out)
        except ValueError:
            raise AssertionError(f"{shown}: --json but stdout is not JSON: {outcome.out[:300]!r}") from None
        if outcome.code != 0 and lines:
            assert isinstance(doc, dict) and doc.get("error"), f"{shown}: {outcome.out[:300]!r}"
    # SQLite itself makes a WAL database's -wal and -shm beside it for any reader where it
    # may (Capsem's main.db is one); they are SQLite's, not an output of ours.
    created = {p for p in after - before
               if not (p.name.endswith(("-wal", "-shm")) and p.with_name(p.name[:-4]) in before)}
    stray = {p for p in created if not any(p == o or o in p.parents for o in outputs)}
    assert not stray, f"{shown}: created outside its outputs: {sorted(map(str, stray))[:5]}"
    if outcome.code == 2:
        assert not created, f"{shown}: a usage error created {sorted(map(str, created))[:5]}"
    return outcome


# --- the generated cases -----------------------------------------------------------------------

def _subjects(command: str) -> list[argparse.Action | None]:
    return [None, *(a for a in _actions(COMMANDS[command]) if not _is_flag(a))]


_SETTINGS = dict(database=None, derandomize=True, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=30, **_SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_every_option_of_every_command_takes_hostile_values_without_a_traceback(world: World, command: str,
                                                                               data: st.DataObject) -> None:
    subject = data.draw(st.sampled_from(_subjects(command)), label="option")
    value = data.draw(hostile(), label="value")
    choices = _flags(COMMANDS[command])
    flags = data.draw(st.lists(st.sampled_from(choices), max_size=2, unique=True) if choices else st.just([]),
                      label="flags")
    if any(f in COSTLY for f in flags) and data.draw(st.integers(0, 3), label="costly") != 0:
        flags = [f for f in flags if f not in COSTLY]
    run = world.fresh()
    argv, outputs = _argv(world, run, command, subject, value, flags)
    assert_contract(world, run, argv, outputs)


# The texts that broke the contract once a drawn example met them where no other did: bytes
# that are not UTF-8 (as a shell hands them over), a NUL, a terminal escape. Every option and
# positional of every command gets each one, not only the few a draw picks.
SWEPT = ["\udcff", "a\0b", "\x1b[31mred\x1b[0m"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_every_command_takes_each_swept_text_without_a_traceback(world: World,
                                                                                command: str) -> None:
    for subject in _subjects(command)[1:]:
        for value in SWEPT:
            run = world.fresh()
            argv, outputs = _argv(world, run, command, subject, value, [])
            assert_contract(world, run, argv, outputs)


def test_the_walk_reaches_every_command_and_the_exclusions_name_real_flags() -> None:
    # Commands and options come from the parser, so one added later is drawn without a change
    # here; what is left out must still exist, or the exclusion is stale.
    assert {"body", "check", "events", "export", "list", "rollup", "sample"} <= set(COMMANDS)
    every = {s for p in COMMANDS.values() for a in _actions(p) for s in a.option_strings}
    assert set(UNENDING) | COSTLY <= every
    assert all(_subjects(c)[1:] or _flags(COMMANDS[c]) for c in COMMANDS)


# --- the reported cases, exactly ---------------------------------------------------------------

HUGE = "99999999999999999999"


@pytest.mark.parametrize("argv", [
    ["list", "-n", HUGE], ["check", "-n", HUGE],
    ["check", "--subset-seed", HUGE, "--subset", "5%", "--verify-bodies"],
    ["events", "--limit", HUGE], ["check", "--all", "--jobs", HUGE], ["sample", "--home", "X", "--sessions", HUGE],
    ["sample", "X", "--bodies", HUGE], ["sample", "X", "--raw-bytes", "9" * 400], ["sample", "X", "--seed", HUGE],
    ["check", "--max-age", "99999999999999999999d", "--incremental", "--verify-bodies"],
    ["list", "--min-cost", "1e400"], ["check", "-n", "-1"], ["list", "-n", "\u0663"],
])
def test_a_number_outside_its_documented_range_is_a_usage_error_exit_2(world: World, argv: list[str]) -> None:
    outcome = assert_contract(world, world.fresh(), argv)
    assert outcome.code == 2, (argv, outcome.err)
    assert outcome.out == ""


@pytest.mark.parametrize("target, code", [
    ("@zoo/fifo", 1), ("@zoo/chardev", 0), ("@zoo/dir", 1), ("@zoo/link-to-dir", 1), ("@zoo/dangling-link", 1),
    ("@zoo/not-sqlite", 0), ("@zoo/not-sqlite/under", 1), ("@zoo/empty", 0), ("new.warc.gz", 0), ("-", 0),
])
def test_export_warc_onto_every_kind_of_path_keeps_the_contract(world: World, target: str, code: int) -> None:
    # The generated cases mostly meet a session without a ledger; these write a real one.
    run = world.fresh()
    ledger = next(world.home.rglob("session.db")).parent
    out = run.place(target)
    outcome = assert_contract(world, run, ["export", "--db", str(ledger), f"--warc={out}"],
                              [] if out == "-" else [run.cwd / out])
    assert outcome.code == code, (target, outcome.err[-300:])
    if code == 0:
        assert outcome.err.startswith("exported ") and ("stdout" in outcome.err) == (out == "-")


@pytest.mark.parametrize("word", ["\u202eevil", "\x1b[31mred", "a\0b", "x" * (100 << 10), "\u200b", "..", "a/b"])
@pytest.mark.parametrize("command", ["check", "events", "rollup", "export", "body"])
def test_a_session_word_that_cannot_name_a_session_is_refused_before_anything_is_printed(
        world: World, command: str, word: str) -> None:
    run = world.fresh()
    argv = {"export": ["export", "--", word, "out"], "body": ["body", "--", world.event_id, word]}.get(
        command, [command, "--", word])
    outcome = assert_contract(world, run, argv)
    assert outcome.code == 2, (argv[:3], outcome.err[:300])
    assert outcome.out == "", outcome.out[:300]
    assert outcome.err.startswith(f"usage: capsem-ledger {command}"), outcome.err[:300]
    last = outcome.err.rstrip("\n").split("\n")[-1]
    assert last.startswith(f"capsem-ledger {command}: error: argument SESSION: "), last[:300]
    assert "cannot name a session" in last, last[:300]


@pytest.mark.parametrize("argv", [
    ["check", "--json", "--db", "@zoo/not-sqlite"],
    ["check", "--json", "--db", "@zoo/fifo"],
    ["check", "--json", "\u202eevil"],
    ["check", "--json", "feedfacecafe"],
    ["check", "--json", "-n", HUGE],
    ["check", "--json", "--db", "@zoo/dir", "somesession"],
    ["rollup", "--json", "feedfacecafe"],
    ["list", "--json", "-n", "-5"],
])
def test_a_json_error_is_one_json_object_on_stdout_with_the_plain_exit_status(world: World,
                                                                              argv: list[str]) -> None:
    run = world.fresh()
    argv = [run.place(a) for a in argv]
    outcome = assert_contract(world, run, argv)
    plain = run_in_process([a for a in argv if a != "--json"])
    assert outcome.code == plain.code != 0, (outcome.code, plain.code)
    doc = json.loads(outcome.out)
    assert isinstance(doc, dict) and isinstance(doc["error"], str) and doc["error"]
    assert doc["exit_status"] == outcome.code and "path" in doc


def test_a_json_error_keeps_the_exact_message_and_names_the_file(world: World) -> None:
    bad = str(world.fresh().zoo / "not-sqlite")
    outcome = run_in_process(["check", "--json", "--db", bad])
    doc = json.loads(outcome.out)
    assert doc["path"] == bad and "not a SQLite database" in doc["error"]
    assert doc["command"] == "check" and doc["exit_status"] == 1


# --- the exec path ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["list", "-n", HUGE],
    ["check", "-n", HUGE],
    ["sample", "--home", "X", "--sessions", HUGE],
    ["check", "\u202e\x1b[31m"],
    ["check", "--json", "--db", "@zoo/not-sqlite"],
    [b"check", b"\xff\xfe"],
    ["events", "--limit", "0"],
])
def test_a_real_process_keeps_the_contract_too(world: World, argv: list[str | bytes]) -> None:
    run = world.fresh()
    argv = [run.place(a) if isinstance(a, str) else a for a in argv]
    before = _tree(run.cwd, run.zoo, world.home)
    proc = subprocess.run([sys.executable, "-m", "capsem_core", *argv], capture_output=True, timeout=120,
                          cwd=run.cwd)
    err = proc.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in proc.stderr, err[-2000:]
    assert proc.returncode in (1, 2), (argv, proc.returncode, err)
    lines = _stderr_lines_after_usage(err)
    command = argv[0] if isinstance(argv[0], str) else argv[0].decode()
    assert len(lines) == 1 and lines[0].startswith(f"capsem-ledger {command}:"), err
    if "--json" in argv:
        assert json.loads(proc.stdout)["error"]
    else:
        assert proc.stdout == b""
    assert _tree(run.cwd, run.zoo, world.home) == before


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("target", [*ZOO, "new.out", "-"])
def test_events_format_writes_nothing_but_its_output_whatever_it_names(world: World, fmt: str, target: str) -> None:
    run = world.fresh()
    out = run.place(f"@zoo/{target}") if target in ZOO else target
    ledger = next(world.home.rglob("session.db"))
    argv = ["events", "--db", str(ledger), "--table", "net_events", "--format", fmt, "-o", out]
    outcome = assert_contract(world, run, argv, [Path(out) if os.path.isabs(out) else run.cwd / out])
    assert outcome.code in (0, 1), (argv, outcome.err)
    if target in ("new.out", "empty", "not-sqlite", "chardev", "-"):
        assert outcome.code == 0, outcome.err


@pytest.mark.parametrize("argv", [["events", "--json"], ["check", "--jso"], ["list", "--js"], ["check", "--verify"],
                                  ["export", "--warc-l", "3"]])
def test_an_option_is_its_whole_name_never_a_prefix_of_one(world: World, argv: list[str]) -> None:
    """argparse takes a prefix of an option for the option: `events --json` ran as --jsonl,
    and a later option sharing the prefix would change what an old command line does."""
    outcome = assert_contract(world, world.fresh(), argv)
    assert outcome.code == 2 and "unrecognized arguments" in outcome.err, (argv, outcome.err)
    # (a command line holding --json has its usage error as JSON too)
    assert outcome.out == "" or json.loads(outcome.out)["exit_status"] == 2
