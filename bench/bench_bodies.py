"""Bodies in bulk and random reads: Ledger.bodies / read_bodies / read_body side by side with
their baselines, in one run.

Groups (the ratio table after the run divides each time into its group's baseline):

* ``bodies-large``: every body of the large-body sample (1 GiB raw) on one thread — the
  pure-Python reader (oracles/archive_reader.archived_bodies: sqlite3, one zlib stream per
  block, the ``blake3`` package) vs ``read_bodies(threads=1)`` and ``bodies(threads=1)``
  (every body copied out as bytes). Target: >= 3x. Also ``read_bodies()`` on every core
  (its default), beside them.
* ``bodies-large-kernel``: the same two against the verify kernel alone on one thread (the
  same work without handing out the bytes). Target: within 1.3x (ratio >= 0.77).
* ``read-bodies-small``: every body of the million-body sample, pure-Python reader vs
  ``read_bodies(threads=1)``. Target: >= 5x.
* ``read-body-random``: 10,000 ``read_body`` calls on the large sample at uniformly random
  bodies, and 10,000 over the bodies of 8 random blocks (a working set inside the cache):
  today's reader (one cursor, ``block_cache_bytes=0``, zlib's stream alone: the baseline) vs
  one cursor with libdeflate, and vs the default (libdeflate, a 32 MiB block cache and the
  segments it remembers having verified, so a miss in one inflates only up to its body's end).
  Target: >= 5x.
* ``test_large_paired_rounds``: the two large groups' comparisons with all four (pure Python,
  kernel, read_bodies, bodies) alternating round by round, paired wall-time ratios and CPU
  ratios printed (steadier on a host whose speed drifts).
* ``bodies-large-kernel`` also holds a stream of ``body_batches(threads=1)`` whose consumer
  drops each batch (its buffers come back to a pool of two). Target: within 1.25x of the
  kernel, with peak memory about two batches (``test_peak_rss_of_a_stream_of_batches``).
* ``test_peak_rss_of_batches_is_bounded_by_max_bytes``: peak RSS of ``body_batches`` over the
  million-body sample in a fresh process, at three max_bytes, printed (not asserted).

Run: ``python3 -m pytest bench/bench_bodies.py -q -s -p no:cacheprovider``.
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core._native import _archive
from capsem_core import ledger as ledger_module
from capsem_core.ledger import Ledger

sys.path.insert(0, str(Path(__file__).parent))
from conftest import scan_blocks, scan_bodies, timed  # noqa: E402
from oracles.archive_reader import archived_bodies  # noqa: E402

READS = 10_000
PAIRED_ROUNDS = 5


def _pure_python(db: Path) -> int:
    return sum(len(b.data) for b in archived_bodies(db))


def _read_bodies(db: Path, threads: int = 1) -> int:
    with Ledger(db) as ledger:
        batch = ledger.read_bodies(threads=threads)
        assert batch.findings == []
        return batch.nbytes


def _bodies(db: Path) -> int:
    with Ledger(db) as ledger:
        return sum(len(r.data) for r in ledger.bodies(threads=1))


def _stream(db: Path) -> int:
    # A consumer that reads each batch and drops it: the buffers come back to the pool.
    total = 0
    with Ledger(db) as ledger:
        for batch in ledger.body_batches(threads=1):
            total += batch.nbytes
            del batch
    return total


def _kernel(db: Path) -> int:
    blocks, bodies = scan_blocks(db), scan_bodies(db, threads=1)
    with _archive.ArchiveReader(db.with_suffix(".bodies")) as reader:
        outcome = _archive.verify_bodies_with(reader, blocks, bodies, 1)
    assert not outcome.status.any()
    return int(bodies["body_len"].sum())


def _run(benchmark, fn, db, *, rounds: int, baseline: bool = False) -> None:
    if baseline:
        benchmark.extra_info["baseline"] = True
    total = benchmark.pedantic(fn, args=(db,), rounds=rounds, iterations=1, warmup_rounds=0)
    benchmark.extra_info["body_bytes"] = total
    assert total > 0


@pytest.mark.benchmark(group="bodies-large")
def test_large_pure_python(benchmark, large):
    _run(benchmark, _pure_python, large, rounds=1, baseline=True)


@pytest.mark.benchmark(group="bodies-large")
def test_large_read_bodies_1_thread(benchmark, large):
    _run(benchmark, _read_bodies, large, rounds=3)


@pytest.mark.benchmark(group="bodies-large")
def test_large_bodies_1_thread(benchmark, large):
    _run(benchmark, _bodies, large, rounds=3)


@pytest.mark.benchmark(group="bodies-large")
def test_large_read_bodies_all_cores(benchmark, large):
    # The same read on the thread budget (one thread per core): what an embedder gets by default.
    _run(benchmark, functools.partial(_read_bodies, threads=0), large, rounds=3)


@pytest.mark.benchmark(group="bodies-large-kernel")
def test_large_kernel_1_thread(benchmark, large):
    _run(benchmark, _kernel, large, rounds=3, baseline=True)


@pytest.mark.benchmark(group="bodies-large-kernel")
def test_large_read_bodies_vs_kernel(benchmark, large):
    _run(benchmark, _read_bodies, large, rounds=3)


@pytest.mark.benchmark(group="bodies-large-kernel")
def test_large_bodies_vs_kernel(benchmark, large):
    _run(benchmark, _bodies, large, rounds=3)


@pytest.mark.benchmark(group="bodies-large-kernel")
def test_large_body_batches_stream_vs_kernel(benchmark, large):
    # Target: within 1.25x of the kernel (ratio >= 0.8), peak memory about two batches
    # (test_peak_rss_of_a_stream_of_batches).
    _run(benchmark, _stream, large, rounds=3)


@pytest.mark.benchmark(group="read-bodies-small")
def test_small_pure_python(benchmark, small):
    _run(benchmark, _pure_python, small, rounds=1, baseline=True)


@pytest.mark.benchmark(group="read-bodies-small")
def test_small_read_bodies_1_thread(benchmark, small):
    _run(benchmark, _read_bodies, small, rounds=3)


def test_large_paired_rounds(figure, large: Path) -> None:
    """``bodies-large`` and ``bodies-large-kernel`` with the four alternating round by round
    (the pure-Python reader, the kernel, read_bodies, bodies, all on one thread; a host whose
    speed drifts over a minute moves them alike): per contender and baseline, the median of
    each round's baseline / contender wall-time ratio, and the ratio of the median CPU times
    (every thread's). Targets: >= 3x the pure-Python reader, >= 0.77x the kernel. Asserts
    nothing about speed."""
    runs = {"pure Python": _pure_python, "the kernel": _kernel, "read_bodies(threads=1)": _read_bodies,
            "bodies(threads=1)": _bodies}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    timed(_kernel, large)
    for _ in range(PAIRED_ROUNDS):
        for name, fn in runs.items():
            took = timed(fn, large)
            wall[name].append(took[0])
            cpu[name].append(took[1])
    for contender in ("read_bodies(threads=1)", "bodies(threads=1)"):
        for baseline in ("pure Python", "the kernel"):
            ratios = [b / c for b, c in zip(wall[baseline], wall[contender])]
            figure(f"\n{contender} vs {baseline}, {PAIRED_ROUNDS} rounds: wall ratio median "
                  f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); CPU "
                  f"{statistics.median(cpu[baseline]):.2f} s / {statistics.median(cpu[contender]):.2f} s = "
                  f"{statistics.median(cpu[baseline]) / statistics.median(cpu[contender]):.3f}")


# --- random read_body ---------------------------------------------------------------------

def _keys(db: Path, working_blocks: int | None) -> list[tuple[str, str, str]]:
    with Ledger(db) as ledger:
        idx = ledger.index()
    rng = random.Random(12)
    pool = list(range(len(idx)))
    if working_blocks is not None:
        chosen = set(rng.sample(sorted(set(idx.block_offset.tolist())), working_blocks))
        pool = [i for i in pool if int(idx.block_offset[i]) in chosen]
    return [idx.key(rng.choice(pool)) for _ in range(READS)]  # type: ignore[misc]


def _random_reads(db: Path, keys: list[tuple[str, str, str]], cache: int) -> int:
    with Ledger(db, block_cache_bytes=cache) as ledger:
        return sum(len(ledger.read_body(*k)) for k in keys)


class _ZlibOnly:
    """The archive module as today's reader saw it: every reader Capsem's zlib stream alone."""

    def __getattr__(self, name: str) -> object:
        return getattr(_archive, name)

    @staticmethod
    def ArchiveReader(path: str, cache_bytes: int = 0, **_: object) -> _archive.ArchiveReader:  # noqa: N802
        return _archive.ArchiveReader(path, cache_bytes, use_libdeflate=False)


def _run_reads(benchmark, db, working_blocks, cache, baseline=False, monkeypatch=None):
    keys = _keys(db, working_blocks)
    if baseline:
        benchmark.extra_info["baseline"] = True
        monkeypatch.setattr(ledger_module, "_archive", _ZlibOnly())
    total = benchmark.pedantic(_random_reads, args=(db, keys, cache), rounds=1, iterations=1, warmup_rounds=0)
    assert total > 0


@pytest.mark.benchmark(group="read-body-random")
def test_random_today_one_cursor(benchmark, large, monkeypatch):
    _run_reads(benchmark, large, None, 0, baseline=True, monkeypatch=monkeypatch)


@pytest.mark.benchmark(group="read-body-random")
def test_random_libdeflate_one_cursor(benchmark, large):
    _run_reads(benchmark, large, None, 0)


@pytest.mark.benchmark(group="read-body-random")
def test_random_block_cache(benchmark, large):
    _run_reads(benchmark, large, None, 32 << 20)


@pytest.mark.benchmark(group="read-body-working-set")
def test_working_set_today_one_cursor(benchmark, large, monkeypatch):
    _run_reads(benchmark, large, 8, 0, baseline=True, monkeypatch=monkeypatch)


@pytest.mark.benchmark(group="read-body-working-set")
def test_working_set_block_cache(benchmark, large):
    _run_reads(benchmark, large, 8, 32 << 20)


# --- peak memory --------------------------------------------------------------------------

# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of this (large)
# pytest process would report the parent's peak.
_RSS_CHILD = """
import json, sys
from capsem_core.ledger import Ledger
def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
db, max_bytes = sys.argv[1], int(sys.argv[2])
with Ledger(db) as ledger:
    idx = ledger.index(threads=1)
    index_rss = hwm()
    total = 0
    for batch in ledger.body_batches(index=idx, max_bytes=max_bytes, threads=1):
        total += batch.nbytes
        del batch
print(json.dumps({"index_kib": index_rss, "peak_kib": hwm(), "body_bytes": total}))
"""


def test_peak_rss_of_a_stream_of_batches(figure, large):
    """body_batches over the large sample at the default 64 MiB: peak RSS after the index
    against one batch's bytes (target: about two batches)."""
    done = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(large), str(64 << 20)], capture_output=True,
                          text=True, timeout=1800, check=True)
    got = json.loads(done.stdout)
    batches = (got["peak_kib"] - got["index_kib"]) * 1024 / (64 << 20)
    figure(f"\nbody_batches over {got['body_bytes'] / 2**30:.2f} GiB of large bodies: peak RSS "
          f"{got['peak_kib'] / 1024:.0f} MiB, {batches:.2f} batches of 64 MiB above the "
          f"{got['index_kib'] / 1024:.0f} MiB before the first (target: about two)")


def test_peak_rss_of_batches_is_bounded_by_max_bytes(figure, small):
    for max_bytes in (16 << 20, 64 << 20, 256 << 20):
        done = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(small), str(max_bytes)], capture_output=True,
                              text=True, timeout=1800, check=True)
        got = json.loads(done.stdout)
        figure(f"\nbody_batches(max_bytes={max_bytes >> 20} MiB) over {got['body_bytes'] / 2**20:.0f} MiB of bodies: "
              f"peak RSS {got['peak_kib'] / 1024:.0f} MiB, of which {got['index_kib'] / 1024:.0f} MiB before the "
              f"first batch (interpreter + index)")
