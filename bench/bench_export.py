"""``export --warc`` side by side with the plain ``export DIR`` and with its floor, in one run.

Groups (the ratio table after the run divides each time into its group's baseline):

* ``export-large``: the large-body sample (1 GiB raw) exported by the command, in process:
  ``export --db L DIR`` (the baseline: one file per body, its hash checked, a manifest) vs
  ``export --db L --warc OUT`` (level 6, every core). Target: within 4x (ratio >= 0.25).
* ``export-warc-floor``: the same WARC export vs the work no WARC export of this ledger can
  skip, its floor (the baseline): ``Ledger.verify()`` (every body read back through the
  verify kernel) plus one libdeflate pass at level 6 compressing every body into a gzip
  member of its own (``_native._warc``, every core, the bodies already in memory). Target:
  within 1.5x (ratio >= 0.67).
* ``test_export_paired_rounds``: the three alternating round by round (a host whose speed
  drifts moves them alike), the median of the paired wall-time ratios and the ratio of the
  median CPU times (every thread's) printed. Asserts nothing about speed.

Each export writes to a fresh directory on the same file system as the cache (the DIR export
skips what a previous round left, so every round starts empty; removing it is not timed).

Run: ``python3 -m pytest bench/bench_export.py -q -s -p no:cacheprovider``.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from capsem_core import cores
from capsem_core._native import _warc
from capsem_core.bodies import BodyBatch
from capsem_core.cli import app
from capsem_core.ledger import Ledger

sys.path.insert(0, str(Path(__file__).parent))
from conftest import LEDGER_CACHE, timed  # noqa: E402

LEVEL = 6
ROUNDS = 3
PAIRED_ROUNDS = 3


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    LEDGER_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=LEDGER_CACHE, prefix="export-bench-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def bodies(large: Path) -> list[BodyBatch]:
    """Every body of the large sample in memory, for the floor's compression pass."""
    with Ledger(large) as ledger:
        return list(ledger.body_batches())


def _command(*argv: str) -> int:
    with contextlib.redirect_stderr(io.StringIO()):
        code = app.main(list(argv))
    assert code == 0
    return code


def _fresh(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _export_dir(db: Path, out: Path) -> None:
    _fresh(out)
    _command("export", "--db", str(db), str(out))


def _export_warc(db: Path, out: Path) -> None:
    _fresh(out)
    _command("export", "--db", str(db), "--warc", str(out), "--warc-level", str(LEVEL))


def _floor(db: Path, bodies: list[BodyBatch]) -> int:
    with Ledger(db) as ledger:
        result = ledger.verify()
    assert not result.faults
    members = _warc.GzipMembers(LEVEL, cores.threads(0))
    out, total = None, 0
    for batch in bodies:
        out, size, _ = members.compress(b"", np.zeros(len(batch) + 1, np.int64), batch.buffer, batch.offsets,
                                        batch.lengths, out=out)
        total += size
    return total


def _bench(benchmark, fn, *args, baseline: bool = False) -> None:
    if baseline:
        benchmark.extra_info["baseline"] = True
    benchmark.pedantic(fn, args=args, rounds=ROUNDS, iterations=1, warmup_rounds=0)


@pytest.mark.benchmark(group="export-large")
def test_large_export_dir(benchmark, large, scratch):
    _bench(benchmark, _export_dir, large, scratch / "dir", baseline=True)


@pytest.mark.benchmark(group="export-large")
def test_large_export_warc(benchmark, large, scratch):
    _bench(benchmark, _export_warc, large, scratch / "out.warc.gz")


@pytest.mark.benchmark(group="export-warc-floor")
def test_large_floor_verify_plus_compression(benchmark, large, bodies):
    _bench(benchmark, _floor, large, bodies, baseline=True)


@pytest.mark.benchmark(group="export-warc-floor")
def test_large_export_warc_vs_floor(benchmark, large, scratch):
    _bench(benchmark, _export_warc, large, scratch / "out.warc.gz")


def test_export_paired_rounds(figure, large: Path, scratch: Path, bodies: list[BodyBatch]) -> None:
    """The three contenders alternating round by round: per baseline, the median of the
    rounds' baseline / warc wall-time ratios and the ratio of the median CPU times. Targets:
    >= 0.25 against export DIR, >= 0.67 against the floor."""
    runs = {"export DIR": lambda: _export_dir(large, scratch / "dir"),
            "the floor": lambda: _floor(large, bodies),
            "export --warc": lambda: _export_warc(large, scratch / "out.warc.gz")}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(PAIRED_ROUNDS):
        for name, fn in runs.items():
            took = timed(fn)
            wall[name].append(took[0])
            cpu[name].append(took[1])
    size = (scratch / "out.warc.gz").stat().st_size
    figure(f"\nexport --warc wrote {size:,} bytes; wall seconds per round: "
          + "; ".join(f"{n} {', '.join(f'{t:.2f}' for t in ts)}" for n, ts in wall.items()))
    for baseline in ("export DIR", "the floor"):
        ratios = [b / c for b, c in zip(wall[baseline], wall["export --warc"])]
        figure(f"export --warc vs {baseline}, {PAIRED_ROUNDS} rounds: wall ratio median "
              f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); CPU "
              f"{statistics.median(cpu[baseline]):.2f} s / {statistics.median(cpu['export --warc']):.2f} s = "
              f"{statistics.median(cpu[baseline]) / statistics.median(cpu['export --warc']):.3f}")
