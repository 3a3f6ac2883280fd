"""``check --verify-bodies --incremental`` and ``--subset`` against the full ``check
--verify-bodies`` of the same ledger, measured in the same run.

Three groups on the 1 GiB large-body sample (``conftest.large``; ``CAPSEM_BENCH_RAW``
overrides the size), each with the full check as its baseline:

* ``incremental-unchanged``: ``--incremental`` on the unchanged sample, its record written by
  one run before timing. Target: <= 10% of the full check (>= 10x in the ratio table).
* ``incremental-appended``: a copy of the sample in a temp dir, grown by 1% more bodies (by
  count and by raw bytes) with the project's writer after its record was written; every round
  starts from that record. Target: <= 20% (>= 5x).
* ``subset``: ``--subset 1/4``. Target: <= 35% (>= 2.86x).

Records go to a temp dir (``CAPSEM_CORE_VERIFIED_DIR``); the cached sample is only read.
Run: ``python3 -m pytest bench/bench_incremental.py -q -s -p no:cacheprovider``.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from capsem_core.check import check_ledger
from capsem_core.check import record as _record
from capsem_core.check.incremental import VerifyOptions
from capsem_core.check.subset import Subset
from capsem_core.writer import Body, LedgerWriter

ROUNDS = 3
INCREMENTAL = VerifyOptions(incremental=True)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("verified")


@pytest.fixture(autouse=True)
def _record_dir(records: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_record.RECORD_DIR_ENV, str(records))


def full_check(db: Path) -> None:
    report = check_ledger(db, verify_bodies=True)
    assert report.sound and report.coverage is not None and report.coverage.verified.blocks > 0


def _body(seed: int, size: int) -> bytes:
    """Text that compresses about as well as the sample's large bodies do (a few times over)."""
    out, x = bytearray(), seed * 2654435761 % 2**32 or 1
    while len(out) < size:
        x = (x * 1103515245 + 12345) % 2**31
        out += f'{{"line": {x % 99991}, "seed": {seed}, "value": "{x:08x}{(x >> 7):06x}"}}\n'.encode()
    return bytes(out[:size])


@pytest.fixture(scope="module")
def appended(large: Path, tmp_path_factory: pytest.TempPathFactory, records: Path) -> tuple[Path, bytes]:
    """(session.db of a copy of the sample grown by 1% more bodies, the record of the copy
    before it grew)."""
    directory = tmp_path_factory.mktemp("appended") / "ledger"
    directory.mkdir()
    for name in ("session.db", "session.bodies"):
        shutil.copyfile(large.parent / name, directory / name)
    db = directory / "session.db"
    mp = pytest.MonkeyPatch()
    mp.setenv(_record.RECORD_DIR_ENV, str(records))
    try:
        before = check_ledger(db, verify_bodies=True, options=INCREMENTAL)
        path = _record.record_path(directory / "session.bodies")
    finally:
        mp.undo()
    assert before.sound and before.coverage is not None and before.coverage.record == "written"
    bodies, raw = before.checks["verify_bodies"].counts["bodies"], before.checks["verify_bodies"].counts["body_bytes"]
    more = math.ceil(bodies / 100)
    w = LedgerWriter(directory)
    for i in range(more):
        w.insert("net_events", {"timestamp": f"2026-01-01T00:00:{i % 60:02d}Z", "domain": "bench.example",
                                "decision": "allowed", "method": "POST", "path": f"/append/{i}"},
                 [Body("response", _body(i, raw // bodies), "http.request")])
        if i % 4 == 3:
            w.flush()
    w.close()
    return db, path.read_bytes()


def _ratio_info(benchmark, baseline: bool) -> None:
    if baseline:
        benchmark.extra_info["baseline"] = True


@pytest.mark.benchmark(group="incremental-unchanged")
def test_full_check_verify_bodies(benchmark, large: Path) -> None:
    _ratio_info(benchmark, True)
    benchmark.pedantic(full_check, args=(large,), rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="incremental-unchanged")
def test_incremental_on_the_unchanged_sample(benchmark, large: Path) -> None:
    first = check_ledger(large, verify_bodies=True, options=INCREMENTAL)
    assert first.sound

    def run() -> None:
        report = check_ledger(large, verify_bodies=True, options=INCREMENTAL)
        assert report.sound and report.coverage is not None
        assert report.coverage.verified.blocks == 0 and report.coverage.unchanged.blocks > 0

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="incremental-appended")
def test_full_check_verify_bodies_after_the_append(benchmark, appended: tuple[Path, bytes]) -> None:
    _ratio_info(benchmark, True)
    benchmark.pedantic(full_check, args=(appended[0],), rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="incremental-appended")
def test_incremental_after_appending_one_percent_more_bodies(benchmark, appended: tuple[Path, bytes]) -> None:
    db, before = appended
    path = _record.record_path(db.with_suffix(".bodies"))

    def restore() -> None:
        # Every round starts where the ledger grew: the record of the ledger before the append.
        path.write_bytes(before)   # the file the last round wrote, 0600 already

    def run() -> None:
        report = check_ledger(db, verify_bodies=True, options=INCREMENTAL)
        cov = report.coverage
        assert report.sound and cov is not None and cov.record == "written"
        assert cov.verified.blocks > 0 and cov.unchanged.blocks > 0
        benchmark.extra_info.update(verified_blocks=cov.verified.blocks, verified_bytes=cov.verified.bytes,
                                    unchanged_blocks=cov.unchanged.blocks, unchanged_bytes=cov.unchanged.bytes)

    benchmark.pedantic(run, setup=restore, rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="subset")
def test_full_check_verify_bodies_again(benchmark, large: Path) -> None:
    _ratio_info(benchmark, True)
    benchmark.pedantic(full_check, args=(large,), rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="subset")
def test_subset_one_quarter(benchmark, large: Path) -> None:
    options = VerifyOptions(subset=Subset.parse("1/4"))

    def run() -> None:
        report = check_ledger(large, verify_bodies=True, options=options)
        assert report.sound and report.coverage is not None and report.coverage.skipped.blocks > 0
        benchmark.extra_info.update(verified_bytes=report.coverage.verified.bytes,
                                    skipped_bytes=report.coverage.skipped.bytes)

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
