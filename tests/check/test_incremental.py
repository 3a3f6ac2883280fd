"""check --verify-bodies --incremental and --max-age: the verification record, what it proves
and when it is not trusted.

Every test writes real ledgers with LedgerWriter into a temp dir and keeps its records in a
temp cache (``CAPSEM_CORE_VERIFIED_DIR``). Damage is done the way it happens: bytes flipped
in place (same file), files replaced by rename, rows edited with plain SQL.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tests.check.test_check import _bytes, run_cli, sql, write_ledger
from tests.check.test_check_archive import flip

from capsem_core._native import _archive, _blake3
from capsem_core.check import check_ledger
from capsem_core.check import record as _record
from capsem_core.check.incremental import VerifyOptions, parse_duration
from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_ledger
from capsem_core.writer import Body, LedgerWriter

DAY = 86400.0


@pytest.fixture(autouse=True)
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache" / "verified"
    monkeypatch.setenv(_record.RECORD_DIR_ENV, str(directory))
    return directory


def append(directory: Path, rows: int, *, seed: int = 1000, flush_each: bool = True) -> None:
    """More bodies in new blocks (a new writer never continues an old block)."""
    w = LedgerWriter(directory, close_every_flush=flush_each)
    for i in range(rows):
        w.insert("net_events", {"timestamp": f"2025-06-03T10:00:{i % 60:02d}Z", "domain": "example.org",
                                "decision": "allowed", "method": "GET", "path": f"/{seed}/{i}", "status_code": 200},
                 [Body("response", _bytes(seed + i, 3000 + 37 * i), "http.request")])
        w.flush()
    w.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    db = write_ledger(tmp_path / "sess")
    append(db.parent, 6)   # eight blocks in all
    return db


def incremental(db: Path, **kw: object):
    return check_ledger(db, verify_bodies=True, options=VerifyOptions(incremental=True, **kw))  # type: ignore[arg-type]


def blocks(db: Path) -> list[tuple[int, int]]:
    return [tuple(r) for r in sql(db, "SELECT block_offset, disk_len FROM body_blocks ORDER BY block_offset")]


def record_file(records: Path) -> Path:
    (path,) = records.glob("*.record")
    return path


def codes(report) -> list[str]:
    return [f.code for f in report.checks["verify_bodies"].findings]


# --- the record and what it proves ------------------------------------------------------------

def test_a_first_run_verifies_every_block_and_writes_a_private_record(ledger: Path, records: Path) -> None:
    report = incremental(ledger)
    cov = report.coverage
    assert report.sound and cov.record == "written" and cov.warning is None
    assert cov.verified.blocks == len(blocks(ledger)) and cov.unchanged.blocks == 0
    assert report.checks["verify_bodies"].counts["verified"] == report.checks["verify_bodies"].counts["bodies"]
    path = record_file(records)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(records.stat().st_mode) == 0o700
    assert not list(records.glob(".*.part-*"))
    # Bytes per block, not per body.
    assert path.stat().st_size == _record.HEADER_BYTES + 32 + _record.ENTRY.itemsize * len(blocks(ledger))
    assert not (ledger.parent / "verified").exists()  # nothing written beside the ledger


def test_an_unchanged_ledger_is_proven_unchanged_without_reading_back_a_body(ledger: Path, records: Path) -> None:
    incremental(ledger)
    before = record_file(records).read_bytes()
    report = incremental(ledger)
    cov = report.coverage
    assert report.sound
    assert cov.verified.blocks == 0 and cov.verified.bodies == 0
    assert cov.unchanged.blocks == len(blocks(ledger))
    assert cov.unchanged.bytes == sum(d for _, d in blocks(ledger))
    assert cov.record == "used"
    assert record_file(records).read_bytes() == before   # nothing new: the record is not rewritten


def test_after_an_append_only_the_new_blocks_are_read_back(ledger: Path) -> None:
    incremental(ledger)
    old = blocks(ledger)
    append(ledger.parent, 2, seed=5000)
    report = incremental(ledger)
    cov = report.coverage
    assert report.sound
    assert cov.verified.blocks == 2 and cov.unchanged.blocks == len(old)
    assert report.checks["verify_bodies"].counts["verified"] == 2
    assert incremental(ledger).coverage.unchanged.blocks == len(old) + 2


def test_an_open_block_that_got_more_segments_is_read_back_whole(tmp_path: Path) -> None:
    directory = tmp_path / "open"
    w = LedgerWriter(directory)
    try:
        for i in range(3):
            w.insert("net_events", {"timestamp": "2025-06-03T10:00:00Z", "domain": "a.example", "decision": "allowed",
                                    "path": f"/{i}"}, [Body("response", _bytes(i, 4000), "http.request")])
            w.flush()
        db = directory / "session.db"
        first = incremental(db)
        assert first.sound and first.coverage.verified.blocks == 1
        w.insert("net_events", {"timestamp": "2025-06-03T10:00:09Z", "domain": "a.example", "decision": "allowed",
                                "path": "/more"}, [Body("response", _bytes(99, 4000), "http.request")])
        w.flush()
        grown = incremental(db)
        assert grown.sound, codes(grown)
        assert grown.coverage.verified.blocks == 1 and grown.coverage.unchanged.blocks == 0
        assert grown.checks["verify_bodies"].counts["verified"] == 4   # the whole block, old bodies too
    finally:
        w.close()
    closed = incremental(db)   # closing wrote a FINAL segment: the block grew again
    assert closed.sound and closed.coverage.verified.blocks == 1
    assert incremental(db).coverage.unchanged.blocks == 1


@pytest.mark.parametrize("where", ["block header", "segment header hash", "first payload byte", "last byte",
                                   "middle"])
def test_a_flipped_byte_in_an_old_block_is_caught(ledger: Path, where: str) -> None:
    incremental(ledger)
    off, disk = blocks(ledger)[1]
    at = {"block header": off + 5, "segment header hash": off + 8 + 20, "first payload byte": off + 8 + 52,
          "last byte": off + disk - 1, "middle": off + disk // 2}[where]
    flip(ledger.with_suffix(".bodies"), at)
    report = incremental(ledger)
    assert not report.sound
    if where == "block header":
        # The headers are walked on every run, before any body is read: caught there.
        assert report.checks["body_archive"].findings[0].code == "bad_extent"
        return
    assert "block_changed" in codes(report)
    changed = next(f for f in report.checks["verify_bodies"].findings if f.code == "block_changed")
    assert f"block at offset {off} changed since it was verified" in changed.message
    assert report.coverage.verified.blocks == 1   # read back too, so the bodies at fault are named
    # The damage is never recorded as verified: the next run finds it again.
    assert "block_changed" in codes(incremental(ledger))


def test_a_flip_in_the_archives_first_bytes_distrusts_the_record_and_is_caught_by_reading_back(ledger: Path) -> None:
    incremental(ledger)
    # The file header, the first block header and the first segment header say which archive
    # this is: changed, the record is not this archive's, and every block is read back.
    flip(ledger.with_suffix(".bodies"), _record.IDENTITY_PREFIX_BYTES - 3)
    report = incremental(ledger)
    assert not report.sound
    assert "begins with other bytes" in report.coverage.warning
    assert set(codes(report)) == {"segment_hash"}
    assert not incremental(ledger).sound   # and again: damage is never recorded


def test_a_flip_in_an_unreferenced_trailing_segment_is_caught_though_no_body_reads_it(tmp_path: Path) -> None:
    directory = tmp_path / "tail"
    w = LedgerWriter(directory)
    w.insert("net_events", {"timestamp": "2025-06-03T10:00:00Z", "domain": "a.example", "decision": "allowed"},
             [Body("response", _bytes(1, 5000), "http.request")])
    w.close()   # the block ends with an empty FINAL segment no body reads
    db = directory / "session.db"
    assert incremental(db).sound
    off, disk = blocks(db)[0]
    flip(db.with_suffix(".bodies"), off + disk - 1)
    report = incremental(db)
    assert not report.sound and codes(report)[0] == "block_changed"


def test_a_row_edited_in_an_old_block_makes_it_read_back_and_caught(ledger: Path) -> None:
    incremental(ledger)
    (rid,) = sql(ledger, "SELECT id FROM event_body_blobs ORDER BY block_offset, body_offset LIMIT 1")[0]
    sql(ledger, "UPDATE event_body_blobs SET body_hash = 'blake3:' || ? WHERE id = ?", ("0" * 64, rid))
    report = incremental(ledger)
    assert not report.sound
    assert report.coverage.verified.blocks == 1
    assert codes(report) == ["body_hash"]


def test_a_row_deduplicated_into_an_old_block_makes_that_block_read_back(ledger: Path) -> None:
    incremental(ledger)
    w = LedgerWriter(ledger.parent)
    w.insert("net_events", {"timestamp": "2025-06-03T11:00:00Z", "domain": "b.example", "decision": "allowed"},
             [Body("response", _bytes(1000, 3000), "http.request")])   # the bytes of an old body
    w.close()
    assert w.bodies_deduplicated_in_archive == 1
    report = incremental(ledger)
    assert report.sound
    assert report.coverage.verified.blocks >= 1
    assert report.coverage.unchanged.blocks >= len(blocks(ledger)) - 2


# --- when the record is not trusted ----------------------------------------------------------

def test_a_replaced_archive_is_verified_fully_and_never_called_damaged(ledger: Path, tmp_path: Path) -> None:
    incremental(ledger)
    other = write_ledger(tmp_path / "other")   # another ledger, blocks at the same offsets
    bodies = ledger.with_suffix(".bodies")
    tmp = bodies.with_name("replacement")
    tmp.write_bytes(other.with_suffix(".bodies").read_bytes() + bodies.read_bytes()[len(other.with_suffix(".bodies").read_bytes()):])
    os.replace(tmp, bodies)
    report = incremental(ledger)
    cov = report.coverage
    assert cov.record == "written"   # ignored, then rewritten from this clean run's blocks
    assert "session.bodies was replaced or rewritten" in cov.warning
    assert "block_changed" not in codes(report)
    assert cov.verified.blocks == len(blocks(ledger)) and cov.unchanged.blocks == 0


def test_a_rewritten_archive_with_the_same_bytes_is_not_trusted_either(ledger: Path) -> None:
    incremental(ledger)
    bodies = ledger.with_suffix(".bodies")
    tmp = bodies.with_name("copy")
    tmp.write_bytes(bodies.read_bytes())
    os.replace(tmp, bodies)
    report = incremental(ledger)
    assert report.sound and report.coverage.unchanged.blocks == 0
    assert "replaced or rewritten" in report.coverage.warning


def test_a_replaced_session_db_is_not_trusted(ledger: Path) -> None:
    incremental(ledger)
    tmp = ledger.with_name("db-copy")
    tmp.write_bytes(ledger.read_bytes())
    os.replace(tmp, ledger)
    report = incremental(ledger)
    assert "session.db was replaced" in report.coverage.warning
    assert report.coverage.unchanged.blocks == 0


def _rewrite(path: Path, mutate) -> None:
    """Change a record's header fields and re-seal it (so only the field itself is wrong)."""
    data = bytearray(path.read_bytes()[:-32])
    mutate(data)
    path.write_bytes(bytes(data) + _blake3.digest(bytes(data)))


@pytest.mark.parametrize("damage, words", [
    ("flip", "is damaged (its checksum does not match)"),
    ("truncate", "is damaged (its checksum does not match)"),
    ("empty", "is not a capsem-core verification record"),
    ("foreign", "is not a capsem-core verification record"),
    ("version", "has version 9, not 1"),
    ("huge count", "claims 18446744073709551615 blocks, more than the ledger's 8"),
    ("count off by one", "is damaged (its length does not hold its 7 blocks)"),
    ("too large", "more than a record of this ledger's 8 blocks can be"),
    ("out of order", "is damaged (its blocks are out of order or out of range)"),
    ("group writable", "may be written by other users"),
    ("directory", "is not a regular file"),
])
def test_a_damaged_or_foreign_record_is_ignored_with_a_one_line_warning(ledger: Path, records: Path, damage: str,
                                                                        words: str) -> None:
    incremental(ledger)
    path = record_file(records)
    count_at = _record.HEADER_BYTES - 8
    if damage == "flip":
        flip(path, _record.HEADER_BYTES + 3)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-5])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "foreign":
        path.write_bytes(b"SQLite format 3\x00" + bytes(200))
    elif damage == "version":
        _rewrite(path, lambda d: struct.pack_into("<I", d, 8, 9))
    elif damage == "huge count":
        _rewrite(path, lambda d: struct.pack_into("<Q", d, count_at, 2**64 - 1))
    elif damage == "count off by one":
        _rewrite(path, lambda d: struct.pack_into("<Q", d, count_at, 7))
    elif damage == "too large":
        path.write_bytes(path.read_bytes() + bytes(_record.ENTRY.itemsize))
    elif damage == "out of order":
        def swap(d: bytearray) -> None:
            a, size = _record.HEADER_BYTES, _record.ENTRY.itemsize
            d[a:a + 2 * size] = d[a + size:a + 2 * size] + d[a:a + size]
        _rewrite(path, swap)
    elif damage == "group writable":
        path.chmod(0o620)
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    report = incremental(ledger)
    cov = report.coverage
    assert report.sound
    assert cov.record in ("ignored", "written", "not written")
    assert cov.warning is not None and "\n" not in cov.warning
    assert words in cov.warning, cov.warning
    assert cov.unchanged.blocks == 0 and cov.verified.blocks == len(blocks(ledger))


def test_another_ledgers_record_is_of_another_file(ledger: Path, tmp_path: Path, records: Path) -> None:
    other = write_ledger(tmp_path / "other")
    incremental(other)
    (theirs,) = records.glob("*.record")
    mine = _record.record_path(ledger.with_suffix(".bodies"))
    theirs.rename(mine)
    report = incremental(ledger)
    assert "is of another file" in report.coverage.warning
    assert report.sound and report.coverage.unchanged.blocks == 0


def test_a_record_that_cannot_be_written_is_said_so_and_the_verdict_stands(ledger: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv(_record.RECORD_DIR_ENV, str(blocker / "verified"))
    report = incremental(ledger)
    assert report.sound and report.coverage.record == "not written"
    assert "not written: the verification record directory is not a directory" in report.coverage.warning


# --- --max-age ------------------------------------------------------------------------------------

def test_max_age_reads_back_blocks_verified_longer_ago(ledger: Path) -> None:
    t0 = 1_800_000_000.0
    incremental(ledger, now=t0)
    young = incremental(ledger, now=t0 + 6 * DAY, max_age=7 * DAY)
    assert young.coverage.unchanged.blocks == len(blocks(ledger))
    old = incremental(ledger, now=t0 + 8 * DAY, max_age=7 * DAY)
    assert old.sound and old.coverage.verified.blocks == len(blocks(ledger))
    # Read back, so verified anew: at t0 + 8d, the clock starts again.
    again = incremental(ledger, now=t0 + 14 * DAY, max_age=7 * DAY)
    assert again.coverage.unchanged.blocks == len(blocks(ledger))


def test_max_age_leaves_the_recently_appended_blocks_proven(ledger: Path) -> None:
    t0 = 1_800_000_000.0
    incremental(ledger, now=t0)
    append(ledger.parent, 2, seed=7000)
    incremental(ledger, now=t0 + 5 * DAY)
    report = incremental(ledger, now=t0 + 8 * DAY, max_age=7 * DAY)
    assert report.coverage.verified.blocks == len(blocks(ledger)) - 2
    assert report.coverage.unchanged.blocks == 2


def test_a_record_from_the_future_is_not_recent(ledger: Path) -> None:
    t0 = 1_800_000_000.0
    incremental(ledger, now=t0)
    report = incremental(ledger, now=t0 - DAY, max_age=7 * DAY)
    assert report.coverage.verified.blocks == len(blocks(ledger))


def _forge_verified_at(path: Path, value: int) -> None:
    """Every entry's verified_at set to ``value``, the record re-sealed (its digest holds)."""
    def mutate(d: bytearray) -> None:
        count = struct.unpack_from("<Q", d, _record.HEADER_BYTES - 8)[0]
        entries = np.frombuffer(bytes(d), dtype=_record.ENTRY, count=count, offset=_record.HEADER_BYTES).copy()
        entries["verified_at"] = value
        d[_record.HEADER_BYTES:_record.HEADER_BYTES + entries.nbytes] = entries.tobytes()
    _rewrite(path, mutate)


@pytest.mark.parametrize("value", [2**62, 2**63 - 1, -1, -2**62, -2**63])
@pytest.mark.parametrize("argv", [[], ["--json"], ["--max-age", "1d"]])
def test_a_record_whose_verification_times_no_clock_gives_is_ignored_in_one_line(
        ledger: Path, records: Path, capsys, value: int, argv: list[str]) -> None:
    """Before, such a time failed the whole check with "Value too large for defined data
    type" naming nothing (it was shown as a date), and -2**63 wrapped ``now - verified_at``
    so --max-age took the block for recent."""
    incremental(ledger)
    path = record_file(records)
    _forge_verified_at(path, value)
    code, out, err = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--incremental", *argv)
    assert code == 0 and "Traceback" not in err, err
    assert f"verification record {path} ignored: it is damaged (a verification time is out of range)" in (
        json.loads(out)["coverage"]["record"]["warning"] if argv == ["--json"] else out)
    _forge_verified_at(path, value)
    report = incremental(ledger, max_age=DAY)
    assert report.sound and report.coverage.unchanged.blocks == 0
    assert report.coverage.verified.blocks == len(blocks(ledger))


@pytest.mark.parametrize("text, seconds", [("7d", 7 * DAY), ("12h", 43200), ("30m", 1800), ("90s", 90),
                                           ("2w", 14 * DAY), ("1d12h", 1.5 * DAY), (" 3D ", 3 * DAY)])
def test_durations_read_as_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "-1d", "1.5d", "7x", "1d 2h", "1e9d"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a whole number of s, m, h, d or w"):
        parse_duration(text)


# --- the API and the command line -----------------------------------------------------------------

def test_ledger_verify_incremental_unpacks_as_before_and_says_what_it_covered(ledger: Path) -> None:
    with Ledger(ledger.parent) as lg:
        verified, faults = lg.verify(incremental=True)
        assert faults == [] and verified > 0
        result = lg.verify(incremental=True, max_age="7d")
        assert result.verified == 0 and result.faults == []
        assert result.coverage is not None and result.coverage.unchanged.blocks == len(blocks(ledger))
        whole = lg.verify()
        assert whole.coverage is None and whole.verified == verified
        with pytest.raises(ValueError, match="max_age needs incremental"):
            lg.verify(max_age=60)


def test_ledger_verify_reports_a_changed_block_as_a_fault_with_no_row(ledger: Path) -> None:
    with Ledger(ledger.parent) as lg:
        lg.verify(incremental=True)
    off, disk = blocks(ledger)[-1]
    flip(ledger.with_suffix(".bodies"), off + disk - 1)
    with Ledger(ledger.parent) as lg:
        verified, faults = lg.verify(incremental=True)
    changed = [f for f in faults if f.kind == "block_changed"]
    assert len(changed) == 1 and changed[0].row_id is None and changed[0].block_offset == off


def test_check_incremental_text_and_json_say_what_was_verified_and_proven(ledger: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--incremental")
    assert code == 0 and "verified fully: " in out and "(written)" in out
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--incremental", "--max-age", "7d",
                           "--json")
    assert code == 0
    cov = json.loads(out)["coverage"]
    n = len(blocks(ledger))
    assert cov["incremental"] is True and cov["max_age_s"] == 7 * DAY
    assert cov["unchanged"]["blocks"] == n and cov["verified"] == {"blocks": 0, "bodies": 0, "bytes": 0}
    assert cov["record"]["status"] == "used" and cov["record"]["path"].endswith(".record")


@pytest.mark.parametrize("argv, words", [
    (["--incremental"], "give --verify-bodies too"),
    (["--verify-bodies", "--max-age", "7d"], "give --incremental too"),
    (["--verify-bodies", "--incremental", "--max-age", "seven days"], "is not a whole number of s, m, h, d or w"),
])
def test_incremental_options_out_of_place_are_usage_errors(ledger: Path, capsys, argv: list[str],
                                                           words: str) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, "--db", str(ledger), *argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and words in err and "Traceback" not in err


# --- interrupts -----------------------------------------------------------------------------------

CHILD = """
import sys
from capsem_core.cli import app
if app.main(sys.argv[1:]) != 0:   # every import done before the first interrupt can come
    sys.exit(1)
print("ready", flush=True)
while True:
    code = app.main(sys.argv[1:])
    if code != 0:
        sys.exit(code)
"""


def test_an_interrupted_incremental_check_leaves_the_old_record_or_a_whole_new_one(tmp_path: Path,
                                                                                  records: Path) -> None:
    """Ctrl-C at random moments of a real process running `check --incremental` again and
    again: the record is always one that loads as trusted (or absent), and no temporary
    file stays."""
    summary = write_sample_ledger(tmp_path / "big", seed=3, mix="large", raw_bytes=24 << 20)
    db = summary.directory / "session.db"
    env = {**os.environ, _record.RECORD_DIR_ENV: str(records)}
    argv = [sys.executable, "-c", CHILD, "check", "--db", str(db), "--verify-bodies", "--incremental", "--json"]
    rng = random.Random(5)
    for round_ in range(6):
        if round_ % 2:
            for path in records.glob("*.record"):
                path.unlink()   # the next run writes a record from nothing
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        while proc.stdout.readline() not in (b"ready\n", b""):
            pass
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and b"interrupted" in err and b"Traceback" not in err, err
        assert not list(records.glob(".*.part-*"))
        for path in records.glob("*.record"):
            with _archive.ArchiveReader(db.with_suffix(".bodies")) as reader:
                rec, why = _record.load(path, lambda n: _record.identity_of(reader, db, n), 10_000)
            assert rec is not None, why
    final = incremental(db)
    assert final.sound


def test_a_stale_temporary_left_by_a_killed_check_is_removed_by_the_next_write(ledger: Path, records: Path) -> None:
    incremental(ledger)
    name = record_file(records).name
    stale, young = records / f".{name}.part-99998", records / f".{name}.part-99999"
    stale.write_bytes(b"partial")
    young.write_bytes(b"partial")
    os.utime(stale, (1, 1))
    append(ledger.parent, 1, seed=9000)
    assert incremental(ledger).coverage.record == "written"
    assert not stale.exists() and young.exists()


def test_a_record_path_that_is_not_a_regular_file_is_left_alone_and_said(ledger: Path, records: Path) -> None:
    """The record is written through the output-path policy: a FIFO (or link) where it
    belongs is not replaced, and the check says the record was not written."""
    incremental(ledger)
    path = record_file(records)
    path.unlink()
    os.mkfifo(path)
    report = incremental(ledger)
    assert report.coverage.record == "not written"
    assert "is a FIFO; refusing to replace it" in (report.coverage.warning or "")
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


@pytest.mark.parametrize("via", ["HOME", "XDG_CACHE_HOME"])
def test_a_home_that_does_not_exist_is_never_created_for_a_record(ledger: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, via: str) -> None:
    """HOME=/nonexistent (a service account, a container): the check runs, verifies every
    block and says the record was not written; nothing is made where the home should be."""
    gone = tmp_path / "gone"
    monkeypatch.delenv(_record.RECORD_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv(via, str(gone if via == "HOME" else gone / "cache"))
    report = incremental(ledger)
    assert report.sound and report.coverage.record == "not written"
    assert f"{gone} is not a directory" in (report.coverage.warning or "")
    assert not gone.exists()
    gone.mkdir()   # once the home is there, its cache is made under it
    assert incremental(ledger).coverage.record == "written"
    assert len(list(gone.rglob("*.record"))) == 1


def test_a_relative_xdg_cache_home_is_ignored_so_records_never_follow_the_current_directory(tmp_path: Path) -> None:
    home_cache = Path.home() / ".cache" / "capsem-core" / "verified"
    assert _record.record_dir({"XDG_CACHE_HOME": "cache"}) == home_cache
    assert _record.record_dir({"XDG_CACHE_HOME": ""}) == home_cache
    assert _record.record_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "capsem-core" / "verified"
    assert _record.record_dir({"XDG_CACHE_HOME": "cache", "CAPSEM_CORE_VERIFIED_DIR": str(tmp_path)}) == tmp_path
