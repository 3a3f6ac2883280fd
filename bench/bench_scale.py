"""``capsem-ledger check --verify-bodies`` as the ledger grows, and from a cold page cache.

Two groups, on small-mix samples (``conftest.sample_ledger``, cached in $CAPSEM_BENCH_CACHE):

* ``check-scale``: one benchmark per size, 500,000, 1,000,000 and 2,000,000 bodies (and
  4,000,000 with ``CAPSEM_BENCH_HUGE=1``; writing that sample takes several minutes, and
  about 7 GB). Each round is one check in a child process that measures itself
  (``oracles/peak_memory.py``; the check's modules imported before its baseline, so start-up
  is left out): its wall and CPU seconds, its peak resident size (VmHWM) and the anonymous
  and file-backed parts at the sampled peak. ``extra_info`` holds the medians over the
  rounds (``wall_s``, ``cpu_s``, ``peak_rss``, ``anon_at_peak``, ``file_at_peak``,
  ``max_anon``, ``max_file``, bytes), the cost per body row (``wall_ns_per_row``,
  ``cpu_ns_per_row``), the bound (``rss_bound``: 256 MiB + 160 bytes a row) and whether the
  peak kept to it (``rss_within_bound``), and for 2M and 4M the per-row ratios to 500k and 1M
  (``vs_bodies``, ``wall_per_row_ratio``, ``cpu_per_row_ratio``, ``per_row_target``: 1.15 and
  1.2). The benchmark's own timings are the child processes', start-up included.
* ``check-cold``: the 1M small sample and the large-body sample (``CAPSEM_BENCH_RAW``, 1 GiB
  raw by default), each round: a warm check, then the page cache dropped (``sync; echo 3 >
  /proc/sys/vm/drop_caches``, which needs root), ``cat`` of session.db and session.bodies
  timed, the cache dropped again and the check timed cold (the benchmarked call).
  ``extra_info``: ``cold_check_s``, ``warm_check_s``, ``cold_cat_s``, ``cold_cpu_s``,
  ``warm_cpu_s`` (medians) and ``cold_ratio`` = cold check / max(cold cat, warm check)
  (target ``cold_target``, 1.2). Beside them: ``cpu_floor_ratio``, the ratio the cold
  check's CPU alone allows on these ``cores`` (cold CPU / cores / max(cat, warm): no schedule
  does better; a cold check spends more CPU than a warm one, and on a VM whose host reclaims
  freed memory far more, see docs/performance.md), ``above_floor_s``, how far the cold check's
  wall is above its CPU / cores (what its own schedule loses), and ``per_round``, each round's
  seconds: cold check (its CPU), warm check (its CPU), cold ``cat``. The same rounds once
  more on the small sample with the bodies' verification started as the archive walk
  returns, from the index saved while warm (``oracles/verify_ahead.py``): not a target, the
  bound of what a verification streamed beside the body index's pass could gain; and again
  with session.bodies read ahead before session.db, the bound of any verification inside the
  stream. Skipped, saying so, where the cache cannot be dropped.

Every record also carries the load average before and after (``load_before``,
``load_after``): the machine is shared, so read ratios with it. ``test_scale_report`` prints
the table. Run: ``python3 -m pytest bench/bench_scale.py -q -s``
(``CAPSEM_BENCH_SCALE_ROUNDS``, default 3, and ``CAPSEM_BENCH_COLD_ROUNDS``, default 5).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import RAW, sample_ledger, warm  # noqa: E402
from oracles import verify_ahead  # noqa: E402
from oracles.peak_memory import STATUS, Measured, measured  # noqa: E402

HUGE = os.environ.get("CAPSEM_BENCH_HUGE") == "1"
SIZES = (500_000, 1_000_000, 2_000_000) + ((4_000_000,) if HUGE else ())
# Per-row cost targets: (bodies, compared with, at most this many times the smaller's cost).
PER_ROW_TARGETS = {2_000_000: (500_000, 1.15), 4_000_000: (1_000_000, 1.2)}
ROUNDS = int(os.environ.get("CAPSEM_BENCH_SCALE_ROUNDS", "3"))
COLD_ROUNDS = int(os.environ.get("CAPSEM_BENCH_COLD_ROUNDS", "5"))
RSS_FIXED = 256 << 20
RSS_PER_ROW = 160
COLD_TARGET = 1.2
PRELOAD = ("numpy", "capsem_core.check.run", "capsem_core.cli.check")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")

_scale: dict[int, dict[str, Any]] = {}
_cold: dict[str, dict[str, Any]] = {}

pytestmark = pytest.mark.skipif(not STATUS.exists(), reason="no /proc/self/status: the resident size cannot be read")


def _check(db: Path, ahead: Path | None = None, bodies_first: bool = False) -> Measured:
    """One measured check; ``ahead``: an index saved by oracles/verify_ahead.py, whose
    verification then starts as the archive walk returns (the bound, see the module), and
    with ``bodies_first`` the read-ahead takes session.bodies before session.db."""
    env: dict[str, str] | None = None
    preload = PRELOAD
    if ahead is not None:
        env = {verify_ahead.ENV: str(ahead), **({verify_ahead.BODIES_FIRST: "1"} if bodies_first else {})}
        preload = (*PRELOAD, "oracles.verify_ahead")
    got = measured(["check", "--db", str(db), "--verify-bodies", "--json"], env=env, preload=preload, timeout=3600)
    assert got.status == 0, got.stdout[-2000:] + got.stderr[-2000:]
    return got


def _median(runs: list[Measured], name: str) -> float:
    return float(statistics.median(getattr(r, name) for r in runs))


def _bodies(db: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.benchmark(group="check-scale")
@pytest.mark.parametrize("size", SIZES, ids=[f"{s // 1000}k" for s in SIZES])
def test_check_at_scale(benchmark, size: int) -> None:
    db = warm(sample_ledger("small", bodies=size))
    rows = _bodies(db)
    runs: list[Measured] = []
    load_before = os.getloadavg()[0]
    benchmark.pedantic(lambda: runs.append(_check(db)), rounds=ROUNDS, iterations=1, warmup_rounds=0)
    info: dict[str, Any] = {"bodies": rows, "db_bytes": db.stat().st_size, "rounds": len(runs),
                            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
    for name in ("wall_s", "cpu_s"):
        info[name] = round(_median(runs, name), 4)
    for name in ("peak_rss", "anon_at_peak", "file_at_peak", "max_anon", "max_file"):
        info[name] = int(_median(runs, name))
    info["wall_ns_per_row"] = round(info["wall_s"] * 1e9 / rows, 1)
    info["cpu_ns_per_row"] = round(info["cpu_s"] * 1e9 / rows, 1)
    info["rss_bound"] = RSS_FIXED + RSS_PER_ROW * rows
    info["rss_within_bound"] = max(r.peak_rss for r in runs) <= info["rss_bound"]
    if size in PER_ROW_TARGETS and PER_ROW_TARGETS[size][0] in _scale:
        base, target = PER_ROW_TARGETS[size]
        smaller = _scale[base]
        info.update(vs_bodies=smaller["bodies"], per_row_target=target,
                    wall_per_row_ratio=round(info["wall_ns_per_row"] / smaller["wall_ns_per_row"], 3),
                    cpu_per_row_ratio=round(info["cpu_ns_per_row"] / smaller["cpu_ns_per_row"], 3))
    benchmark.extra_info.update(info)
    _scale[size] = info


def _drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    DROP_CACHES.write_text("3\n")


def _can_drop_caches() -> str | None:
    """Why the page cache cannot be dropped here, or None when it can."""
    try:
        _drop_caches()
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"the page cache cannot be dropped here ({exc}); run as root where /proc/sys is writable"
    return None


def _cat(db: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["cat", str(db), str(db.with_suffix(".bodies"))], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _cold_rounds(benchmark, db: Path, ahead: Path | None = None, bodies_first: bool = False) -> dict[str, Any]:
    """COLD_ROUNDS rounds of: a warm check, ``cat`` of the pair from a dropped cache, then the
    check from a dropped cache (the benchmarked call); the medians and the ratio."""
    cold: list[Measured] = []
    warm_runs: list[Measured] = []
    cats: list[float] = []

    def setup() -> None:
        warm(db)
        warm_runs.append(_check(db))
        _drop_caches()
        cats.append(_cat(db))
        _drop_caches()

    load_before = os.getloadavg()[0]
    benchmark.pedantic(lambda: cold.append(_check(db, ahead, bodies_first)), setup=setup, rounds=COLD_ROUNDS,
                       iterations=1)
    info = {"bodies": _bodies(db), "db_bytes": db.stat().st_size, "bodies_bytes": db.with_suffix(".bodies").stat().st_size,
            "rounds": len(cold), "cold_check_s": round(_median(cold, "wall_s"), 4),
            "warm_check_s": round(_median(warm_runs, "wall_s"), 4), "cold_cat_s": round(statistics.median(cats), 4),
            "cold_cpu_s": round(_median(cold, "cpu_s"), 4), "warm_cpu_s": round(_median(warm_runs, "cpu_s"), 4),
            "cold_peak_rss": int(_median(cold, "peak_rss")), "cold_target": COLD_TARGET,
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
    info["cold_ratio"] = round(info["cold_check_s"] / max(info["cold_cat_s"], info["warm_check_s"]), 3)
    # No schedule on these cores ends before the CPU the cold check spent is spent: the ratio
    # that CPU alone allows, how far the check's wall is above it (what its schedule loses),
    # and each round's figures, to read the ratio against the CPU a cold cache cost.
    cores = len(os.sched_getaffinity(0))
    floor = info["cold_cpu_s"] / cores
    info.update(cores=cores, cpu_floor_ratio=round(floor / max(info["cold_cat_s"], info["warm_check_s"]), 3),
                above_floor_s=round(info["cold_check_s"] - floor, 4),
                per_round="; ".join(f"{c.wall_s:.2f} ({c.cpu_s:.2f}) {w.wall_s:.2f} ({w.cpu_s:.2f}) {t:.2f}"
                                    for c, w, t in zip(cold, warm_runs, cats)))
    benchmark.extra_info.update(info)
    return info


_BOUNDS = {False: "small, verified from the walk (bound)",
           True: "small, verified beside the stream, bodies first (bound)"}


@pytest.mark.benchmark(group="check-cold")
@pytest.mark.parametrize("bodies_first", [False, True], ids=["from-the-walk", "bodies-first"])
def test_cold_check_bound(benchmark, tmp_path: Path, bodies_first: bool) -> None:
    """The bounds of a streamed verification (oracles/verify_ahead.py), not targets: the small
    sample's check with every body's verification started as the archive walk returns, from
    its index saved while warm; with ``bodies_first`` the read-ahead also takes session.bodies
    (52 MB here) before session.db, so the walk returns near the start and the verification
    runs beside the stream of session.db rather than after it, the bound of any verification
    inside the stream. They run first, so that check-cold still ends with the large sample's
    rounds, which leave that sample's pages cached for the benchmarks after them."""
    db = sample_ledger("small", bodies=1_000_000)
    why = _can_drop_caches()
    if why is not None:
        pytest.skip(why)
    saved = tmp_path / "index.npz"
    verify_ahead.save_index(db, saved)
    _cold[_BOUNDS[bodies_first]] = _cold_rounds(benchmark, db, ahead=saved, bodies_first=bodies_first)


@pytest.mark.benchmark(group="check-cold")
@pytest.mark.parametrize("mix", ["small", "large"])
def test_check_from_a_cold_page_cache(benchmark, mix: str) -> None:
    db = sample_ledger("small", bodies=1_000_000) if mix == "small" else sample_ledger("large", raw_bytes=RAW)
    why = _can_drop_caches()
    if why is not None:
        pytest.skip(why)
    _cold[mix] = _cold_rounds(benchmark, db)


def test_scale_report(figure) -> None:
    lines = ["", "check --verify-bodies as the ledger grows (medians; MiB; ns a body row)",
             f"{'bodies':>10} {'wall s':>8} {'cpu s':>8} {'peak':>7} {'anon':>7} {'file':>7} {'bound':>7} "
             f"{'wall/row':>9} {'cpu/row':>8} {'ratio':>14}"]
    for size, r in sorted(_scale.items()):
        ratio = (f"{r['wall_per_row_ratio']:.2f}/{r['cpu_per_row_ratio']:.2f}"
                 f" (<= {r['per_row_target']} vs {r['vs_bodies'] // 1000}k)") if "wall_per_row_ratio" in r else ""
        lines.append(f"{r['bodies']:>10} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {r['peak_rss'] >> 20:>7} "
                     f"{r['anon_at_peak'] >> 20:>7} {r['file_at_peak'] >> 20:>7} {r['rss_bound'] >> 20:>7} "
                     f"{r['wall_ns_per_row']:>9.0f} {r['cpu_ns_per_row']:>8.0f} {ratio}")
    for mix, r in sorted(_cold.items(), key=lambda item: "bound" in item[0]):   # the bound after the check
        lines.append(f"cold {mix}: check {r['cold_check_s']:.2f} s ({r['cold_cpu_s']:.2f} s CPU), warm "
                     f"{r['warm_check_s']:.2f} s ({r['warm_cpu_s']:.2f} s CPU), cat {r['cold_cat_s']:.2f} s: "
                     f"{r['cold_ratio']:.2f}x max(cat, warm) (target <= {r['cold_target']}); its CPU allows "
                     f"{r['cpu_floor_ratio']:.2f}x on {r['cores']} cores, the check {r['above_floor_s']:.2f} s above")
    if len(lines) > 3 or _cold:
        figure("\n".join(lines))
