"""Standard output closed, full or gone, and standard error closed: one line naming standard
output and exit 1, never a traceback; with stderr closed, stdout carries only the output.

The streams are really closed (``sh -c 'exec "$@" >&-'``): a subprocess given DEVNULL has an
open descriptor, which is not the case under test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core.sample import write_sample_home

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("streams") / "home"
    summary = write_sample_home(path, seed=5, sessions=3, bodies=30)
    return path, next(s.id for s in summary.sessions if s.category == "stopped")


@pytest.fixture(scope="module")
def home(sample: tuple[Path, str]) -> Path:
    return sample[0]


def ledger(redirect: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """capsem-ledger ARGS run by sh with ``redirect`` applied to it (``>&-``, ``2>&-``, ...);
    stdout and stderr are pipes unless the redirect says otherwise."""
    script = f'exec "$@" {redirect}'
    env = {**os.environ, "CAPSEM_HOME": str(home), "CAPSEM_RUN_DIR": str(home / "run"), "NO_COLOR": "1"}
    return subprocess.run(["sh", "-c", script, "sh", sys.executable, "-m", "capsem_core", *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


PRINTING = [
    ("list",),
    ("check", "co-work1"),
    ("check", "--list"),
    ("events", "co-work1", "--limit", "1"),
    ("rollup", "STOPPED"),   # the sample's session that stopped
    ("export", "co-work1", "--warc", "-"),
]


@pytest.mark.parametrize("args", PRINTING, ids=" ".join)
def test_a_command_whose_stdout_is_closed_fails_in_one_line_naming_standard_output(
        sample: tuple[Path, str], args: tuple[str, ...]) -> None:
    home, stopped = sample
    done = ledger(">&-", home, *(stopped if a == "STOPPED" else a for a in args))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    if args[0] == "events":   # the cursor of what went out whole (nothing), to resume from
        assert lines[0].startswith("cursor: ev1.") and len(lines) == 2, done.stderr
        lines = lines[1:]
    assert lines == [f"capsem-ledger {args[0]}: standard output: it is closed"], done.stderr


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("list", "--help"), ("body", "--help")], ids=" ".join)
def test_help_or_the_version_with_stdout_closed_is_a_failure_not_a_silent_exit_0(home: Path,
                                                                                   args: tuple[str, ...]) -> None:
    done = ledger(">&-", home, *args)
    assert done.returncode == 1 and done.stderr == "capsem-ledger: standard output: it is closed\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("args", [("list",), ("events", "co-work1"), ("check", "co-work1", "--json"),
                                  ("list", "--help")], ids=" ".join)
def test_stdout_on_a_full_device_names_standard_output_and_exits_1(home: Path, args: tuple[str, ...]) -> None:
    done = ledger(">/dev/full", home, *args)
    who = "capsem-ledger" if "--help" in args else f"capsem-ledger {args[0]}"
    lines = done.stderr.splitlines()
    if args[0] == "events":   # the cursor of what went out whole (nothing), to resume from
        assert lines[0].startswith("cursor: ev1.") and len(lines) == 2, done.stderr
        lines = lines[1:]
    assert done.returncode == 1 and lines == [f"{who}: standard output: No space left on device"], done.stderr


def test_with_stderr_closed_a_json_error_is_all_stdout_holds_and_the_status_is_kept(home: Path) -> None:
    done = ledger("2>&-", home, "check", "--json", "--db", str(home / "no-such-ledger"))
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"].endswith("no such file")   # one JSON object, nothing else
    done = ledger("2>&-", home, "check", "--json", "-n", "-1")   # a usage error: argparse's lines
    assert done.returncode == 2 and json.loads(done.stdout)["exit_status"] == 2


def test_with_stderr_closed_jsonl_output_is_json_lines_only(home: Path) -> None:
    done = ledger("2>&-", home, "events", "co-work1", "--jsonl", "--limit", "2")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(json.loads(line)["table"] for line in lines)   # (the cursor line went nowhere)


def test_with_stderr_closed_a_failing_command_prints_nothing_and_keeps_its_status(home: Path) -> None:
    done = ledger("2>&-", home, "check", "--db", str(home / "no-such-ledger"))
    assert done.returncode == 1 and done.stdout == ""
