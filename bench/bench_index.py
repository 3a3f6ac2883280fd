"""Index scan: the native scan of event_body_blobs against the sqlite3 module fetching the
same columns in archive order, on the 1,000,000-body small sample (``CAPSEM_BENCH_BODIES`` overrides).
Target: >= 5x. The native scan runs on all cores (rowid ranges, one connection each) and on
one thread; the load average is printed beside each benchmark (the machine is shared).

Run: ``python3 -m pytest bench/bench_index.py -q -s``
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import BODIES, scan_blocks, scan_bodies  # noqa: E402







def _module_scan(db: Path) -> list[tuple]:
    con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute("SELECT id, block_offset, body_offset, body_len, body_hash FROM event_body_blobs "
                           "ORDER BY block_offset, body_offset, id").fetchall()
    finally:
        con.close()


@pytest.mark.benchmark(group="index-scan")
def test_index_scan_baseline_sqlite3_module(benchmark, small):
    benchmark.extra_info["baseline"] = True
    rows = benchmark.pedantic(_module_scan, args=(small,), rounds=3, iterations=1)
    assert len(rows) >= BODIES


@pytest.mark.benchmark(group="index-scan")
def test_index_scan_native(benchmark, small):
    got = benchmark.pedantic(scan_bodies, args=(small,), rounds=5, iterations=1)
    assert got["id"].shape[0] >= BODIES and got["hash_ok"].all()


@pytest.mark.benchmark(group="index-scan")
def test_index_scan_native_1_thread(benchmark, small):
    got = benchmark.pedantic(scan_bodies, args=(small,), kwargs={"threads": 1}, rounds=5, iterations=1)
    assert got["id"].shape[0] >= BODIES and got["hash_ok"].all()


@pytest.mark.benchmark(group="index-scan")
def test_index_scan_native_blocks_too(benchmark, small):
    # What verify_ledger scans: bodies and blocks.
    benchmark.pedantic(lambda: (scan_bodies(small), scan_blocks(small)), rounds=5, iterations=1)
