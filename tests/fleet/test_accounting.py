"""check --all accounts for every directory it finds or is given: checked, unreadable (with
the OS's reason), a --path missing or not searched, or not a ledger; it says "sound" only
when every ledger found was read, and names each damaged or warned ledger's findings."""

from __future__ import annotations

import errno
import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from capsem_core.fleet import discover_home, discover_tree
from capsem_core.sample import write_sample_home, write_sample_ledger
from tests.fleet.helpers import damage_a_body

# The module, not the function the package exports under the same name.
discovery = importlib.import_module("capsem_core.fleet.discover")

ROOT = Path(__file__).resolve().parents[2]


def small_home(root: Path, sessions: int = 5) -> tuple[Path, list[Path]]:
    """A home of ``sessions`` small sample sessions, every file readable by anyone (0755 all
    the way down from ``root``, so an unprivileged user can reach it)."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    summary = write_sample_home(root / "home", sessions=sessions, seed=3, bodies=20)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root / "home", [s.ledger_dir for s in summary.sessions if s.ledger_dir is not None]


@pytest.fixture
def home(tmp_path: Path) -> tuple[Path, list[Path]]:
    return small_home(tmp_path / "tree")


# --- an unreadable session directory -------------------------------------------------------------

def _unprivileged_runners() -> list[object]:
    """Ways to run the CLI without the power to read past a mode-000 directory: as nobody,
    and as root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (a root login's power over
    permissions); each skipped, saying why, where it cannot run here."""
    setpriv = shutil.which("setpriv")
    out: list[object] = []
    nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] if setpriv else None
    no_caps = [setpriv, "--bounding-set=-dac_override,-dac_read_search"] if setpriv else None
    for name, prefix in (("nobody", nobody), ("root-without-dac-capabilities", no_caps)):
        reason = None
        if prefix is None:
            reason = "setpriv is not installed"
        elif os.geteuid() != 0:
            reason = "needs root to drop to an unprivileged user"
        else:
            # The check's processes are started from sys.executable: the user must be able to run it.
            probe = subprocess.run([*prefix, sys.executable, "-c",
                                    "import subprocess, sys; subprocess.run([sys.executable, '-c', ''], check=True)"],
                                   capture_output=True, cwd="/")
            if probe.returncode != 0:
                reason = f"{name} cannot run {sys.executable} here (its interpreter lies under a private directory)"
        out.append(pytest.param(prefix, id=name, marks=pytest.mark.skipif(reason is not None, reason=reason or "")))
    return out


@pytest.mark.parametrize("prefix", _unprivileged_runners())
def test_check_all_as_an_unprivileged_user_counts_an_unreadable_session_directory_and_exits_1(
        home: tuple[Path, list[Path]], prefix: list[str]) -> None:
    root, ledgers = home
    locked = ledgers[0]
    locked.chmod(0)
    env = dict(os.environ, CAPSEM_HOME=str(root), CAPSEM_RUN_DIR=str(root / "run"), NO_COLOR="1",
               PYTHONPATH=str(ROOT / "src"))
    argv = [*prefix, sys.executable, "-m", "capsem_core", "check", "--all"]
    try:
        text = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/", timeout=300)
        as_json = subprocess.run([*argv, "--json"], capture_output=True, text=True, env=env, cwd="/", timeout=300)
    finally:
        locked.chmod(0o755)
    assert text.returncode == 1, text.stdout + text.stderr
    assert f"Ledgers checked: {len(ledgers) - 1}" in text.stdout
    assert f"  {locked}: cannot be looked into: Permission denied" in text.stdout
    assert "Every ledger is sound" not in text.stdout
    assert text.stdout.rstrip().endswith(f"Not known to be sound: 1 directory could not be read "
                                         f"({len(ledgers) - 1} of {len(ledgers) - 1} ledgers checked sound).")
    doc = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and doc["sound"] is False and doc["exit_code"] == 1
    assert doc["unchecked"] == [{"path": str(locked), "status": "unreadable", "given": False, "errno": "EACCES",
                                 "reason": "cannot be looked into: Permission denied"}]
    assert doc["totals"]["directories_unreadable"] == 1 and len(doc["ledgers"]) == len(ledgers) - 1


def _refusing(monkeypatch: pytest.MonkeyPatch, locked: Path, code: int = errno.EACCES) -> None:
    """Make looking into ``locked`` fail as it does without search permission (root passes
    mode 000, so the OSError is injected where discovery stats a directory's entries)."""
    looked: Callable[[Path], bool] = discovery._holds_ledger

    def holds_ledger(directory: Path) -> bool:
        if directory == locked:
            raise OSError(code, os.strerror(code), str(directory / "session.db"))
        return looked(directory)

    monkeypatch.setattr(discovery, "_holds_ledger", holds_ledger)


def test_check_all_counts_an_unreadable_session_directory_and_exits_1(
        home: tuple[Path, list[Path]], run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    root, ledgers = home
    _refusing(monkeypatch, ledgers[1])
    done = run_cli(root, "--all", "--jobs", "1")
    assert done.returncode == 1
    assert "Not read (1):" in done.stdout and f"  {ledgers[1]}: cannot be looked into: Permission denied" in done.stdout
    assert "Every ledger is sound" not in done.stdout and "1 directory could not be read" in done.stdout
    doc = json.loads(run_cli(root, "--all", "--jobs", "1", "--json").stdout)
    assert [u["path"] for u in doc["unchecked"]] == [str(ledgers[1])]
    assert doc["unchecked"][0]["errno"] == "EACCES" and doc["sound"] is False
    assert str(ledgers[1]) not in [e["path"] for e in doc["ledgers"]]


def test_a_session_directory_that_fails_with_another_os_error_is_unreadable_with_that_reason(
        home: tuple[Path, list[Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    root, ledgers = home
    _refusing(monkeypatch, ledgers[0], errno.EIO)
    found = discover_home(root)
    assert [(u.path, u.status, u.errno) for u in found.unchecked] == [(ledgers[0], "unreadable", "EIO")]
    assert "Input/output error" in found.unchecked[0].reason


def test_a_tree_with_a_directory_that_cannot_be_listed_is_not_sound(tmp_path: Path, run_cli,  # type: ignore[no-untyped-def]
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = small_home(tmp_path / "tree", sessions=1)
    write_sample_ledger(tmp_path / "archive" / "a" / "s1", bodies=20)
    (tmp_path / "archive" / "b").mkdir()
    scandir = os.scandir

    def refusing(path: object) -> object:
        if Path(str(path)) == tmp_path / "archive" / "b":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(discovery.os, "scandir", refusing)
    found = discover_tree(tmp_path / "archive")
    monkeypatch.setattr(discovery.os, "scandir", scandir)
    assert [x.directory.name for x in found.ledgers] == ["s1"]
    assert [(u.path, u.reason) for u in found.unchecked] == [(tmp_path / "archive" / "b",
                                                              "cannot be listed: Permission denied")]


# --- --path that cannot be searched ---------------------------------------------------------------

def test_check_all_with_a_path_that_does_not_exist_names_it_and_exits_1(home: tuple[Path, list[Path]],  # type: ignore[no-untyped-def]
                                                                       run_cli) -> None:
    root, ledgers = home
    done = run_cli(root, "--all", "--jobs", "1", "--path", "/typo")
    assert done.returncode == 1
    assert "  --path /typo: does not exist" in done.stdout
    assert done.stdout.rstrip().endswith(f"Not known to be sound: --path /typo does not exist "
                                         f"({len(ledgers)} of {len(ledgers)} ledgers checked sound).")
    doc = json.loads(run_cli(root, "--all", "--jobs", "1", "--path", "/typo", "--json").stdout)
    assert doc["exit_code"] == 1 and doc["sound"] is False and doc["totals"]["paths_not_searched"] == 1
    assert doc["unchecked"] == [{"path": "/typo", "status": "missing", "reason": "does not exist", "given": True,
                                 "errno": "ENOENT"}]


def test_check_all_with_only_a_missing_path_and_an_empty_home_reports_it_and_exits_1(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                                      run_cli) -> None:
    done = run_cli(tmp_path / "empty-home", "--all", "--path", str(tmp_path / "nowhere"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"--path {tmp_path}/nowhere: does not exist" in done.stdout
    assert "Not known to be sound: no ledger was checked; --path" in done.stdout


def test_a_ledger_deeper_than_the_search_goes_makes_the_run_not_known_to_be_sound(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                                 run_cli) -> None:
    deep = tmp_path / "archive"
    for i in range(discovery.MAX_TREE_DEPTH + 1):
        deep = deep / f"d{i}"
    write_sample_ledger(deep / "s1", bodies=20)
    write_sample_ledger(tmp_path / "archive" / "near", bodies=20)
    done = run_cli(tmp_path / "empty-home", "--all", "--jobs", "1", "--path", str(tmp_path / "archive"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "levels: not searched" in done.stdout
    assert done.stdout.rstrip().endswith("Not known to be sound: 1 directory not searched (1 of 1 ledger checked sound).")
    doc = json.loads(run_cli(tmp_path / "empty-home", "--all", "--jobs", "1", "--path", str(tmp_path / "archive"),
                             "--json").stdout)
    assert doc["exit_code"] == 1 and doc["sound"] is False and doc["totals"]["directories_not_searched"] == 1
    assert [u["status"] for u in doc["unchecked"]] == ["not searched"]


def test_a_path_that_is_a_link_or_a_file_is_refused_by_name_and_an_empty_tree_is_not_a_ledger(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    (tmp_path / "file.txt").write_text("x")
    found = discovery.discover([tmp_path / "link", tmp_path / "file.txt", tmp_path / "empty"])
    assert [(u.path.name, u.status, u.given, u.fails) for u in found.unchecked] == [
        ("link", "refused", True, True), ("file.txt", "refused", True, True), ("empty", "not a ledger", True, False)]
    assert "symbolic link" in found.unchecked[0].reason and found.unchecked[2].reason == "no ledger found under it"


def test_a_home_entry_holding_no_ledger_is_listed_as_not_a_ledger_and_the_run_stays_sound(
        home: tuple[Path, list[Path]], run_cli) -> None:  # type: ignore[no-untyped-def]
    root, ledgers = home
    (root / "run" / "sessions" / "being-set-up").mkdir()
    (root / "run" / "sessions" / "stray.txt").write_text("x")
    done = run_cli(root, "--all", "--jobs", "1")
    assert done.returncode == 0, done.stdout
    assert "Not a ledger (2):" in done.stdout and "being-set-up: holds neither session.db nor session.bodies" in done.stdout
    assert "stray.txt: not a directory" in done.stdout
    assert done.stdout.rstrip().endswith("Every ledger is sound.")


def test_a_home_whose_ledgers_are_all_readable_is_sound_and_exits_0(home: tuple[Path, list[Path]],  # type: ignore[no-untyped-def]
                                                                    run_cli) -> None:
    root, ledgers = home
    done = run_cli(root, "--all", "--jobs", "1")
    assert done.returncode == 0 and f"Ledgers checked: {len(ledgers)}" in done.stdout
    assert "Not checked" not in done.stdout and done.stdout.rstrip().endswith("Every ledger is sound.")
    doc = json.loads(run_cli(root, "--all", "--jobs", "1", "--json").stdout)
    assert doc["sound"] is True and doc["exit_code"] == 0 and doc["unchecked"] == []
    assert {k: doc["totals"][k] for k in ("directories_unreadable", "paths_not_searched", "not_ledgers")} == \
        {"directories_unreadable": 0, "paths_not_searched": 0, "not_ledgers": 0}


# --- findings, and what an incremental verify proved ----------------------------------------------

def test_each_damaged_ledgers_findings_are_one_line_each_and_details_lists_them_all(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                                   run_cli) -> None:
    root, ledgers = small_home(tmp_path / "tree", sessions=3)
    damage_a_body(ledgers[0])
    done = run_cli(root, "--all", "--jobs", "1", "--verify-bodies")
    assert done.returncode == 1
    section = done.stdout.split("Damaged or unreadable (1):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section[0].startswith("  damaged  ") and str(ledgers[0]) in section[0]
    lines = section[1:]
    assert lines and all(line.startswith("    error ") or line.startswith("    ... ") for line in lines)
    assert any(" (verify_bodies): " in line for line in lines)
    assert len([line for line in lines if line.startswith("    error ")]) <= 5
    detailed = run_cli(root, "--all", "--jobs", "1", "--verify-bodies", "--details")
    doc = json.loads(run_cli(root, "--all", "--jobs", "1", "--verify-bodies", "--json").stdout)
    bad = next(e for e in doc["ledgers"] if e["path"] == str(ledgers[0]))
    total = sum(c["findings_total"] for c in bad["checks"].values() if c["status"] != "skipped")
    block = detailed.stdout.split("Damaged or unreadable (1):\n", 1)[1].split("\n\n", 1)[0]
    assert len([ln for ln in block.splitlines() if ln.startswith("    ") and not ln.startswith("      ")]) == total
    assert "\n      at " in block
    refused = run_cli(root, "--details")
    assert refused.returncode == 2 and "--details is an option of check --all" in refused.stderr


def test_a_second_incremental_run_says_bodies_were_proven_unchanged_not_zero_matched(
        home: tuple[Path, list[Path]], run_cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, ledgers = home
    monkeypatch.setenv("CAPSEM_CORE_VERIFIED_DIR", str(tmp_path / "verified"))
    first = run_cli(root, "--all", "--jobs", "1", "--verify-bodies", "--incremental", "--json")
    bodies = {e["path"]: e["checks"]["body_archive"]["counts"]["bodies"] for e in json.loads(first.stdout)["ledgers"]}
    done = run_cli(root, "--all", "--jobs", "1", "--verify-bodies", "--incremental")
    assert done.returncode == 0
    for path, n in bodies.items():
        row = next(line for line in done.stdout.splitlines() if path in line)
        assert f"{n} bodies proven unchanged, 0 read back" in row
    # check --db keeps a record of its own: its second run says the same.
    run_cli(root, "--db", str(ledgers[0]), "--verify-bodies", "--incremental")
    single = run_cli(root, "--db", str(ledgers[0]), "--verify-bodies", "--incremental")
    n = bodies[str(ledgers[0])]
    assert f"  {n} bodies proven unchanged, 0 read back\n" in single.stdout, single.stdout
    assert "read back and match their hashes" not in single.stdout


def test_unchecked_paths_reach_the_terminal_escaped(tmp_path: Path, run_cli,  # type: ignore[no-untyped-def]
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = small_home(tmp_path / "tree", sessions=1)
    hostile = root / "run" / "sessions" / "evil\x1b[31m\u202e"
    hostile.mkdir()
    _refusing(monkeypatch, hostile)
    done = run_cli(root, "--all", "--jobs", "1", "--path", str(tmp_path / "gone\x1b]0;x\x07"))
    assert done.returncode == 1
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout and "\x07" not in done.stdout
    assert "evil\\x1b[31m\\u202e: cannot be looked into" in done.stdout


def test_mode_bits_of_the_test_tree_let_an_unprivileged_user_reach_it(home: tuple[Path, list[Path]]) -> None:
    root, ledgers = home
    for path in (root.parent, root, ledgers[0], ledgers[0] / "session.db"):
        assert path.stat().st_mode & stat.S_IROTH


def test_a_main_db_that_cannot_be_read_fails_all_strict_as_it_fails_check_session(home: tuple[Path, list[Path]],
                                                                                    run_cli) -> None:  # type: ignore[no-untyped-def]
    """check SESSION --strict exits 1 on a garbled main.db; --all --strict dropped the totals'
    comparison to a note and said every ledger was sound."""
    root, _ledgers = home
    (root / "sessions" / "main.db").write_bytes(os.urandom(8192))
    done = run_cli(root, "--all", "--strict", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 1, done.stderr
    assert report["totals"]["warn"] == len(report["ledgers"]) > 0
    for ledger in report["ledgers"]:
        assert "route_main_db_unreadable" in {f["code"] for f in ledger["checks"]["identity_graph"]["findings"]}


# --- a sidecar of session.db that is not a regular file ------------------------------------------

@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm"])
def test_a_fifo_beside_session_db_makes_its_ledger_unreadable_by_name_and_never_hangs(
        home: tuple[Path, list[Path]], suffix: str) -> None:
    """SQLite opened a FIFO -journal (a hot journal's test) without O_NONBLOCK and retried the
    open on every signal: the check process, and check --all, waited for ever, SIGTERM
    included. A FIFO -wal in a writable directory read as an empty log (exit 0, "sound"); a
    FIFO -shm was "disk I/O error", naming neither file."""
    root, ledgers = home
    ledger = ledgers[0]
    sidecar = ledger / f"session.db{suffix}"
    sidecar.unlink(missing_ok=True)
    os.mkfifo(sidecar)
    env = dict(os.environ, CAPSEM_HOME=str(root), CAPSEM_RUN_DIR=str(root / "run"), NO_COLOR="1",
               PYTHONPATH=str(ROOT / "src"))
    argv = [sys.executable, "-m", "capsem_core", "check", "--all", "--jobs", "2", "--json"]
    # The timeout only guards against the hang this test is about.
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["sound"] is False and doc["totals"]["unreadable"] == 1
    assert doc["totals"]["ledgers"] == len(ledgers)
    [bad] = [e for e in doc["ledgers"] if e["verdict"] == "unreadable"]
    assert bad["path"] == str(ledger)
    assert bad["error"] == f"{sidecar}: not a regular file: a {suffix} beside a database must be one"
    assert stat.S_ISFIFO(os.lstat(sidecar).st_mode)   # left as it was
