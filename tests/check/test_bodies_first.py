"""A plain --verify-bodies of a ledger whose session.bodies is the larger file reads the bodies
back before it walks the archive (``check/run.py``, ``verify.read_back``): one read of the file
under the kernel, the walk after it from the cache, one open of session.bodies, and the
verdicts of the other order (``test_check_archive.py`` runs every archive test in both)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.check.test_one_path import _check, _cleanup, _opens

from capsem_core import verify
from capsem_core.check import check_ledger
from capsem_core.snapshot import Snapshot
from capsem_core.writer import Body, LedgerWriter


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Forty bodies of 64 KiB that deflate does not shrink: session.bodies about 2.6 MB, many
    times session.db."""
    directory = tmp_path_factory.mktemp("bodies-first") / "sess-large"
    with LedgerWriter(directory) as w:
        for i in range(40):
            w.insert("net_events", {"timestamp": f"2025-06-02T09:00:{i:02d}Z", "domain": "example.com",
                                    "decision": "allowed", "method": "GET", "path": f"/{i}", "status_code": 200},
                     [Body("response", os.urandom(64 << 10), "http.request")])
    db = directory / "session.db"
    for sidecar in ("-wal", "-shm"):
        Path(str(db) + sidecar).unlink(missing_ok=True)
    assert db.with_suffix(".bodies").stat().st_size > db.stat().st_size
    return db


def _spied(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[bool]]:
    """(one entry per read_back, the ``rules`` of each extent walk), as the check runs."""
    reads: list[int] = []
    walks: list[bool] = []
    read_back, walk_extents = verify.read_back, Snapshot.walk_extents

    def counting(snapshot, **kw):   # type: ignore[no-untyped-def]
        reads.append(1)
        return read_back(snapshot, **kw)

    def recording(self, blocks, *, rules=False):   # type: ignore[no-untyped-def]
        walks.append(rules)
        return walk_extents(self, blocks, rules=rules)

    monkeypatch.setattr(verify, "read_back", counting)
    monkeypatch.setattr(Snapshot, "walk_extents", recording)
    return reads, walks


def test_the_bodies_are_read_back_first_where_session_bodies_is_the_larger_file(
        large: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads, rules = _spied(monkeypatch)
    report = check_ledger(large, verify_bodies=True)
    assert report.sound and report.checks["verify_bodies"].counts["verified"] == 40
    # Read back once, before the walk, which then walks no zlib rules ahead of anything.
    assert reads == [1] and rules == [False]


@pytest.mark.parametrize("options", ["incremental", "subset"])
def test_a_partial_or_incremental_verify_walks_first_whatever_the_sizes(large: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path, options: str) -> None:
    from capsem_core.check.incremental import VerifyOptions
    from capsem_core.check.subset import Subset

    reads, _rules = _spied(monkeypatch)
    chosen = (VerifyOptions(incremental=True, record_dir=tmp_path) if options == "incremental"
              else VerifyOptions(subset=Subset.parse("1/2")))
    assert check_ledger(large, verify_bodies=True, options=chosen).sound
    assert reads == []


def _bodies_opens(db: Path, tmp_path: Path) -> tuple[int, int]:
    """(exit status, successful opens of session.bodies) of ``check --verify-bodies`` under strace."""
    trace = tmp_path / "trace.txt"
    _cleanup(db)
    try:
        done = _check(db, strace=trace)
        return done.returncode, len(_opens(trace, db.with_suffix(".bodies")))
    finally:
        _cleanup(db)


def test_a_check_reading_the_bodies_first_opens_session_bodies_once(large: Path, tmp_path: Path) -> None:
    assert _bodies_opens(large, tmp_path) == (0, 1)


def test_a_bad_header_is_one_finding_and_one_open_in_either_order(large: Path, tmp_path: Path) -> None:
    """The early read-back's open fails on a header that is not an archive's; the walk reports
    it from the snapshot's remembered refusal, without opening the file again."""
    import shutil

    broken = tmp_path / "sess-bad-header"
    shutil.copytree(large.parent, broken)
    with open(broken / "session.bodies", "r+b") as f:
        f.write(b"NOTANARCHIVE")
    db = broken / "session.db"
    report = check_ledger(db, verify_bodies=True)
    assert not report.sound
    assert [f.code for f in report.checks["body_archive"].findings] == ["bad_file_header"]
    assert report.checks["verify_bodies"].status == "skipped"
    assert _bodies_opens(db, tmp_path) == (1, 1)
