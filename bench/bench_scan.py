"""Columns: a table's rows as Arrow, against what an analyst would use instead, same run.

* ``scan-<table>``: ``pa.table(ledger.scan(table))`` (default threads, one thread, and the
  statement path forced) against adbc-driver-sqlite's ``fetch_arrow_table`` of ``SELECT *``
  (the baseline), on ``model_items`` and ``security_decision_events`` of the million-body
  small sample. Targets: at least 2x with the default threads, 1.2x on one thread.
* ``scan-vs-old-events-<table>``: the same scan against ``Ledger.events`` as it was before the
  columnar reader (``bench/baseline_events.py``: a sqlite3 tuple, a dict and an ``Event`` per
  row) paging through that table. Target: at least 20x.
* ``events-vs-naive``: ``Ledger.events`` paging PAGE_EVENTS events of every event table against
  the naive loop that does the same work with the sqlite3 module: per table ``SELECT * ...
  WHERE id > ? LIMIT``, a dict per row, times parsed by ``text_time_us``, ``heapq.merge`` by
  time and the body names of the rows delivered. Target: at least 0.8x.
* ``bodies-arrow``: ``pa.table(batch)`` of a 400 MB BodyBatch of the large sample against one
  copy of its buffer (``numpy.copy``, the least a copying export would cost). Target: under 5 ms.
* ``scan-memory-model_items``: the growth of a fresh process's peak resident memory while it
  reads the scan of ``model_items`` batch by batch, dropping each (pyarrow's
  ``RecordBatchReader``), against the same holding every batch (``pa.table``) and the table's
  Arrow bytes (``oracles/scan_memory.py``). Target: bounded, a few batches.

Every benchmark's ``extra_info`` holds its figures (best and median ms, the load average
before and after; a contender its ratios to its group's baseline in this run and its target),
for the results file collected from the JSON. A benchmark reports; it asserts only that both
sides read the same rows.

    python -m pytest bench/bench_scan.py -q -s
"""

from __future__ import annotations

import heapq
import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from capsem_core import db
from capsem_core.events import EVENT_TABLES
from capsem_core.events.tables import ms_time_us, text_time_us
from capsem_core.ledger import Ledger

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from baseline_events import EventReader  # noqa: E402
from bench_events import PAGE_EVENTS, pages_ours  # noqa: E402  (Ledger.events paging every event table)
from oracles.scan_memory import CLEAR_REFS, peak_in_child  # noqa: E402

TABLES = ("model_items", "security_decision_events")
BATCH_BYTES = 400 << 20
MIB = 1 << 20

# Each group's baseline figures, once it has run (the baselines are defined, so run, first).
_BASELINES: dict[str, Any] = {}


def _record(benchmark: Any, *, baseline: bool = False, target: float | None = None, target_ms: float | None = None,
            load: float | None = None) -> None:
    """The benchmark's figures into its extra_info: best and median ms, the load average around
    it; a baseline's kept for its group, a contender's ratios to it (and whether its target,
    a ratio or a time, is met)."""
    stats = benchmark.stats.stats
    info = benchmark.extra_info
    info["min_ms"] = round(stats.min * 1000, 3)
    info["median_ms"] = round(stats.median * 1000, 3)
    info["load_average"] = [round(load if load is not None else os.getloadavg()[0], 2),
                            round(os.getloadavg()[0], 2)]
    if baseline:
        info["baseline"] = True
        _BASELINES[benchmark.group] = stats
        return
    base = _BASELINES.get(benchmark.group)
    if base is not None:
        info["vs_baseline_min"] = round(base.min / stats.min, 2)
        info["vs_baseline_median"] = round(base.median / stats.median, 2)
        if target is not None:
            info["target_ratio"] = target
            info["target_met"] = info["vs_baseline_min"] >= target
    if target_ms is not None:
        info["target_ms"] = target_ms
        info["target_met"] = info["min_ms"] <= target_ms


@pytest.fixture(scope="module")
def ledger(small: Path) -> Any:
    with Ledger(small.parent) as opened:
        yield opened


@pytest.fixture(scope="module")
def adbc(small: Path) -> Any:
    dbapi = pytest.importorskip("adbc_driver_sqlite.dbapi")
    conn = dbapi.connect(f"file:{small}?mode=ro")
    yield conn
    conn.close()


def _adbc_rows(conn: Any, table: str) -> int:
    cur = conn.cursor()
    try:
        cur.execute(f"SELECT * FROM {table}")
        return int(cur.fetch_arrow_table().num_rows)
    finally:
        cur.close()


def _scan_rows(ledger: Ledger, table: str, threads: int = 0) -> int:
    return int(pa.table(ledger.scan(table, threads=threads)).num_rows)


def _rows_path(small: Path, table: str) -> int:
    from capsem_core.columns.scan import open_scan

    return int(pa.table(open_scan(small, table, path="rows")).num_rows)


def _count(small: Path, table: str) -> int:
    conn = db.connect_readonly(small)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("table", TABLES)
def test_scan_adbc_fetch_arrow_table(benchmark, adbc, small: Path, table: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"scan-{table}"
    load = os.getloadavg()[0]
    assert benchmark.pedantic(_adbc_rows, args=(adbc, table), rounds=5, iterations=1, warmup_rounds=1) == \
        _count(small, table)
    _record(benchmark, baseline=True, load=load)


@pytest.mark.parametrize("table", TABLES)
def test_scan_default_threads(benchmark, ledger: Ledger, small: Path, table: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"scan-{table}"
    load = os.getloadavg()[0]
    n = benchmark.pedantic(_scan_rows, args=(ledger, table), rounds=5, iterations=1, warmup_rounds=1)
    assert n == _count(small, table)
    benchmark.extra_info["rows_per_s"] = round(n / benchmark.stats.stats.min)
    _record(benchmark, target=2.0, load=load)


@pytest.mark.parametrize("table", TABLES)
def test_scan_one_thread(benchmark, ledger: Ledger, small: Path, table: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"scan-{table}"
    load = os.getloadavg()[0]
    assert benchmark.pedantic(_scan_rows, args=(ledger, table, 1), rounds=5, iterations=1,
                              warmup_rounds=1) == _count(small, table)
    _record(benchmark, target=1.2, load=load)


@pytest.mark.parametrize("table", TABLES)
def test_scan_statements_forced(benchmark, small: Path, table: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"scan-{table}"
    load = os.getloadavg()[0]
    assert benchmark.pedantic(_rows_path, args=(small, table), rounds=3, iterations=1) == _count(small, table)
    _record(benchmark, load=load)


# --- against Ledger.events as it was --------------------------------------------------------------

def _old_events(small: Path, table: str) -> int:
    reader = EventReader(small)
    try:
        delivered, after = 0, "start"
        while True:
            page = reader.page([table], after, 1000)
            delivered += len(page.events)
            after = page.cursor
            if page.caught_up:
                return delivered
    finally:
        reader.close()


@pytest.mark.parametrize("table", TABLES)
def test_old_events_paging_one_table(benchmark, small: Path, table: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"scan-vs-old-events-{table}"
    load = os.getloadavg()[0]
    assert benchmark.pedantic(_old_events, args=(small, table), rounds=1, iterations=1) == _count(small, table)
    _record(benchmark, baseline=True, load=load)


@pytest.mark.parametrize("table", TABLES)
def test_scan_against_old_events(benchmark, ledger: Ledger, small: Path, table: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"scan-vs-old-events-{table}"
    load = os.getloadavg()[0]
    assert benchmark.pedantic(_scan_rows, args=(ledger, table), rounds=3, iterations=1, warmup_rounds=1) == \
        _count(small, table)
    _record(benchmark, target=20.0, load=load)


# --- Ledger.events against the naive loop doing the same work -------------------------------------

def _naive_stream(conn: Any, number: int, name: str, time_column: str, time_is_ms: bool,
                  after: int) -> Iterator[tuple[int, int, int, str, dict[str, Any]]]:
    cur = conn.execute(f"SELECT * FROM {name} WHERE id > ? ORDER BY id LIMIT 1000", (after,))
    names = [d[0] for d in cur.description]
    to_us = ms_time_us if time_is_ms else text_time_us
    for values in cur:  # stepped only as far as the merge takes rows
        row = dict(zip(names, values))
        yield to_us(row[time_column]) or 0, number, row["id"], name, row


def naive_events(directory: Path) -> int:
    """PAGE_EVENTS events, pages of 1000, the way one would write it with the sqlite3 module:
    per table a cursor over the rows after its position (dicts, times parsed), merged lazily by
    time with heapq, and each page's body names."""
    conn = db.connect_readonly(directory / "session.db", isolation_level=None)
    last = {t.name: 0 for t in EVENT_TABLES}
    delivered = 0
    try:
        while delivered < PAGE_EVENTS:
            conn.execute("BEGIN")
            streams = [_naive_stream(conn, number, t.name, t.time_column, t.time_is_ms, last[t.name])
                       for number, t in enumerate(EVENT_TABLES)]
            page = list(itertools.islice(heapq.merge(*streams), 1000))
            first = dict(last)
            for _key, _n, row_id, name, _row in page:
                last[name] = row_id
            for t in EVENT_TABLES:
                if t.has_bodies and last[t.name] > first[t.name]:
                    conn.execute("SELECT event_id, direction FROM event_body_blobs WHERE source_table = ? AND "
                                 f"event_id IN (SELECT event_id FROM {t.name} WHERE id > ? AND id <= ?)",
                                 (t.name, first[t.name], last[t.name])).fetchall()
            conn.execute("COMMIT")
            if not page:
                break
            delivered += len(page)
    finally:
        conn.close()
    return delivered


def test_events_naive_loop(benchmark, small: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = "events-vs-naive"
    load = os.getloadavg()[0]
    assert benchmark.pedantic(naive_events, args=(small.parent,), rounds=3, iterations=1) >= PAGE_EVENTS
    _record(benchmark, baseline=True, load=load)


def test_events_ledger(benchmark, small: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = "events-vs-naive"
    load = os.getloadavg()[0]
    assert benchmark.pedantic(pages_ours, args=(small.parent,), rounds=3, iterations=1) >= PAGE_EVENTS
    benchmark.extra_info["events_per_s"] = round(PAGE_EVENTS / benchmark.stats.stats.min)
    _record(benchmark, target=0.8, load=load)


# --- a BodyBatch as Arrow --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_batch(large: Path) -> Any:
    with Ledger(large.parent) as opened:
        idx = opened.index()
        sizes = np.cumsum(idx.body_len)
        wanted = np.flatnonzero(sizes <= BATCH_BYTES)
        batch = opened.read_bodies(wanted, index=idx)
    assert batch.nbytes > BATCH_BYTES * 0.95
    return batch


def test_bodies_copy_of_the_buffer(benchmark, big_batch: Any) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = "bodies-arrow"
    load = os.getloadavg()[0]
    benchmark.pedantic(np.copy, args=(big_batch.buffer,), rounds=5, iterations=1)
    _record(benchmark, baseline=True, load=load)


def test_bodies_batch_to_arrow_table(benchmark, big_batch: Any) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = "bodies-arrow"
    load = os.getloadavg()[0]
    table = benchmark.pedantic(pa.table, args=(big_batch,), rounds=20, iterations=1, warmup_rounds=2)
    assert table.num_rows == len(big_batch)
    benchmark.extra_info["batch_bytes"] = big_batch.nbytes
    benchmark.extra_info["ms"] = round(benchmark.stats.stats.min * 1000, 3)
    _record(benchmark, target_ms=5.0, load=load)
    print(f"\n{len(big_batch)} bodies, {big_batch.nbytes >> 20} MiB: pa.table(batch) in "
          f"{benchmark.stats.stats.min * 1000:.3f} ms (best of 20)")


# --- memory: a scan read batch by batch ---------------------------------------------------------

@pytest.mark.skipif(not CLEAR_REFS.exists(), reason="needs Linux's /proc/self/clear_refs")
def test_scan_peak_memory_model_items(benchmark, small: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = "scan-memory-model_items"
    load = os.getloadavg()[0]
    figures: dict[str, dict[str, int]] = {}

    def both() -> None:
        for how, hold in (("streamed", False), ("held", True)):
            figures[how] = peak_in_child(small.parent, "model_items", threads=0, batch_rows=1 << 16,
                                         batch_bytes=64 << 20, hold=hold)

    benchmark.pedantic(both, rounds=1, iterations=1)
    streamed, held = figures["streamed"], figures["held"]
    assert streamed["rows"] == held["rows"] == _count(small, "model_items") and streamed["pages"]
    info = benchmark.extra_info
    info["table_mib"] = round(streamed["table_bytes"] / MIB, 1)
    info["batches"] = streamed["batches"]
    info["batch_mib_max"] = round(streamed["batch_bytes_max"] / MIB, 1)
    info["peak_growth_streamed_mib"] = round(streamed["peak_growth"] / MIB, 1)
    info["peak_growth_held_mib"] = round(held["peak_growth"] / MIB, 1)
    info["peak_growth_streamed_batches"] = round(streamed["peak_growth"] / max(streamed["batch_bytes_max"], 1), 2)
    _record(benchmark, load=load)
    print(f"\nmodel_items: {info['table_mib']} MiB as Arrow in {info['batches']} batches of at most "
          f"{info['batch_mib_max']} MiB; peak RSS growth read batch by batch {info['peak_growth_streamed_mib']} MiB "
          f"({info['peak_growth_streamed_batches']} batches), held whole {info['peak_growth_held_mib']} MiB")
