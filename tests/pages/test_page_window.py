"""The page map and the page scans keep a bounded window of session.db resident (page_window.h):
a walk or a scan of a file many times the window raises the process's peak resident size by
about the window, not by the file, and reads the same as with no bound at all."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core._native import _pages
from capsem_core.sample import write_sample_ledger

WINDOW = 1 << 20
STATUS = Path("/proc/self/status")

# A child that opens the map, notes its peak resident size (VmHWM), walks or scans, and notes
# it again: only the walk's own memory lies between the two.
CHILD = r'''
import json, sys
from capsem_core._native import _pages

def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))

path, what, window, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
pages = _pages.PageFile(path, window=window)
before = hwm()
if what == "walk":
    done = pages.walk(root)
    ok = not done.findings
else:
    done = pages.records(root, [(_pages.ROWID, None), (1, _pages.TEXT)])
    ok = done.status == "ok"
print(json.dumps({"grown": hwm() - before, "ok": ok}))
'''


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small-mix ledger whose session.db is some 60 times the window."""
    summary = write_sample_ledger(tmp_path_factory.mktemp("window") / "sess", seed=3, mix="small", bodies=40_000)
    return summary.directory / "session.db"


def _roots(db: Path) -> list[int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [1] + [r for (r,) in conn.execute("SELECT rootpage FROM sqlite_schema WHERE rootpage > 0")]
    finally:
        conn.close()


def _blobs_root(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        root: int = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'event_body_blobs'").fetchone()[0]
        return root
    finally:
        conn.close()


def _grown(db: Path, what: str, window: int, root: object) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(db), what, str(window), json.dumps(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(not STATUS.exists(), reason="no /proc/self/status to read the peak resident size from")
def test_the_page_map_drops_the_pages_behind_it(big: Path) -> None:
    size = big.stat().st_size
    assert size > 50 * WINDOW
    bounded = _grown(big, "walk", WINDOW, _roots(big))
    unbounded = _grown(big, "walk", 0, _roots(big))
    assert bounded["ok"] and unbounded["ok"]
    # The window, the walk's own arrays (a few bytes a page) and the kernel's rounding.
    assert bounded["grown"] < 4 * WINDOW + size // 100, bounded
    assert unbounded["grown"] > size // 2, unbounded   # what the bound spares


@pytest.mark.skipif(not STATUS.exists(), reason="no /proc/self/status to read the peak resident size from")
def test_a_records_scan_drops_the_pages_behind_it(big: Path) -> None:
    bounded = _grown(big, "records", WINDOW, _blobs_root(big))
    assert bounded["ok"]
    # 40,000 rows: two int64 columns and each event id's 12 bytes, besides the window.
    assert bounded["grown"] < 4 * WINDOW + 40_000 * 40, bounded


def test_a_bounded_walk_and_scan_read_what_an_unbounded_one_reads(big: Path) -> None:
    roots = _roots(big)
    bounded, unbounded = _pages.PageFile(big, window=WINDOW), _pages.PageFile(big, window=0)
    try:
        assert bounded.window == WINDOW and unbounded.window == 0
        assert bounded.walk(roots) == unbounded.walk(roots)
        spec = [(_pages.ROWID, None), (1, _pages.TEXT), (9, _pages.DIGEST)]   # id, event_id, body_hash
        a, b = bounded.records(_blobs_root(big), spec), unbounded.records(_blobs_root(big), spec)
        assert a.status == b.status == "ok" and a.rows == b.rows >= 40_000
        assert all((x == y).all() for x, y in zip(a.values, b.values))
        assert all(x is None and y is None or (x == y).all() for x, y in zip(a.data, b.data))
    finally:
        bounded.close()
        unbounded.close()


def test_a_negative_window_is_refused(big: Path) -> None:
    with pytest.raises(ValueError, match="window"):
        _pages.PageFile(big, window=-1)


ESTIMATE_CHILD = r'''
import json, sys
from capsem_core._native import _pages

def rss_file():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("RssFile"))

pages = _pages.PageFile(sys.argv[1])
before = rss_file()
sizes = pages.estimate(json.loads(sys.argv[2]))
print(json.dumps({"left": rss_file() - before, "sized": sum(1 for s in sizes if s > 0)}))
'''


@pytest.mark.skipif(not STATUS.exists(), reason="no /proc/self/status to read the resident size from")
def test_sizing_the_trees_leaves_none_of_the_file_mapped(big: Path) -> None:
    # The estimate reads a path through every tree, a page here and there; each fault may map a
    # whole folio of the page cache (2 MiB), so what it read is dropped once it is done.
    roots = _roots(big)
    done = subprocess.run([sys.executable, "-c", ESTIMATE_CHILD, str(big), json.dumps(roots)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["sized"] == len(roots)
    assert result["left"] < (256 << 10), result
