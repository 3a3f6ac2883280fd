"""``check --all`` side by side with itself one ledger at a time, on homes of sample ledgers.

Three groups, each measured in one pytest-benchmark session:

* ``fleet-jobs``: ``check_all(verify_bodies=True, jobs=2)`` against ``jobs=1`` on a home of
  ``HEAVY_LEDGERS`` work-heavy ledgers (each the ``small`` sample of ``HEAVY_BODIES`` bodies:
  its check is mostly the single-threaded ``PRAGMA quick_check`` of a large session.db, so
  one ledger leaves the second core idle). Target: jobs 2 >= 1.7x jobs 1.
* ``fleet-dask``: the same home on a ``LocalCluster`` of 2 single-threaded worker processes
  (started once, outside the timing; Dask's own cost per task is inside it) against local
  ``jobs=1``. Target: >= 1.6x.
* ``fleet-overhead``: ``SMALL_LEDGERS`` small ledgers (a few dozen bodies each) checked by
  ``check_all`` locally (2 jobs) and on the 2-worker cluster, against the same checks run one
  after another in this process (no processes, no tasks). Each contender's ``extra_info``
  holds ledgers/s and wall milliseconds per ledger. Target: under 50 ms per ledger.

Every ledger of a home is a hard link of one cached sample's files (``bench/conftest.py``'s
cache), each in its own session directory, so a home costs no copying; the page cache is
warm for every contender alike.

Run: ``python3 -m pytest bench/bench_fleet.py -q -s``.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from capsem_core.check import check_ledger
from capsem_core.fleet import FleetReport, check_all, discover_home
from capsem_core.sample import write_sample_home

sys.path.insert(0, str(Path(__file__).parent))
from conftest import sample_ledger, warm  # noqa: E402

HEAVY_BODIES = int(os.environ.get("CAPSEM_BENCH_FLEET_BODIES", "100000"))
HEAVY_LEDGERS = int(os.environ.get("CAPSEM_BENCH_FLEET_LEDGERS", "8"))
SMALL_LEDGERS = int(os.environ.get("CAPSEM_BENCH_FLEET_SMALL", "500"))


def _linked_home(root: Path, source_db: Path, n: int) -> Path:
    """A home whose run/sessions holds n ledgers, each a hard link of the source's pair."""
    home = root / "home"
    sessions = home / "run" / "sessions"
    for i in range(n):
        d = sessions / f"s{i:04d}"
        d.mkdir(parents=True)
        for name in ("session.db", "session.bodies"):
            os.link(source_db.parent / name, d / name)
    return home


@pytest.fixture(scope="module")
def heavy_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = warm(sample_ledger("small", bodies=HEAVY_BODIES))
    return _linked_home(tmp_path_factory.mktemp("fleet-heavy"), source, HEAVY_LEDGERS)


@pytest.fixture(scope="module")
def small_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet-small")
    one = write_sample_home(root / "one", sessions=1, bodies=40).sessions[0].ledger_dir
    assert one is not None
    home = _linked_home(root, one / "session.db", SMALL_LEDGERS)
    shutil.rmtree(root / "one")
    return home


@pytest.fixture(scope="module")
def dask_client() -> Iterator[object]:
    pytest.importorskip("distributed")
    from capsem_core.fleet.cluster import connect

    with connect("local", workers=2) as client:
        yield client


def _sound(report: FleetReport, n: int) -> FleetReport:
    # A figure counts only when every ledger was really checked.
    assert len(report) == n and all(r.ok for r in report), [r.error for r in report if not r.ok][:3]
    return report


def _pedantic(benchmark, fn, rounds: int) -> FleetReport:  # type: ignore[no-untyped-def]
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)  # type: ignore[no-any-return]


@pytest.mark.benchmark(group="fleet-jobs")
def test_heavy_home_jobs_1(benchmark, heavy_home: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info["baseline"] = True
    _sound(_pedantic(benchmark, lambda: check_all([], home=heavy_home, verify_bodies=True, jobs=1), 3),
           HEAVY_LEDGERS)


@pytest.mark.benchmark(group="fleet-jobs")
def test_heavy_home_jobs_2(benchmark, heavy_home: Path) -> None:  # type: ignore[no-untyped-def]
    _sound(_pedantic(benchmark, lambda: check_all([], home=heavy_home, verify_bodies=True, jobs=2), 3),
           HEAVY_LEDGERS)


@pytest.mark.benchmark(group="fleet-dask")
def test_heavy_home_local_jobs_1(benchmark, heavy_home: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info["baseline"] = True
    _sound(_pedantic(benchmark, lambda: check_all([], home=heavy_home, verify_bodies=True, jobs=1), 3),
           HEAVY_LEDGERS)


@pytest.mark.benchmark(group="fleet-dask")
def test_heavy_home_dask_2_workers(benchmark, heavy_home: Path, dask_client) -> None:  # type: ignore[no-untyped-def]
    _sound(_pedantic(benchmark, lambda: check_all([], home=heavy_home, verify_bodies=True, client=dask_client), 3),
           HEAVY_LEDGERS)


def test_heavy_checks_in_process_cpu(figure, heavy_home: Path) -> None:
    """The heavy home's checks one after another in this process (no runner), printed as wall
    time and CPU time of every thread: how many cores one check keeps busy, and so the floor
    no schedule of them on this machine's cores can beat."""
    ledgers = sorted(heavy_home.rglob("session.db"))
    assert len(ledgers) == HEAVY_LEDGERS
    check_ledger(ledgers[0], verify_bodies=True)   # warm
    cores = os.cpu_count() or 1
    for _round in range(3):
        before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        assert all(check_ledger(db, verify_bodies=True).sound for db in ledgers)
        wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        figure(f"\n{HEAVY_LEDGERS} heavy checks in one process: {wall:.3f} s wall, {cpu:.3f} s CPU "
              f"({cpu / wall:.2f} cores busy); on {cores} cores no schedule takes less than {cpu / cores:.3f} s")


def _per_ledger(benchmark, n: int) -> None:  # type: ignore[no-untyped-def]
    median = benchmark.stats.stats.median
    benchmark.extra_info["ledgers_per_s"] = round(n / median, 1)
    benchmark.extra_info["ms_per_ledger"] = round(1000 * median / n, 2)
    print(f"\n{benchmark.name}: {n / median:,.0f} ledgers/s, {1000 * median / n:.2f} ms per ledger (wall)")


@pytest.mark.benchmark(group="fleet-overhead")
def test_small_ledgers_one_after_another_in_process(benchmark, small_home: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info["baseline"] = True
    dbs = [x.db_path for x in discover_home(small_home).ledgers]

    def each() -> int:
        return sum(check_ledger(db).sound for db in dbs)

    assert benchmark.pedantic(each, rounds=3, iterations=1, warmup_rounds=1) == SMALL_LEDGERS
    _per_ledger(benchmark, SMALL_LEDGERS)


@pytest.mark.benchmark(group="fleet-overhead")
def test_small_ledgers_check_all_local_jobs_2(benchmark, small_home: Path) -> None:  # type: ignore[no-untyped-def]
    _sound(_pedantic(benchmark, lambda: check_all([], home=small_home, jobs=2), 3), SMALL_LEDGERS)
    _per_ledger(benchmark, SMALL_LEDGERS)


@pytest.mark.benchmark(group="fleet-overhead")
def test_small_ledgers_check_all_dask_2_workers(benchmark, small_home: Path, dask_client) -> None:  # type: ignore[no-untyped-def]
    _sound(_pedantic(benchmark, lambda: check_all([], home=small_home, client=dask_client), 3), SMALL_LEDGERS)
    _per_ledger(benchmark, SMALL_LEDGERS)
