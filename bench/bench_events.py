"""Events: following a live writer, and paging through a large ledger.

* ``events-follow``: a writer process (``oracles/live_writer.py``) inserts RATE rows a second
  into six event tables, one commit per 20 ms tick, for SECONDS seconds, while this process
  follows the ledger: ``Ledger.follow`` (cursors, one snapshot per page, time merge, body
  names, ``PRAGMA data_version`` probe) against the naive follower (every poll, a plain
  ``SELECT * FROM t WHERE id > ?`` per table, rows as dicts, nothing else). Both poll every
  50 ms. Each round is timed in the follower's CPU seconds (``time.process_time``), so the
  ratio says what the guarantees cost; the lag of every row (received minus the row's own
  time, which the writer stamps at insert, so it includes the writer's up-to-20 ms tick)
  is reported as p50 / p99 / max in ``extra_info`` and printed. The target: lag under one
  second at 5,000 rows/s.
* ``events-page``: the first PAGE_EVENTS events of the million-body small sample, in pages
  of 1000: ``Ledger.events`` against the naive per-table ``SELECT * ... WHERE id > ? LIMIT``.

A benchmark reports; it asserts nothing about speed.

    python -m pytest bench/bench_events.py -q -s
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from capsem_core import db
from capsem_core.events import EVENT_TABLES
from capsem_core.events.tables import ms_time_us, text_time_us
from capsem_core.ledger import Ledger

RATE = int(os.environ.get("CAPSEM_BENCH_EVENTS_RATE", "5000"))
SECONDS = float(os.environ.get("CAPSEM_BENCH_EVENTS_SECONDS", "8"))
POLL_S = 0.05
PAGE_EVENTS = int(os.environ.get("CAPSEM_BENCH_PAGE_EVENTS", "100000"))

Follower = Callable[[Path, int, Callable[[], bool]], list[tuple[float, list[float]]]]


def _row_time_s(table_is_ms: bool, value: object) -> float:
    us = ms_time_us(value) if table_is_ms else text_time_us(value)
    assert us is not None
    return us / 1e6


def follow_ours(directory: Path, rows: int, writer_done: Callable[[], bool]) -> list[tuple[float, list[float]]]:
    """Ledger.follow until every row arrived; per page, when it arrived and its rows' times."""
    tables = {t.name: t for t in EVENT_TABLES}
    got: list[tuple[float, list[float]]] = []
    seen = 0
    deadline = time.time() + SECONDS + 60  # a writer that died early must not hang the bench
    with Ledger(directory) as ledger:
        for page in ledger.follow(poll=POLL_S, stop=lambda: seen >= rows or time.time() > deadline):
            now = time.time()
            got.append((now, [_row_time_s(tables[e.table].time_is_ms, e.row[tables[e.table].time_column])
                              for e in page.events]))
            seen += len(page.events)
    return got


def follow_naive(directory: Path, rows: int, writer_done: Callable[[], bool]) -> list[tuple[float, list[float]]]:
    """The naive follower: every poll, each table's new rows by ``id > last``, as dicts."""
    conn = db.connect_readonly(directory / "session.db", isolation_level=None)
    last = {t.name: 0 for t in EVENT_TABLES}
    got: list[tuple[float, list[float]]] = []
    seen = 0
    deadline = time.time() + SECONDS + 60
    try:
        while seen < rows and time.time() < deadline:
            times: list[float] = []
            for t in EVENT_TABLES:
                cur = conn.execute(f"SELECT * FROM {t.name} WHERE id > ? ORDER BY id", (last[t.name],))
                names = [d[0] for d in cur.description]
                for values in cur:
                    row = dict(zip(names, values))
                    last[t.name] = row["id"]
                    times.append(_row_time_s(t.time_is_ms, row[t.time_column]))
            if times:
                got.append((time.time(), times))
                seen += len(times)
            else:
                time.sleep(POLL_S)
    finally:
        conn.close()
    return got


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _follow_round(tmp: Path, follower: Follower, benchmark: pytest.FixtureRequest, label: str) -> None:
    rows = int(RATE * SECONDS)
    results: dict[str, object] = {}
    attempt = [0]

    def one() -> None:
        attempt[0] += 1
        directory = tmp / f"{label}-{attempt[0]}"
        writer = subprocess.Popen([sys.executable, "-m", "oracles.live_writer", str(directory), "--rows", str(rows),
                                   "--rate", str(RATE)], stdout=subprocess.PIPE, text=True,
                                  cwd=Path(__file__).resolve().parent.parent)
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        got = follower(directory, rows, lambda: writer.poll() is not None)
        done = writer.stdout.readline().split()
        writer.wait(timeout=60)
        lags = sorted(now - t for now, times in got for t in times)
        results.update(rows=len(lags), writer_rows_per_s=round(int(done[1]) / float(done[2])),
                       lag_p50_ms=round(1000 * _percentile(lags, 0.50), 1),
                       lag_p99_ms=round(1000 * _percentile(lags, 0.99), 1), lag_max_ms=round(1000 * lags[-1], 1),
                       pages=len(got))

    benchmark.pedantic(one, rounds=1, iterations=1)  # type: ignore[attr-defined]
    benchmark.extra_info.update(results)  # type: ignore[attr-defined]
    print(f"\n{label}: {results}")


@pytest.mark.benchmark(group="events-follow", timer=time.process_time)
def test_follow_naive_poll_per_table(benchmark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info["baseline"] = True
    _follow_round(tmp_path, follow_naive, benchmark, "naive")


@pytest.mark.benchmark(group="events-follow", timer=time.process_time)
def test_follow_ledger_follow(benchmark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _follow_round(tmp_path, follow_ours, benchmark, "Ledger.follow")


# --- paging a large ledger ------------------------------------------------------------------

def pages_ours(directory: Path) -> int:
    delivered, after = 0, "start"
    with Ledger(directory) as ledger:
        while delivered < PAGE_EVENTS:
            page = ledger.events(after=after, limit=1000)
            delivered += len(page.events)
            after = page.cursor
            if page.caught_up:
                break
    return delivered


def pages_naive(directory: Path) -> int:
    conn = db.connect_readonly(directory / "session.db", isolation_level=None)
    delivered = 0
    try:
        for t in EVENT_TABLES:
            last = 0
            while delivered < PAGE_EVENTS:
                cur = conn.execute(f"SELECT * FROM {t.name} WHERE id > ? ORDER BY id LIMIT ?",
                                   (last, min(1000, PAGE_EVENTS - delivered)))
                names = [d[0] for d in cur.description]
                rows = [dict(zip(names, values)) for values in cur]
                if not rows:
                    break
                last = rows[-1]["id"]
                delivered += len(rows)
    finally:
        conn.close()
    return delivered


@pytest.mark.benchmark(group="events-page")
def test_page_naive_select_per_table(benchmark, small: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info["baseline"] = True
    assert benchmark.pedantic(pages_naive, args=(small.parent,), rounds=3, iterations=1) == PAGE_EVENTS


@pytest.mark.benchmark(group="events-page")
def test_page_ledger_events(benchmark, small: Path) -> None:  # type: ignore[no-untyped-def]
    delivered = benchmark.pedantic(pages_ours, args=(small.parent,), rounds=3, iterations=1)
    assert delivered == PAGE_EVENTS
    benchmark.extra_info["events_per_s"] = round(PAGE_EVENTS / benchmark.stats.stats.min)
