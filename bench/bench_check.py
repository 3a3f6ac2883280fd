"""``capsem-ledger check`` side by side with its yardsticks, on a million-body small-body sample.

Three groups, each run in one pytest-benchmark session on the same warm ledger:

* ``check-structure``: the whole report without --verify-bodies (the page check, tables, the
  body index against the archive including every extent walk, tool lifecycle, ...) against
  ``PRAGMA quick_check`` alone (the baseline), with the page check on 1 and on 2 threads, and
  the page check alone (``check.run.check_pages``: quick_check per table plus the native
  page map) on 1 and 2 threads. Targets: check <= 0.65x of quick_check alone on 2 cores,
  check --verify-bodies <= 0.9x of it.
* ``check-verify``: the whole report with --verify-bodies against the native verify kernel
  alone (``_verify.verify_ledger``: index scan + verify + findings). Target: within 1.15x.
  The report also divides quick_check alone (which the check must run first) by the kernel
  alone: on this sample's 1.8 GB session.db that ratio alone is far above 1.15.
* ``check-verify-large``: the same pair on the 1 GiB large-body sample, where the bodies, not
  the SQLite pages, are the work (``CAPSEM_BENCH_RAW`` overrides the size).
* ``doctor-verify``: the doctor's approach (bench/baseline_doctor.py: session.db opened and
  queried once per body by its unique key, a pure-Python cursor, blake3 per segment and per
  body) on the first ``DOCTOR_SUBSET`` bodies in archive order, extrapolated per body to the
  whole ledger (a full run takes about an hour). Also the same approach with one connection
  kept open, a faster variant the doctor does not use. Target: check --verify-bodies at least
  100x faster than the doctor.

The ledger is ``sample.write_sample_ledger(mix="small", bodies=1_000_000, seed=1)`` (about
3.5 million rows in all; several minutes to write), cached under ``$CAPSEM_BENCH_CACHE``
(default ``~/.cache/capsem-core-bench``) and reused while the sample generator's output is
the same. The last test prints the ratios.

Run: ``python3 -m pytest bench/bench_check.py -q -s`` (``CAPSEM_BENCH_BODIES`` overrides the
ledger size, e.g. 100000 for a quick run).
"""

from __future__ import annotations

import os
import resource
import sqlite3
import sys
import urllib.parse
from pathlib import Path

import pytest

from capsem_core import verify as _verify
from capsem_core.check import check_ledger
from capsem_core.check.run import check_pages
from capsem_core.pages.check import PER_TABLE

sys.path.insert(0, str(Path(__file__).parent))
from baseline_doctor import doctor_verify_bodies  # noqa: E402
from conftest import BODIES  # noqa: E402

DOCTOR_SUBSET = int(os.environ.get("CAPSEM_BENCH_DOCTOR_SUBSET", "2000"))
BASELINE_MMAP_BYTES = 1 << 31

_means: dict[str, float] = {}


def quick_check(db: Path) -> list[str]:
    conn = sqlite3.connect("file:" + urllib.parse.quote(str(db.absolute())) + "?mode=ro", uri=True)
    try:
        # Through a memory map of the whole file (check's own connections read with read(2),
        # keeping their resident size bounded): 0-5% faster, so the yardstick is quick_check
        # at its fastest.
        conn.execute(f"PRAGMA mmap_size = {BASELINE_MMAP_BYTES}").fetchall()
        return [r[0] for r in conn.execute("PRAGMA quick_check")]
    finally:
        conn.close()


def _run(benchmark, key: str, fn, *args, rounds: int = 3, **kwargs):
    result = benchmark.pedantic(fn, args=args, kwargs=kwargs, rounds=rounds, iterations=1, warmup_rounds=1)
    _means[key] = benchmark.stats.stats.mean
    return result


@pytest.mark.benchmark(group="check-structure")
def test_quick_check_alone(benchmark, small: Path) -> None:
    benchmark.extra_info["baseline"] = True
    assert _run(benchmark, "quick_check", quick_check, small) == ["ok"]


@pytest.mark.benchmark(group="check-structure")
@pytest.mark.parametrize("threads", [1, 2])
def test_page_check_alone(benchmark, small: Path, threads: int) -> None:
    result = _run(benchmark, f"pages_{threads}", check_pages, small, threads=threads)
    assert result.counts["damaged"] is False and result.counts["method"] == PER_TABLE
    assert result.counts["threads"] == threads


@pytest.mark.benchmark(group="check-structure")
@pytest.mark.parametrize("threads", [1, 2])
def test_check_without_verify(benchmark, small: Path, threads: int) -> None:
    report = _run(benchmark, f"check_{threads}", check_ledger, small, page_threads=threads)
    assert report.sound and report.checks["pages"].counts["method"] == PER_TABLE
    assert report.checks["body_archive"].counts["bodies"] >= BODIES


@pytest.mark.benchmark(group="check-verify")
def test_verify_kernel_alone(benchmark, small: Path) -> None:
    verified, findings = _run(benchmark, "kernel", _verify.verify_ledger, small)
    assert findings == [] and verified >= BODIES


@pytest.mark.benchmark(group="check-verify")
def test_check_with_verify(benchmark, small: Path) -> None:
    report = _run(benchmark, "check_verify", check_ledger, small, verify_bodies=True)
    assert report.sound
    assert report.checks["verify_bodies"].counts["verified"] >= BODIES


@pytest.mark.benchmark(group="check-verify-large")
def test_verify_kernel_alone_on_large_bodies(benchmark, large: Path) -> None:
    verified, findings = _run(benchmark, "kernel_large", _verify.verify_ledger, large)
    assert findings == [] and verified > 0


@pytest.mark.benchmark(group="check-verify-large")
def test_check_with_verify_on_large_bodies(benchmark, large: Path) -> None:
    report = _run(benchmark, "check_verify_large", check_ledger, large, verify_bodies=True)
    assert report.sound


@pytest.mark.benchmark(group="doctor-verify")
def test_doctor_verify_subset(benchmark, small: Path) -> None:
    result = _run(benchmark, "doctor_subset", doctor_verify_bodies, small, DOCTOR_SUBSET, rounds=1)
    assert result.failures == [] and result.bodies == DOCTOR_SUBSET


@pytest.mark.benchmark(group="doctor-verify")
def test_doctor_verify_subset_one_connection(benchmark, small: Path) -> None:
    result = _run(benchmark, "doctor_one_conn", doctor_verify_bodies, small, DOCTOR_SUBSET * 10,
                  reopen_db=False, rounds=1)
    assert result.failures == [] and result.bodies == DOCTOR_SUBSET * 10


def test_report_ratios(figure, small: Path, capsys) -> None:
    if not {"quick_check", "check_2", "kernel", "check_verify", "doctor_subset", "doctor_one_conn"} <= set(_means):
        pytest.skip("run the whole module to get the ratios")
    conn = sqlite3.connect("file:" + urllib.parse.quote(str(small.absolute())) + "?mode=ro", uri=True)
    bodies = conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0]
    conn.close()
    doctor_full = _means["doctor_subset"] / DOCTOR_SUBSET * bodies
    one_conn_full = _means["doctor_one_conn"] / (DOCTOR_SUBSET * 10) * bodies
    cores = os.cpu_count() or 1
    # The CPU one report costs, all threads together: on `cores` cores no schedule of that
    # work can take less wall time than its share per core.
    # quick_check runs on one thread, so on a quiet machine its CPU is its wall time: the
    # ratio of the two is the best any schedule could reach, whatever the load.
    floors = {}
    for key, fn, kwargs in (("quick_check", quick_check, {}), ("check", check_ledger, {}),
                            ("check_verify", check_ledger, {"verify_bodies": True})):
        before = resource.getrusage(resource.RUSAGE_SELF)
        fn(small, **kwargs)
        after = resource.getrusage(resource.RUSAGE_SELF)
        floors[key] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    qc_cpu = floors.pop("quick_check")
    lines = [
        f"small: {small} ({bodies:,} bodies)",
        *[f"page check alone, {t} thread(s) / quick_check alone: {_means[f'pages_{t}']:.3f} s / "
          f"{_means['quick_check']:.3f} s = {_means[f'pages_{t}'] / _means['quick_check']:.2f}x"
          for t in (1, 2) if f"pages_{t}" in _means],
        *[f"check (no verify), page check on {t} thread(s) / quick_check alone: {_means[f'check_{t}']:.3f} s / "
          f"{_means['quick_check']:.3f} s = {_means[f'check_{t}'] / _means['quick_check']:.2f}x (target <= 0.65x "
          f"on 2 cores)" for t in (1, 2) if f"check_{t}" in _means],
        f"check --verify-bodies / quick_check alone: {_means['check_verify']:.3f} s / {_means['quick_check']:.3f} s = "
        f"{_means['check_verify'] / _means['quick_check']:.2f}x (target <= 0.90x on 2 cores)",
        *[f"CPU of one {key.replace('_', ' --')} (every thread): {cpu:.3f} s, of quick_check alone {qc_cpu:.3f} s: on "
          f"{cores} cores it cannot take less than {cpu / cores / qc_cpu:.2f}x quick_check's time"
          for key, cpu in floors.items()],
        f"check --verify-bodies / verify kernel alone: {_means['check_verify']:.3f} s / {_means['kernel']:.3f} s = "
        f"{_means['check_verify'] / _means['kernel']:.2f}x (target <= 1.15x)",
        f"quick_check alone / verify kernel alone: {_means['quick_check']:.3f} s / {_means['kernel']:.3f} s = "
        f"{_means['quick_check'] / _means['kernel']:.2f}x (check --verify-bodies runs quick_check first, so on "
        f"this ledger it is at least 1 + that far from the kernel alone; on {cores} cores, overlapping "
        f"the two could at best reach (quick_check + cores x kernel) / (cores x kernel) = "
        f"{(_means['quick_check'] + cores * _means['kernel']) / (cores * _means['kernel']):.2f}x)",
        f"large-body sample, check --verify-bodies / verify kernel alone: "
        f"{_means.get('check_verify_large', float('nan')):.3f} s / {_means.get('kernel_large', float('nan')):.3f} s = "
        f"{_means.get('check_verify_large', float('nan')) / _means.get('kernel_large', float('nan')):.2f}x",
        f"doctor approach: {_means['doctor_subset']:.2f} s for the first {DOCTOR_SUBSET:,} bodies, extrapolated "
        f"per body to {doctor_full:.1f} s for all {bodies:,} (a full run would take that long)",
        f"doctor (extrapolated) / check --verify-bodies: {doctor_full / _means['check_verify']:.0f}x "
        f"(target >= 100x)",
        f"doctor's approach with one connection: {_means['doctor_one_conn']:.2f} s for {DOCTOR_SUBSET * 10:,} "
        f"bodies, extrapolated to {one_conn_full:.1f} s; / check --verify-bodies: "
        f"{one_conn_full / _means['check_verify']:.1f}x; / verify kernel alone: "
        f"{one_conn_full / _means['kernel']:.1f}x",
    ]
    with capsys.disabled():
        figure("\n" + "\n".join(lines))
