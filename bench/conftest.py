"""Shared bench helpers: after the pytest-benchmark table, print each group's same-run ratios
to its baseline (the benchmark that sets ``benchmark.extra_info["baseline"] = True``); the
cached sample ledgers every bench reads; the load average printed beside each benchmark."""

from __future__ import annotations

import os
import shutil
import time
from collections import defaultdict
from pathlib import Path

import pytest


# Figures a benchmark measures besides its timed rounds (paired ratios, peak memory, ...):
# printed as they come, and collected for the results file.
_FIGURES: list[tuple[str, str]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--results", default=None, metavar="FILE",
                     help="write the run's ratios and figures, with the machine they ran on, to FILE "
                          "(make bench: docs/bench-results.md)")


@pytest.fixture
def figure(request: pytest.FixtureRequest):
    """``figure(text)``: print one measured figure and keep it for the results file."""
    def add(text: str) -> None:
        _FIGURES.append((request.node.name, text.strip()))
        print("\n" + text.strip())
    return add


def _ratios(benchmarks: list) -> list[tuple[str, str, str, float, float]]:
    """(group, contender, baseline, min-round speed ratio, median-round speed ratio)."""
    groups: dict[str, list] = defaultdict(list)
    for bench in benchmarks:
        groups[bench.group or ""].append(bench)
    out = []
    for group, members in groups.items():
        baseline = next((b for b in members if b.extra_info.get("baseline")), None)
        if baseline is None:
            continue
        for bench in members:
            if bench is not baseline:
                # Speed relative to the baseline (> 1: faster), on the best and the median round.
                out.append((group, bench.name, baseline.name, baseline.stats.min / bench.stats.min,
                            baseline.stats.median / bench.stats.median))
    return out


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    session = getattr(terminalreporter.config, "_benchmarksession", None)
    benchmarks = getattr(session, "benchmarks", None) or []
    ratios = _ratios(benchmarks)
    if ratios:
        terminalreporter.write_sep("-", "speed vs baseline, same run (min round, median round)")
        for group, name, base, best, median in ratios:
            terminalreporter.write_line(f"{group:<34} {name:<44} {best:7.2f}x {median:7.2f}x   vs {base}")
    target = terminalreporter.config.getoption("--results")
    if target:
        from results import write_results

        write_results(Path(target), benchmarks, ratios, _FIGURES)
        terminalreporter.write_line(f"results written to {target}")


# --- cached sample ledgers (verify / index benches) ---------------------------------------

LEDGER_CACHE = Path(os.environ.get("CAPSEM_BENCH_CACHE", Path.home() / ".cache" / "capsem-core-bench"))


def sample_ledger(mix: str, *, bodies: int | None = None, raw_bytes: int | None = None,
                  codec: str = "deflate", seed: int = 1) -> Path:
    """session.db of a sample ledger cached under $CAPSEM_BENCH_CACHE (written once, renamed
    into place), named like bench_check's: ``{mix}-{bodies | raw<bytes>}-{codec}-seed{seed}``."""
    from capsem_core.sample import write_sample_ledger

    size = f"{bodies}" if bodies is not None else f"raw{raw_bytes}"
    directory = LEDGER_CACHE / f"{mix}-{size}-{codec}-seed{seed}"
    if not (directory / "session.db").exists():
        LEDGER_CACHE.mkdir(parents=True, exist_ok=True)
        tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        write_sample_ledger(tmp, seed=seed, mix=mix, bodies=bodies, raw_bytes=raw_bytes, codec=codec)
        tmp.rename(directory)
    return directory / "session.db"


def scan_bodies(db: Path, threads: int = 0) -> dict:
    """event_body_blobs through the native SQL scan, by path (outside any snapshot): what the
    index and kernel benchmarks have always measured."""
    from capsem_core import cores
    from capsem_core import db as _db
    from capsem_core._native import _index

    return _index.scan_bodies(_db.read_plan(db).uri, busy_ms=_db.busy_timeout_ms(), path=str(db),
                              threads=cores.threads(threads))


def scan_blocks(db: Path) -> dict:
    """body_blocks through the native SQL scan, by path."""
    from capsem_core import db as _db
    from capsem_core._native import _index

    return _index.scan_blocks(_db.read_plan(db).uri, busy_ms=_db.busy_timeout_ms(), path=str(db))


def timed(fn, *args) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds over every thread) of one call: the paired
    comparisons divide both, CPU time being what the host's other guests do not move."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def warm(db: Path) -> Path:
    """Read a ledger's files once so every contender starts from a warm page cache."""
    for path in (db, db.with_suffix(".bodies"), Path(f"{db}-wal")):
        if path.exists():
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass
    return db


# --- the shared sample ledgers and the load beside each benchmark -----------------------------

BODIES = int(os.environ.get("CAPSEM_BENCH_BODIES", "1000000"))
RAW = int(os.environ.get("CAPSEM_BENCH_RAW", str(1 << 30)))


@pytest.fixture(scope="session")
def small() -> Path:
    """The small-body sample (BODIES bodies of about 100-300 bytes), cached and warm."""
    return warm(sample_ledger("small", bodies=BODIES))


@pytest.fixture(scope="session")
def large() -> Path:
    """The large-body sample (RAW raw bytes, 1 GiB by default), cached and warm."""
    return warm(sample_ledger("large", raw_bytes=RAW))


@pytest.fixture(autouse=True)
def _warm_samples(request):
    # check-cold drops the page cache: each benchmark naming a shared sample reads it warm
    # again first, so none finds it cold because of what ran before it.
    for name in ("small", "large"):
        if name in request.fixturenames:
            warm(request.getfixturevalue(name))


@pytest.fixture(autouse=True)
def _load_average(request):
    # Other work on a 2-core machine moves the figures: print the load next to each one.
    before = os.getloadavg()[0]
    yield
    print(f"\n{request.node.name}: load average {before:.2f} -> {os.getloadavg()[0]:.2f}")
