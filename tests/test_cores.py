"""The thread budget: the cores this process may run on, narrowed by CAPSEM_CORE_THREADS or by
a fleet runner's limit, and what every parallel step of a check then uses."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from capsem_core import cores
from capsem_core.check import check_ledger
from capsem_core.check.run import SMALL_CHECK_BYTES, check_pages
from capsem_core.sample import write_sample_ledger


def test_the_budget_is_the_cores_this_process_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cores.THREADS_ENV, raising=False)
    assert cores.budget() == cores.available() >= 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity call here")
def test_a_process_pinned_to_one_core_has_a_budget_of_one() -> None:
    # As taskset or a container's cpuset narrows it (the native kernels' own fallback
    # counts every online core, so the Python layer always passes the budget down).
    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
           "from capsem_core import cores; print(cores.available(), cores.budget(), cores.threads(0))"
    env = {k: v for k, v in os.environ.items() if k != cores.THREADS_ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.split() == ["1", "1", "1"]


@pytest.mark.parametrize("value, expected", [("1", 1), (" 1 ", 1), ("0", None), ("-2", None), ("two", None),
                                             ("", None), ("100000", None)])
def test_capsem_core_threads_narrows_the_budget_never_widens_it_and_a_bad_value_is_ignored(
        monkeypatch: pytest.MonkeyPatch, value: str, expected: int | None) -> None:
    monkeypatch.setenv(cores.THREADS_ENV, value)
    assert cores.budget() == (expected if expected is not None else cores.available())


def test_a_limit_holds_inside_its_block_only_and_an_explicit_count_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cores.THREADS_ENV, "1")
    with cores.limit(1):
        assert cores.budget() == 1 and cores.threads(0) == 1 and cores.threads(None) == 1
        assert cores.threads(3) == 3
        with cores.limit(0):  # never below one thread
            assert cores.budget() == 1
    with cores.limit(5):
        assert cores.budget() == 5
    assert cores.budget() == 1


def test_a_limit_holds_on_its_own_thread_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # As two tasks of one Dask worker, each under its own limit at once.
    monkeypatch.delenv(cores.THREADS_ENV, raising=False)
    both_inside = threading.Barrier(2, timeout=10)
    seen: dict[str, int] = {}

    def task(name: str, n: int) -> None:
        with cores.limit(n):
            both_inside.wait()
            seen[name] = cores.budget()   # while the other holds its own limit
            both_inside.wait()
        seen[name + " after"] = cores.budget()

    threads = [threading.Thread(target=task, args=("a", 3)), threading.Thread(target=task, args=("b", 7))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"a": 3, "b": 7, "a after": cores.available(), "b after": cores.available()}
    assert cores.budget() == cores.available()


def test_a_share_is_the_cores_divided_by_the_checks_running_at_once() -> None:
    n = cores.available()
    assert cores.share(1) == n and cores.share(n) == 1 and cores.share(4 * n) == 1
    assert cores.share(2) == max(1, n // 2) and cores.share(0) == n


@pytest.fixture(scope="module")
def small_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("budget") / "ledger"
    write_sample_ledger(directory, mix="small", bodies=200, seed=3)
    return directory / "session.db"


def test_the_page_check_runs_on_the_budget_unless_told(small_ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cores.THREADS_ENV, "1")
    assert check_pages(small_ledger).counts["threads"] == 1
    assert check_ledger(small_ledger, verify_bodies=True).checks["pages"].counts["threads"] == 1
    assert check_pages(small_ledger, threads=2).counts["threads"] == 2
    with cores.limit(3):
        assert check_pages(small_ledger).counts["threads"] == 3


def test_a_small_ledgers_check_runs_one_page_thread_unless_told(small_ledger: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Under SMALL_CHECK_BYTES a second worker's connection costs more than its share saves.
    monkeypatch.delenv(cores.THREADS_ENV, raising=False)
    assert small_ledger.stat().st_size < SMALL_CHECK_BYTES
    with cores.limit(3):
        assert check_ledger(small_ledger).checks["pages"].counts["threads"] == 1
        assert check_ledger(small_ledger, page_threads=2).checks["pages"].counts["threads"] == 2


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), (cores.MAX_THREADS + 1, ValueError),
                                              (2**31, ValueError), (1.5, TypeError), (float("nan"), TypeError), (True, TypeError),
                                              ("2", TypeError), (None, TypeError)])
def test_a_threads_argument_outside_0_to_the_bound_is_refused_by_name(value: object, error: type) -> None:
    with pytest.raises(error, match="page_threads"):
        cores.checked(value, "page_threads")
    assert cores.checked(0) == 0 and cores.checked(cores.MAX_THREADS) == cores.MAX_THREADS


def test_check_ledger_refuses_a_page_thread_count_that_would_open_a_connection_each(tmp_path: Path) -> None:
    """page_threads=2**31 opened connection after connection, for ever; now it is a ValueError
    before anything is opened, as the other arguments of the wrong kind are."""
    write_sample_ledger(tmp_path / "l", bodies=20)
    db = tmp_path / "l" / "session.db"
    for kwargs, error in (({"page_threads": 2**31}, ValueError), ({"page_threads": 1.0}, TypeError),
                          ({"rows": float("nan")}, TypeError), ({"rows": -1}, ValueError),
                          ({"options": "1/2"}, TypeError), ({"route": "abc"}, TypeError)):
        with pytest.raises(error):
            check_ledger(db, **kwargs)  # type: ignore[arg-type]
    assert check_ledger(db, page_threads=cores.MAX_THREADS).sound
