"""check --verify-bodies keeps its resident size bounded (issue 28): a fixed budget plus at most
160 bytes a body row above what start-up used, however large session.db is, because every
reader of session.db keeps a bounded window of it resident (SQLite through read(2) into its
own small cache, the page map and the page scans through page_window.h) and the check's
arrays are a few per body row.

Measured in a child process that measures itself (oracles/peak_memory.py): its peak resident
size (VmHWM, the kernel's own, what an OOM killer weighs) less the one start-up left, with
the check's modules imported before that baseline. The windows are shrunk to 1 MiB so a ledger
of a few tens of MB stands for a large one (each reader keeps one window; with the default
32 MiB windows the same bound is 256 MiB + 160 B a row, bench/bench_scale.py). No timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsem_core.sample import write_sample_ledger
from oracles.peak_memory import STATUS, measured

WINDOW = 1 << 20
# What a check holds whatever the ledger's size, here: SQLite's page caches (one per
# connection), the verify kernel's and the text codes' buffers, each reader's window, the
# code of the modules it loads as it goes.
FIXED = 24 << 20
PER_ROW = 160
PRELOAD = ("numpy", "capsem_core.check.run", "capsem_core.cli.check")
ENV = {"CAPSEM_CORE_PAGE_WINDOW": str(WINDOW), "CAPSEM_CORE_THREADS": "2"}

pytestmark = pytest.mark.skipif(not STATUS.exists(), reason="no /proc/self/status to read the resident size from")


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    summary = write_sample_ledger(tmp_path_factory.mktemp("resident") / "sess", seed=5, mix="small", bodies=40_000)
    return summary.directory / "session.db", summary.bodies


def test_check_verify_bodies_stays_within_a_fixed_budget_and_160_bytes_a_body(ledger: tuple[Path, int]) -> None:
    db, bodies = ledger
    size = db.stat().st_size
    got = measured(["check", "--db", str(db), "--verify-bodies", "--json"], env=ENV, preload=PRELOAD)
    assert got.status == 0, got.stdout + got.stderr
    assert '"sound": true' in got.stdout
    bound = FIXED + PER_ROW * bodies
    # session.db alone is well over the bound: a reader keeping what it read would break it.
    assert size > 3 * bound // 2
    assert got.grown <= bound, (f"peak resident size grew {got.grown} bytes (anonymous {got.anon_at_peak}, "
                                f"file {got.file_at_peak} at the peak) over a bound of {bound}")


def test_check_without_the_body_archive_read_stays_within_the_same_bound(ledger: tuple[Path, int]) -> None:
    db, bodies = ledger
    got = measured(["check", "--db", str(db), "--json"], env=ENV, preload=PRELOAD)
    assert got.status == 0, got.stdout + got.stderr
    assert got.grown <= FIXED + PER_ROW * bodies
