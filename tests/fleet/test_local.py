"""check --all on this machine: a process per ledger, the summary, --json, and ledgers that
crash their process or vanish mid-run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from tests.fleet.crashing import answer_or_crash
from tests.fleet.helpers import fleet_home, heavy_ledger, sized_home, verdicts, wait_for

from capsem_core import cores
from capsem_core.check import check_ledger
from capsem_core.check.incremental import VerifyOptions
from capsem_core.check.record import RECORD_DIR_ENV
from capsem_core.check.route import SessionRoute
from capsem_core.check.run import SMALL_CHECK_BYTES
from capsem_core.fleet import FleetLedger, check_all, discover_home
from capsem_core.fleet.local import ProcessDied, TaskRaised, run_each

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def heavy_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return heavy_ledger(tmp_path_factory.mktemp("heavy") / "ledger")


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory, heavy_source: Path):  # type: ignore[no-untyped-def]
    return fleet_home(tmp_path_factory.mktemp("fleet"), heavy_source)


def test_check_all_names_the_damaged_ledger_exits_1_and_its_json_holds_each_ledgers_check_report(shared_home, run_cli) -> None:  # type: ignore[no-untyped-def]
    done = run_cli(shared_home.home, "--all", "--verify-bodies", "--jobs", "2", "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["format"] == "capsem-ledger-check-all" and doc["exit_code"] == 1
    entries = {e["path"]: e for e in doc["ledgers"]}
    expected = [x.directory for x in discover_home(shared_home.home).ledgers]
    assert [e["path"] for e in doc["ledgers"]] == [str(p) for p in expected]
    main_db = shared_home.home / "sessions" / "main.db"
    for x in discover_home(shared_home.home).ledgers:
        path = x.directory
        entry = entries[str(path)]
        with cores.limit(cores.share(2)):  # each of two checks at once runs on its share
            # As check SESSION reaches a home's ledger: through main.db, under its id.
            alone = check_ledger(path / "session.db", verify_bodies=True,
                                 route=SessionRoute(main_db, x.session_id)).to_json()
        # The same fields as check --json, with the same values.
        assert {k: entry[k] for k in alone} == json.loads(json.dumps(alone))
        assert entry["ok"] is (path != shared_home.damaged)
    bad = entries[str(shared_home.damaged)]
    assert bad["verdict"] == "damaged" and bad["checks"]["verify_bodies"]["findings_total"] > 0
    assert doc["totals"]["damaged"] == 1 and doc["totals"]["ledgers"] == len(expected)


def test_the_text_summary_has_a_row_per_ledger_the_totals_and_names_each_damaged_one(shared_home, run_cli) -> None:  # type: ignore[no-untyped-def]
    done = run_cli(shared_home.home, "--all", "--verify-bodies")
    assert done.returncode == 1
    out = done.stdout
    assert "session" in out and "verdict" in out
    for ledger in discover_home(shared_home.home).ledgers:
        assert str(ledger.directory) in out
    assert f"1 damaged, 0 unreadable" in out
    tail = out.split("Damaged or unreadable (1):", 1)[1]
    # The damaged ledger is named, then its findings one line each: severity, code, check, message.
    assert "heavy-1" in tail and re.search(r"\n    error [a-z_]+ \(verify_bodies\): ", tail)
    assert "Traceback" not in done.stderr


def test_check_all_compares_a_home_ledgers_totals_with_main_db_as_check_session_does(
        tmp_path: Path, heavy_source: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    home = fleet_home(tmp_path, heavy_source, heavy=1, damaged=False)
    main_db = home.home / "sessions" / "main.db"
    conn = sqlite3.connect(main_db)
    with conn:
        stopped = {row[0] for row in conn.execute("SELECT id FROM sessions WHERE status = 'stopped'")}
        ledger = next(x for x in discover_home(home.home).ledgers if x.session_id in stopped)
        conn.execute("UPDATE sessions SET total_requests = total_requests + 7 WHERE id = ?", (ledger.session_id,))
    conn.close()
    loose = shutil.copytree(home.heavy[0], tmp_path / "tree" / "loose")

    done = run_cli(home.home, "--all", "--path", str(tmp_path / "tree"), "--strict", "--json")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    entries = {e["path"]: e for e in json.loads(done.stdout)["ledgers"]}
    graph = entries[str(ledger.directory)]["checks"]["identity_graph"]
    assert "route_totals_differ" in {f["code"] for f in graph["findings"]}
    single = run_cli(home.home, ledger.session_id, "--strict", "--json")
    assert single.returncode == 1
    assert json.loads(single.stdout)["checks"]["identity_graph"] == graph
    # A ledger found outside any home has no main.db to compare with, and says so.
    notes = entries[str(loose)]["checks"]["identity_graph"]["findings"]
    assert any(f["code"] == "route_not_compared" and "found outside a home" in f["message"] for f in notes)


def test_a_sound_home_exits_0(tmp_path: Path, heavy_source: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    home = fleet_home(tmp_path, heavy_source, heavy=1, damaged=False)
    done = run_cli(home.home, "--all", "--verify-bodies", "--jobs", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Every ledger is sound." in done.stdout


def test_ledger_strings_reach_the_terminal_escaped(tmp_path: Path, heavy_source: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    home = fleet_home(tmp_path, heavy_source, heavy=2, sessions=1)
    hostile = tmp_path / "tree" / "evil\x1b[31m\u202e"
    hostile.parent.mkdir()
    shutil.copytree(home.heavy[0], hostile)
    done = run_cli(home.home, "--all", "--path", str(tmp_path / "tree"))
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout
    assert "evil\\x1b[31m\\u202e" in done.stdout


def test_a_task_whose_process_crashes_is_that_tasks_answer_and_the_others_run_on() -> None:
    seen: list[int] = []
    answers = run_each(answer_or_crash, [0, 1, 2, 3, 4, 5], jobs=2, on_done=lambda i, a: seen.append(i))
    assert answers[:2] == [0, 10] and answers[4:] == [40, 50]
    assert isinstance(answers[2], ProcessDied) and answers[2].describe() == "its check process was killed by SIGSEGV"
    assert isinstance(answers[3], TaskRaised) and answers[3].text == "RuntimeError: this task broke"
    assert sorted(seen) == list(range(6))


def test_a_ledger_whose_check_process_is_killed_is_unreadable_and_the_rest_are_checked(
        tmp_path: Path, heavy_source: Path) -> None:
    home = fleet_home(tmp_path, heavy_source, heavy=6, sessions=1)
    killed: list[int] = []

    def kill_one_check() -> None:
        # As the kernel's OOM killer would: SIGKILL to one check process while it runs. The
        # tree is read from every process's parent id, not psutil.Process() of this process:
        # under qemu-user this process's own /proc entry is emulated and psutil calls it reused.
        while not killed:
            parents = {p.pid: p.info["ppid"] for p in psutil.process_iter(["ppid"])}
            servers = {pid for pid, ppid in parents.items() if ppid == os.getpid()}
            for pid, ppid in parents.items():
                if ppid in servers:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    killed.append(pid)
                    return

    killer = threading.Thread(target=kill_one_check, daemon=True)
    killer.start()
    report = check_all([], home=home.home, verify_bodies=True, jobs=2)
    killer.join(timeout=60)
    assert killed
    unreadable = [r for r in report if r.verdict == "unreadable"]
    assert len(unreadable) == 1
    assert unreadable[0].error == f"{unreadable[0].ledger.db_path}: its check process was killed by SIGKILL"
    rest = [r for r in report if r is not unreadable[0]]
    assert all(r.verdict == ("damaged" if r.ledger.directory == home.damaged else "ok") for r in rest)
    assert report.exit_code() == 1


def test_a_ledger_removed_mid_run_is_unreadable_and_the_rest_are_fine(tmp_path: Path, heavy_source: Path) -> None:
    home = fleet_home(tmp_path, heavy_source, heavy=3, sessions=2)
    ledgers = discover_home(home.home).ledgers
    smallest = min(ledgers, key=lambda x: x.size)  # checked last: largest go first

    def remove_the_last_after_the_first(result: object) -> None:
        if smallest.directory.exists():
            shutil.rmtree(smallest.directory)

    report = check_all(ledgers, verify_bodies=True, jobs=1, progress=remove_the_last_after_the_first)
    by_dir = {r.ledger.directory: r for r in report}
    gone = by_dir[smallest.directory]
    assert gone.verdict == "unreadable" and gone.report is None
    assert "session.db" in (gone.error or "") and "Traceback" not in (gone.error or "")
    assert verdicts(report) == {str(x.directory): ("unreadable" if x is smallest else
                                                   "damaged" if x.directory == home.damaged else "ok")
                                for x in ledgers}


def test_a_linked_session_directory_is_refused_by_name(tmp_path: Path, heavy_source: Path) -> None:
    home = fleet_home(tmp_path, heavy_source, heavy=2, sessions=1)
    (home.home / "run" / "sessions" / "via-link").symlink_to(home.heavy[0])
    report = check_all([], home=home.home, jobs=2)
    linked = next(r for r in report if r.ledger.directory.name == "via-link")
    assert linked.verdict == "unreadable" and "symbolic link" in (linked.error or "")


def test_check_all_returns_results_in_the_order_given(tmp_path: Path, heavy_source: Path) -> None:
    home = fleet_home(tmp_path, heavy_source, heavy=2, sessions=2)
    ledgers = list(reversed(discover_home(home.home).ledgers))
    report = check_all(ledgers, jobs=2)
    assert [r.ledger for r in report] == ledgers
    assert all(isinstance(r.ledger, FleetLedger) for r in report)


@pytest.fixture(scope="module")
def sized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    home = tmp_path_factory.mktemp("sized") / "home"
    big = sized_home(home)
    assert (big / "session.db").stat().st_size > SMALL_CHECK_BYTES
    return home, big


@pytest.mark.parametrize("jobs", [1, 2, 64])
def test_each_check_runs_on_its_share_of_the_cores(sized: tuple[Path, Path], jobs: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Two checks at once on 2 cores run one page-check thread each, not two each; a small
    # ledger's check runs one whatever its share (a second costs it more than it saves).
    monkeypatch.delenv(cores.THREADS_ENV, raising=False)
    home, big = sized
    report = check_all([], home=home, jobs=jobs)
    threads = {r.ledger.directory: r.report.checks["pages"].counts["threads"] for r in report if r.report is not None}
    assert len(threads) == 2
    assert {d: n for d, n in threads.items() if d != big} == {d: 1 for d in threads if d != big}
    assert threads[big] == cores.share(jobs)


def test_options_of_check_all_alone_are_refused_without_it(shared_home, run_cli) -> None:  # type: ignore[no-untyped-def]
    for args in (("--path", "x"), ("--jobs", "2"), ("--scheduler", "local")):
        done = run_cli(shared_home.home, *args)
        assert done.returncode == 2 and f"{args[0]} is an option of check --all" in done.stderr
    done = run_cli(shared_home.home, "--all", "--jobs", "0")
    assert done.returncode == 2 and "0 is out of range: from 1 to 4,096" in done.stderr
    done = run_cli(shared_home.home, "--all", "some-session")
    assert done.returncode == 2 and "no SESSION or --db" in done.stderr
    done = run_cli(shared_home.home, "--all", "--scheduler", "somewhere:8786")
    assert done.returncode == 2 and "--scheduler takes tcp://host:port or 'local'" in done.stderr


def test_a_home_with_no_ledgers_is_an_error_naming_where_it_looked(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    done = run_cli(tmp_path / "empty-home", "--all")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"capsem-ledger check: no ledgers found in {tmp_path}/empty-home/run/sessions, "
                                   f"{tmp_path}/empty-home/run/persistent")


def test_incremental_passes_through_to_every_ledgers_check(shared_home, run_cli) -> None:  # type: ignore[no-untyped-def]
    done = run_cli(shared_home.home, "--all", "--verify-bodies", "--incremental", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["totals"]["damaged"] == 1
    # Each sound ledger's own check ran incrementally (its coverage says so), as `check` would.
    sound = [entry for entry in report["ledgers"] if entry["ok"]]
    assert sound and all(entry["coverage"]["incremental"] for entry in sound)


def test_check_all_takes_the_verify_options_as_keywords_as_check_takes_them(
        tmp_path: Path, heavy_source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = fleet_home(tmp_path, heavy_source, heavy=1, sessions=1, damaged=False)
    # A run first, so the local runner's fork server has started with another record directory
    # in its environment: the records must go where the caller's environment says now.
    monkeypatch.setenv(RECORD_DIR_ENV, str(tmp_path / "earlier"))
    check_all([], home=home.home, verify_bodies=True, incremental=True, jobs=1)
    monkeypatch.setenv(RECORD_DIR_ENV, str(tmp_path / "records"))
    first = check_all([], home=home.home, verify_bodies=True, incremental=True, jobs=1)
    again = check_all([], home=home.home, verify_bodies=True, incremental=True, max_age=3600.0, jobs=1)
    assert first.sound and again.sound and len(again.results) == len(first.results) >= 2
    for result in again.results:
        coverage = result.report.to_json()["coverage"]
        # The first run recorded every block; the second proved them unchanged, reading none back.
        assert coverage["incremental"] and coverage["max_age_s"] == 3600.0
        assert coverage["verified"]["blocks"] == 0 and coverage["unchanged"]["blocks"] > 0
        assert Path(coverage["record"]["path"]).parent == tmp_path / "records"
    with pytest.raises(ValueError, match="not both"):
        check_all([], home=home.home, verify_bodies=True, incremental=True, options=VerifyOptions())


def test_scheduler_without_dask_says_in_one_line_how_to_install_it(tmp_path: Path, shared_home) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "no-dask"
    blocker.mkdir()
    (blocker / "distributed.py").write_text("raise ImportError('not installed')\n")
    env = dict(os.environ, CAPSEM_HOME=str(shared_home.home), PYTHONPATH=f"{blocker}{os.pathsep}{ROOT}")
    done = subprocess.run([sys.executable, "-m", "capsem_core", "check", "--all", "--scheduler", "local"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "capsem-ledger check: --scheduler needs Dask, which is not installed: pip install 'capsem-core[fleet]'"]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["sigterm", "sighup"])
def test_a_terminating_signal_ends_the_run_and_its_check_processes(tmp_path: Path, heavy_source: Path,
                                                                   signum: int, code: int) -> None:
    """SIGTERM, or SIGHUP as when the terminal goes away, ends ``check --all`` in one line
    with 128 + the signal, and no check process outlives it."""
    home = fleet_home(tmp_path, heavy_source, heavy=8, sessions=1)
    env = dict(os.environ, CAPSEM_HOME=str(home.home), CAPSEM_RUN_DIR=str(home.home / "run"))
    proc = subprocess.Popen([sys.executable, "-m", "capsem_core", "check", "--all", "--verify-bodies", "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        parent = psutil.Process(proc.pid)
        checks = wait_for(lambda: [c for s in parent.children() for c in s.children()], timeout=120, every=0.005)
        family = parent.children(recursive=True)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code and err.strip() == "capsem-ledger check: terminated"
    assert checks
    _, alive = psutil.wait_procs(family, timeout=30)
    assert alive == []


def test_a_task_whose_process_cannot_start_is_counted_not_checked_and_the_others_run_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork server gone mid-run (killed by the OOM killer, say): that task's start fails
    with a broken pipe or an EOF; it is an answer of its own, and the next start goes on."""
    import multiprocessing.context

    real = multiprocessing.context.ForkServerProcess.start
    starts: list[int] = []

    def start(self: multiprocessing.context.ForkServerProcess) -> None:
        starts.append(1)
        if len(starts) == 2:
            raise EOFError("unexpected EOF")
        real(self)

    monkeypatch.setattr(multiprocessing.context.ForkServerProcess, "start", start)
    seen: list[int] = []
    answers = run_each(answer_or_crash, [0, 1, 4, 5], jobs=1, on_done=lambda i, a: seen.append(i))
    assert answers[0] == 0 and answers[2:] == [40, 50] and sorted(seen) == [0, 1, 2, 3]
    assert isinstance(answers[1], ProcessDied)
    assert answers[1].describe() == (f"its check process could not be started (its fork server, {sys.executable}, "
                                     "did not answer: unexpected EOF); it was not checked")


_UNRUNNABLE = """
import multiprocessing, sys
from capsem_core import cli

# As for a user who cannot execute the interpreter, or an interpreter removed mid-run: the
# fork server's executable cannot be run, so no check process can ever be started.
multiprocessing.set_executable("/nonexistent/python3")
sys.exit(cli.main(["check", "--all", "--jobs", "2"]))
"""


def test_check_all_whose_fork_server_cannot_start_reports_each_ledger_not_checked_and_exits_1(
        tmp_path: Path, heavy_source: Path) -> None:
    home = fleet_home(tmp_path, heavy_source, heavy=1, sessions=2, damaged=False)
    env = {**os.environ, "CAPSEM_HOME": str(home.home), "CAPSEM_RUN_DIR": str(home.home / "run"), "NO_COLOR": "1"}
    # (The timeout only keeps a regression, which waits forever, from stalling the suite.)
    done = subprocess.run([sys.executable, "-c", _UNRUNNABLE], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    ledgers = discover_home(home.home).ledgers
    assert len(ledgers) >= 3 and f"{len(ledgers)} unreadable" in done.stdout
    for ledger in ledgers:
        assert (f"{ledger.db_path}: its check process could not be started (its fork server, "
                f"/nonexistent/python3, did not answer: ") in done.stdout
    assert "Traceback" not in done.stderr


_BROKEN_HELPER = """
import sys
from capsem_core import cli
from capsem_core.cli import fleet

def broken(*args, **kwargs):
    raise BrokenPipeError(32, "Broken pipe")

fleet.run = broken
sys.exit(cli.main(["check", "--all"]))
"""


def test_a_broken_pipe_that_is_not_our_output_is_a_failure_not_a_quiet_exit_0(tmp_path: Path) -> None:
    """A closed stdout (`| head`) ends a command quietly; a helper's broken pipe (the fork
    server's) must not pass for it."""
    done = subprocess.run([sys.executable, "-c", _BROKEN_HELPER], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CAPSEM_HOME": str(tmp_path)})
    assert done.returncode == 1 and done.stderr == "capsem-ledger check: Broken pipe\n", done.stderr
