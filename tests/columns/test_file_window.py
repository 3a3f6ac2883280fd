"""The column scans and the events pages keep a bounded window of session.db resident
(scan_leaves.h, page_window.h): reading tables many times the window raises the process's peak
resident size by about the window and the batches, not by the tables, and leaves next to nothing
of the file mapped between reads, though the Ledger keeps its map of the file; and they read
the same as with no bound at all.

Measured in child processes: the peak resident size (VmHWM, the kernel's own, reset through
/proc/self/clear_refs once the modules are loaded) and the file-backed part (RssFile) once each
read has ended. The window is shrunk to 1 MiB (each reader keeps at most 3 chunks of 2 MiB then,
page_window.h) so a ledger of a hundred MB stands for a large one. No timing."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_ledger
from oracles.peak_memory import measured
from oracles.scan_memory import CLEAR_REFS

pytestmark = pytest.mark.skipif(not CLEAR_REFS.exists(), reason="needs Linux's /proc/self/clear_refs")

WINDOW = 1 << 20
THREADS = 2
ENV = {"CAPSEM_CORE_PAGE_WINDOW": str(WINDOW), "CAPSEM_CORE_THREADS": str(THREADS)}
TABLES = ("model_items", "net_events", "event_body_blobs")
# What the readers may keep of the file at once: the walk or each thread's reader 3 chunks of
# 2 MiB, and page 1's chunk (the header every read checks).
FILE_BOUND = (THREADS * 3 + 1) * (2 << 20)
# What may stay once a read has ended: page 1's chunk, and code of the libraries run first.
LEFT_BOUND = 4 << 20
# The batches in flight (256 KiB each, a few per thread) and the allocator's slack.
BATCHES = 16 << 20

# Scans of TABLES one after another on one Ledger's map, batch by batch (small batches, so
# the batches in flight stay small beside the file): the growth of the peak resident size
# over them all, and RssFile after each scan, less RssFile before the first.
SCANS = r'''
import json, sys
from pathlib import Path
import pyarrow as pa
from capsem_core.columns.scan import open_scan
from capsem_core.columns.source import HeldFile

def status(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

db, tables = sys.argv[1], sys.argv[2:]
held = HeldFile(db)
Path("/proc/self/clear_refs").write_text("5")
hwm, file = status("VmHWM"), status("RssFile")
out = {"left": [], "pages": []}
for table in tables:
    scan = open_scan(db, table, threads=2, held=held, batch_rows=1 << 16, batch_bytes=256 << 10)
    out["pages"].append(scan.path == "pages")
    for batch in pa.RecordBatchReader.from_stream(scan):
        del batch
    out["left"].append(status("RssFile") - file)
out["grown"] = status("VmHWM") - hwm
held.close()
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    summary = write_sample_ledger(tmp_path_factory.mktemp("file-window") / "sess", seed=11, mix="small",
                                  bodies=100_000)   # session.db 159 MB
    return summary.directory


def _table_bytes(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {t: conn.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = ?", (t,)).fetchone()[0] for t in TABLES}
    except sqlite3.OperationalError:  # no dbstat in this SQLite: the file's size stands for them
        return {t: db.stat().st_size // len(TABLES) for t in TABLES}
    finally:
        conn.close()


def test_scans_on_one_map_keep_a_window_of_the_file_not_the_tables(ledger: Path) -> None:
    db = ledger / "session.db"
    assert sum(_table_bytes(db).values()) > FILE_BOUND + BATCHES   # a reader keeping them would break it
    done = subprocess.run([sys.executable, "-c", SCANS, str(db), *TABLES], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **ENV})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert all(got["pages"]), got
    # Between scans the map holds next to nothing of the file (without the windows: every page
    # of the tables read so far, and the neighbours the kernel mapped with them).
    assert max(got["left"]) <= LEFT_BOUND, got
    if not os.environ.get("CAPSEM_SANITIZE"):   # ASan's shadow memory and quarantine inflate RSS
        assert got["grown"] <= FILE_BOUND + BATCHES, got


def test_events_keeps_a_window_of_the_file_not_the_file(ledger: Path) -> None:
    db = ledger / "session.db"
    size = db.stat().st_size
    got = measured(["events", "--db", str(ledger)], env=ENV, preload=("numpy", "capsem_core.cli.events"))
    assert got.status == 0, got.stderr[-2000:]
    assert got.stdout.count("\n") > 100_000
    # The readers' windows and a page of events (1,000 rows, a few MB at most as Python objects).
    bound = FILE_BOUND + (24 << 20)
    assert size > 3 * bound   # a reader keeping what it read would break the bound
    # Under scripts/sanitize ASan's shadow memory inflates the anonymous part: the file's is held.
    grown = got.file_at_peak if os.environ.get("CAPSEM_SANITIZE") else got.grown
    assert grown <= bound, (f"peak resident size grew {got.grown} bytes (anonymous {got.anon_at_peak}, "
                            f"file {got.file_at_peak} at the peak) over a bound of {bound}")


def test_bounded_reads_read_what_unbounded_ones_read(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read() -> tuple[list[pa.Table], list[tuple[object, ...]]]:
        with Ledger(ledger) as led:
            scans = [led.scan(t, threads=THREADS) for t in TABLES]
            assert all(s.path == "pages" for s in scans)
            tables = [pa.table(s) for s in scans]
            events: list[tuple[object, ...]] = []
            after = "start"
            while True:
                page = led.events(after=after, limit=1000)
                events += [(e.table, e.id, e.event_id, e.timestamp, e.row) for e in page.events]
                after = page.cursor
                if page.caught_up:
                    return tables, events

    monkeypatch.setenv("CAPSEM_CORE_PAGE_WINDOW", "0")
    unbounded = read()
    monkeypatch.setenv("CAPSEM_CORE_PAGE_WINDOW", str(WINDOW))
    bounded = read()
    assert all(a.equals(b) for a, b in zip(bounded[0], unbounded[0]))
    assert bounded[1] == unbounded[1] and len(bounded[1]) > 100_000
