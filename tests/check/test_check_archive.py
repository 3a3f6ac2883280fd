"""capsem-ledger check: the body archive (index against file, trusting neither) and --verify-bodies.

Each test writes a sound ledger with LedgerWriter (test_check.write_ledger: two blocks, the
first cut into several segments) or a sample ledger, damages exactly one thing, and asserts
the finding, its wording and the exit code. Every test runs in both of a plain
--verify-bodies' orders: the archive walked first (where session.db is the larger file, as in
these ledgers) and the bodies read back first (where session.bodies is, forced here): the
findings, their wording and the exit code are the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.check.test_check import run_cli, sql, write_ledger
from tests.columns.ledgers import poke

from capsem_core import check
from capsem_core.check import check_ledger, sql_checks
from capsem_core.check import run as check_run
from capsem_core.format import SEGMENT_HEADER_BYTES
from oracles.archive_reader import parse_segment
from capsem_core.sample import write_sample_ledger
from capsem_core.writer import Body, LedgerWriter


def blocks(db: Path) -> list[tuple[int, int, int]]:
    return [tuple(r) for r in sql(db, "SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset")]


def segments(bodies: Path, block_offset: int, disk_len: int) -> list[tuple[int, int, int]]:
    """(file offset, raw_len, comp_len) of each segment of one recorded extent."""
    data = bodies.read_bytes()
    at, end, raw, out = block_offset + 8, block_offset + disk_len, 0, []
    while at < end:
        header = parse_segment(data[at:at + SEGMENT_HEADER_BYTES], at, raw)
        out.append((at, header.raw_len, header.comp_len))
        raw += header.raw_len
        at += SEGMENT_HEADER_BYTES + header.comp_len
    return out


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x5A]))


@pytest.fixture(autouse=True, params=["walk-first", "bodies-first"])
def order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which file a plain --verify-bodies reads first (``check/run.py``'s ``_bodies_first``)."""
    if request.param == "bodies-first":
        monkeypatch.setattr(check_run, "_bodies_larger", lambda snapshot: True)
    return str(request.param)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return write_ledger(tmp_path / "sess-b")


def bodies_of(db: Path) -> Path:
    return db.with_suffix(".bodies")


def archive_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index("Body archive:")
    return lines[start + 1: lines.index("", start)]


# --- sound ledgers --------------------------------------------------------------------------------

def test_the_test_ledger_has_two_blocks_and_a_multi_segment_first_block(ledger: Path) -> None:
    (b1, _, d1), (b2, _, _) = blocks(ledger)
    assert (b1, b2) == (16, 16 + d1)
    assert len(segments(bodies_of(ledger), b1, d1)) >= 3


@pytest.mark.parametrize("codec", ["deflate", "zstd"])
@pytest.mark.parametrize("verify", [False, True])
def test_a_sound_sample_ledger_passes_with_exit_0(tmp_path: Path, capsys, codec: str, verify: bool) -> None:
    summary = write_sample_ledger(tmp_path / f"sample-{codec}", seed=7, bodies=400, codec=codec)
    db = summary.directory / "session.db"
    code, out, err = run_cli(capsys, "--db", str(db), *(["--verify-bodies"] if verify else []))
    assert code == 0, out + err
    assert err == ""  # not a terminal: no progress bar
    lines = archive_lines(out)
    assert lines[0] == f"  {summary.bodies} bodies indexed in {summary.rows['body_blocks']} blocks"
    assert "  Index and archive agree" in lines
    if verify:
        assert f"  {summary.bodies}/{summary.bodies} bodies read back and match their hashes" in lines
    else:
        assert "  (--verify-bodies reads every body back through its hash)" in lines
    assert out.rstrip().endswith("Ledger sound.")


def test_verify_json_counts_every_body_and_its_bytes(ledger: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--json")
    assert code == 0
    verify = json.loads(out)["checks"]["verify_bodies"]
    total_len = sql(ledger, "SELECT SUM(body_len) FROM event_body_blobs")[0][0]
    assert verify["status"] == "ok"
    assert verify["counts"] == {"bodies": 12, "verified": 12, "body_bytes": total_len}
    archive = json.loads(out)["checks"]["body_archive"]
    assert archive["counts"]["extents_walked"] == 2


def test_progress_is_told_the_totals_then_bytes_and_bodies_then_the_end(ledger: Path) -> None:
    seen: list[tuple] = []

    class Progress:
        def begin(self, total_bytes: int, total_bodies: int) -> None:
            seen.append(("begin", total_bytes, total_bodies))

        def __call__(self, bytes_done: int, bodies_done: int) -> None:
            seen.append(("step", bytes_done, bodies_done))

        def end(self) -> None:
            seen.append(("end",))

    check_ledger(ledger, verify_bodies=True, progress=Progress())
    total = sql(ledger, "SELECT SUM(body_len) FROM event_body_blobs")[0][0]
    assert seen[0] == ("begin", total, 12)
    assert seen[-2] == ("step", total, 12)
    assert seen[-1] == ("end",)


# --- damage the doctor also finds -----------------------------------------------------------------

def test_a_truncated_archive_is_shorter_than_its_last_block(ledger: Path, capsys) -> None:
    archive = bodies_of(ledger)
    end = blocks(ledger)[-1][0] + blocks(ledger)[-1][2]
    with open(archive, "r+b") as f:
        f.truncate(end - 10)
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies")
    assert code == 1
    assert f"  session.bodies is {end - 10} bytes but its last recorded block ends at {end}" in archive_lines(out)
    report = check_ledger(ledger, verify_bodies=True)
    assert report.checks["body_archive"].findings[0].code == "archive_short"
    assert report.checks["verify_bodies"].status == "skipped"


def test_a_missing_archive_with_recorded_blocks_is_damage(ledger: Path, capsys) -> None:
    bodies_of(ledger).unlink()
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    lines = archive_lines(out)
    assert "  session.bodies is missing and 2 blocks are recorded" in lines
    assert not any(line.startswith("  session.bodies:") for line in lines)


def test_a_deleted_body_blocks_row_leaves_its_bodies_dangling(ledger: Path, capsys) -> None:
    second = blocks(ledger)[1][0]
    sql(ledger, "DELETE FROM body_blocks WHERE block_offset = ?", (second,))
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    assert "  1 bodies name a block body_blocks does not record" in archive_lines(out)


def test_a_body_running_past_its_blocks_raw_bytes_is_found(ledger: Path, capsys) -> None:
    first, raw_len, _ = blocks(ledger)[0]
    sql(ledger, "UPDATE event_body_blobs SET body_offset = ? WHERE id = (SELECT MIN(id) FROM event_body_blobs)",
        (raw_len - 1,))
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    assert "  1 bodies run past the end of their block's raw bytes" in archive_lines(out)


def test_a_wrong_file_header_is_not_a_capsem_body_archive(ledger: Path, capsys) -> None:
    archive = bodies_of(ledger)
    with open(archive, "r+b") as f:
        f.write(b"NOTCAPSM")
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies")
    assert code == 1
    [line] = [l for l in archive_lines(out) if "is not a capsem body archive" in l]
    assert line.startswith(f"  {archive} is not a capsem body archive (bad archive header")


# --- damage only this check finds -----------------------------------------------------------------

def test_an_extent_that_ends_inside_a_segment_is_mis_ended(ledger: Path, capsys) -> None:
    second, _, disk_len = blocks(ledger)[1]
    sql(ledger, "UPDATE body_blocks SET disk_len = ? WHERE block_offset = ?", (disk_len - 1, second))
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--json")
    assert code == 1
    [finding] = json.loads(out)["checks"]["body_archive"]["findings"]
    assert finding["code"] == "bad_extent"
    assert finding["location"]["block_offset"] == second
    assert finding["message"].startswith(f"block at offset {second} (extent of {disk_len - 1} bytes): ")


def test_overlapping_blocks_are_found_and_neither_extent_is_trusted(ledger: Path, capsys) -> None:
    (first, _, d1), (second, _, _) = blocks(ledger)
    sql(ledger, "UPDATE body_blocks SET disk_len = ? WHERE block_offset = ?", (d1 + 60, first))
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    lines = archive_lines(out)
    assert f"  block at offset {second} starts inside the block at offset {first}, which ends at {first + d1 + 60}" in lines
    assert any(line.startswith(f"  block at offset {first} (extent of {d1 + 60} bytes): ") for line in lines)


def test_a_block_starting_inside_the_file_header_is_found(ledger: Path) -> None:
    sql(ledger, "UPDATE body_blocks SET block_offset = 8 WHERE block_offset = 16")
    messages = [f.message for f in check_ledger(ledger).checks["body_archive"].findings]
    assert "block at offset 8 starts inside the 16-byte file header" in messages


def test_a_raw_len_the_segments_do_not_hold_is_found(ledger: Path) -> None:
    first, raw_len, _ = blocks(ledger)[0]
    sql(ledger, "UPDATE body_blocks SET raw_len = ? WHERE block_offset = ?", (raw_len + 5, first))
    archive = check_ledger(ledger).checks["body_archive"]
    assert [f.message for f in archive.findings] == [
        f"block at offset {first} records raw_len {raw_len + 5} but its segments hold {raw_len} raw bytes"]


def test_only_the_first_five_problems_print_then_a_count(ledger: Path, capsys) -> None:
    # Seven blocks recorded inside the first one: seven overlap findings, one line for the rest.
    first, _, d1 = blocks(ledger)[0]
    for k in range(1, 8):
        sql(ledger, "INSERT INTO body_blocks VALUES (?, 1, 1, 't')", (first + 8 * k,))
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    lines = archive_lines(out)
    overlap = [line for line in lines if "starts inside the block" in line]
    assert len(overlap) <= 5
    assert lines[-1].startswith("  ... and ") and lines[-1].endswith(" more")


# --- a live writer (the index only grows: bodies are read first, then blocks, then the file) -----

class Flusher:
    """A writer beside the check that commits one more body each time it is called; every
    other call also closes the open block (its clock jumps past the block age), so flushes
    both grow a block and start new ones."""

    def __init__(self, directory: Path) -> None:
        self.now = 1.79e9
        self.writer = LedgerWriter(directory, clock=lambda: self.now)
        self.flushes = 0

    def __call__(self) -> None:
        self.flushes += 1
        self.writer.insert("net_events", {"timestamp": "2025-06-02T09:02:00Z", "domain": "pypi.org",
                                          "decision": "allowed"},
                           [Body("request", b"flushed while checking %d " % self.flushes * 50, "http.request")])
        if self.flushes % 2 == 0:
            self.now += 3601
        self.writer.flush()


@pytest.mark.parametrize("where", ["before the body scan", "between the body and block scans",
                                   "after the block scan", "before verify maps the archive", "everywhere"])
def test_a_writer_flushing_between_the_checks_reads_causes_no_damage(ledger: Path, monkeypatch, where: str) -> None:
    from capsem_core._native import _archive, _index
    from capsem_core.bodies import scan

    flush = Flusher(ledger.parent)
    # check's scans of the index (the spans from the pages, or through the native SQL scan
    # while a -wal holds pages; then the blocks), and its verify step, which runs the kernel
    # on its archive reader's map (refreshed first).
    from_pages, from_sql, scan_blocks = scan.read_index, _index.scan_bodies, scan.scan_blocks
    verify_bodies = _archive.verify_bodies_with
    everywhere = where == "everywhere"

    def around_the_body_scan(real):   # type: ignore[no-untyped-def]
        def bodies(*args, **kw):   # type: ignore[no-untyped-def]
            if everywhere or where == "before the body scan":
                flush()
            out = real(*args, **kw)
            if everywhere or where == "between the body and block scans":
                flush()
            return out
        return bodies

    def blocks_(*args, **kw):   # type: ignore[no-untyped-def]
        out = scan_blocks(*args, **kw)
        if everywhere or where == "after the block scan":
            flush()
        return out

    def verify(*args, **kw):
        if everywhere or where == "before verify maps the archive":
            flush()
        return verify_bodies(*args, **kw)

    monkeypatch.setattr(scan, "read_index", around_the_body_scan(from_pages))
    monkeypatch.setattr(_index, "scan_bodies", around_the_body_scan(from_sql))
    monkeypatch.setattr(scan, "scan_blocks", blocks_)
    monkeypatch.setattr(_archive, "verify_bodies_with", verify)
    try:
        for _ in range(3):
            report = check_ledger(ledger, verify_bodies=True)
            assert report.sound, [f.message for c in report.checks.values() for f in c.findings]
            assert report.checks["verify_bodies"].counts["verified"] == report.checks["body_archive"].counts["bodies"]
    finally:
        monkeypatch.undo()
        flush.writer.close()
    assert flush.flushes >= 3
    assert check_ledger(ledger, verify_bodies=True).checks["verify_bodies"].counts["verified"] == 12 + flush.flushes


def test_the_sql_checks_read_one_snapshot_while_a_writer_commits(ledger: Path, monkeypatch) -> None:
    # A tool call committed after the row counts were taken must not show up in a later check
    # as unanswered (one read transaction for every SQL check).
    count_tables = sql_checks.check_tables

    def count_then_commit(*args):
        out = count_tables(*args)
        with LedgerWriter(ledger.parent) as w:
            w.insert("tool_calls", {"timestamp": "2025-06-02T09:03:00Z", "model_call_id": 1, "provider": "anthropic",
                                    "status": "requested", "call_index": 9, "call_id": "toolu_late",
                                    "tool_name": "bash", "origin": "native", "decision": "allowed",
                                    "duration_ms": 1, "trace_id": "trace-0001"})
        return out

    monkeypatch.setattr(sql_checks, "check_tables", count_then_commit)
    report = check_ledger(ledger)
    lifecycle = report.checks["tool_lifecycle"]
    assert lifecycle.counts["tool_calls"] == report.checks["tables"].counts["tool_calls"] == 3
    assert lifecycle.counts["calls_without_responses"] == 0 and report.checks["tool_usage"].counts["tool_calls"] == 3
    monkeypatch.undo()
    assert check_ledger(ledger).checks["tool_lifecycle"].counts["calls_without_responses"] == 1


# --- hostile values in the index (every value bounded before any sum) ----------------------------

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
MIB16 = 16 << 20




@pytest.mark.parametrize(("body_offset", "body_len"), [
    (I64_MAX, 1), (1, I64_MAX), (I64_MAX, I64_MAX), (I64_MIN, 0), (-1, 10), (0, -1), (5, I64_MIN),
    (MIB16 + 1, 0), (0, MIB16 + 1)])
def test_a_span_outside_any_blocks_raw_bytes_is_found_without_wrapping(ledger: Path, capsys, body_offset: int,
                                                                      body_len: int) -> None:
    poke(ledger, "UPDATE event_body_blobs SET body_offset = ?, body_len = ?, stored_bytes = ? "
                  "WHERE id = (SELECT MIN(id) FROM event_body_blobs)", (body_offset, body_len, body_len))
    report = check_ledger(ledger, verify_bodies=True)
    archive = report.checks["body_archive"]
    assert [(f.code, f.count) for f in archive.findings] == [("span_out_of_range", 1)]
    assert archive.findings[0].message == (
        f"1 bodies record a span no block can hold (body_offset and body_len must each lie in 0..{MIB16}, "
        "a block's most raw bytes)")
    assert not report.sound and report.checks["verify_bodies"].status == "skipped"
    code, out, err = run_cli(capsys, "--db", str(ledger))
    assert (code, err) == (1, "")


def test_a_span_at_the_bounds_still_runs_past_its_blocks_raw_bytes(ledger: Path) -> None:
    poke(ledger, "UPDATE event_body_blobs SET body_offset = ?, body_len = ?, stored_bytes = ? "
                  "WHERE id = (SELECT MIN(id) FROM event_body_blobs)", (MIB16, MIB16, MIB16))
    archive = check_ledger(ledger).checks["body_archive"]
    assert [(f.code, f.count) for f in archive.findings] == [("body_past_raw_len", 1)]


@pytest.mark.parametrize(("column", "value", "message"), [
    ("raw_len", I64_MAX, f"records raw_len {I64_MAX}, outside 0..{MIB16} (a block's most raw bytes)"),
    ("raw_len", -1, f"records raw_len -1, outside 0..{MIB16} (a block's most raw bytes)"),
    ("raw_len", MIB16 + 1, f"records raw_len {MIB16 + 1}, outside 0..{MIB16} (a block's most raw bytes)"),
    ("disk_len", I64_MAX, f"records disk_len {I64_MAX}, outside 0..{check.MAX_EXTENT_BYTES}"),
    ("disk_len", I64_MIN, f"records disk_len {I64_MIN}, outside 0..{check.MAX_EXTENT_BYTES}"),
])
def test_a_block_length_out_of_bounds_is_found_and_takes_no_part_in_sums(ledger: Path, column: str, value: int,
                                                                        message: str) -> None:
    (first, _, d1), (second, _, d2) = blocks(ledger)
    poke(ledger, f"UPDATE body_blocks SET {column} = ? WHERE block_offset = ?", (value, first))
    report = check_ledger(ledger, verify_bodies=True)
    archive = report.checks["body_archive"]
    codes = [f.code for f in archive.findings]
    assert codes[0] == "block_out_of_range" and archive.findings[0].message == f"block at offset {first} {message}"
    # The other block is still checked, and the end is computed from the rows in bounds.
    assert "block_overlap" not in codes and "archive_short" not in codes
    assert archive.counts["blocks_end"] == second + d2 and archive.counts["extents_walked"] == 1
    assert not report.sound and report.checks["verify_bodies"].status == "skipped"


@pytest.mark.parametrize(("offset", "where"), [(I64_MAX, "beyond the end of any archive"),
                                               (-1, "before the start of session.bodies"),
                                               (I64_MIN, "before the start of session.bodies")])
def test_a_block_offset_out_of_bounds_is_found_not_wrapped(ledger: Path, capsys, offset: int, where: str) -> None:
    second = blocks(ledger)[1][0]
    poke(ledger, "UPDATE body_blocks SET block_offset = ? WHERE block_offset = ?", (offset, second))
    poke(ledger, "UPDATE event_body_blobs SET block_offset = ? WHERE block_offset = ?", (offset, second))
    archive = check_ledger(ledger).checks["body_archive"]
    assert [f.message for f in archive.findings] == [
        f"block at offset {offset} starts {where} (block offsets lie in 0..{check.MAX_EXTENT_BYTES})"]
    code, _, err = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--json")
    assert (code, err) == (1, "")


def test_a_block_offset_in_bounds_but_past_the_file_is_a_short_archive(ledger: Path, capsys) -> None:
    second, _, d2 = blocks(ledger)[1]
    far = check.MAX_EXTENT_BYTES - d2
    poke(ledger, "UPDATE body_blocks SET block_offset = ? WHERE block_offset = ?", (far, second))
    poke(ledger, "UPDATE event_body_blobs SET block_offset = ? WHERE block_offset = ?", (far, second))
    size = bodies_of(ledger).stat().st_size
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 1
    assert (f"  session.bodies is {size} bytes but its last recorded block ends at {check.MAX_EXTENT_BYTES}"
            in archive_lines(out))


# --- --verify-bodies ------------------------------------------------------------------------------

def test_a_flipped_payload_byte_is_found_only_by_verify_bodies(ledger: Path, capsys) -> None:
    first, _, d1 = blocks(ledger)[0]
    at, _, comp_len = segments(bodies_of(ledger), first, d1)[0]
    flip(bodies_of(ledger), at + SEGMENT_HEADER_BYTES + comp_len // 2)
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert code == 0  # headers still walk: the structural checks cannot see payload bytes
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies")
    assert code == 1
    lines = archive_lines(out)
    first_body = sql(ledger, "SELECT event_id, source_table, direction FROM event_body_blobs "
                             "ORDER BY block_offset, body_offset LIMIT 1")[0]
    assert lines[2].startswith("  {} {}/{}: ".format(*first_body))
    verified = [line for line in lines if line.endswith("bodies read back and match their hashes")]
    assert len(verified) == 1 and not verified[0].startswith("  12/12")
    report = check_ledger(ledger, verify_bodies=True)
    finding = report.checks["verify_bodies"].findings[0]
    assert finding.location["block_offset"] == first
    assert finding.location["segment_offset"] == at
    assert finding.code in {"segment_hash", "integrity", "inflate"}


def test_a_flipped_segment_hash_fails_that_segments_bodies_with_its_offset(ledger: Path, capsys) -> None:
    first, _, d1 = blocks(ledger)[0]
    segs = segments(bodies_of(ledger), first, d1)
    at = segs[1][0]
    flip(bodies_of(ledger), at + 20)  # the segment's BLAKE3 digest
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--json")
    assert code == 1
    verify = json.loads(out)["checks"]["verify_bodies"]
    assert verify["status"] == "fail"
    kinds = {f["code"] for f in verify["findings"]}
    assert kinds == {"segment_hash"}
    assert at != first  # the second segment of the block: its offset is not the block's
    for f in verify["findings"]:
        assert f["location"]["segment_offset"] == at
        assert f["location"]["block_offset"] == first
        # Each offset under its own name: the block as the block, the segment as the segment.
        assert f"block at offset {first}: segment at offset {at} failed integrity check" in f["message"]
        assert f"block at offset {at}" not in f["message"]
        assert f["message"].startswith(f"{f['location']['event_id']} {f['location']['source_table']}/"
                                       f"{f['location']['direction']}: ")
    assert verify["counts"]["verified"] == 12 - verify["findings_total"]


def test_reading_a_body_past_a_damaged_second_segment_names_the_block_and_the_segment(ledger: Path) -> None:
    from capsem_core.errors import IntegrityError
    from capsem_core.ledger import Ledger

    first, _, d1 = blocks(ledger)[0]
    at = segments(bodies_of(ledger), first, d1)[1][0]
    flip(bodies_of(ledger), at + 20)  # the second segment's BLAKE3 digest
    last = sql(ledger, "SELECT event_id, source_table, direction FROM event_body_blobs WHERE block_offset = ? "
                       "ORDER BY body_offset DESC LIMIT 1", (first,))[0]
    with Ledger(ledger) as reader, pytest.raises(IntegrityError) as info:
        reader.read_body(*last)
    assert f"block at offset {first}: segment at offset {at} failed integrity check" in str(info.value)


def test_a_body_hash_that_does_not_match_its_bytes_is_found(ledger: Path, capsys) -> None:
    sql(ledger, "UPDATE event_body_blobs SET body_hash = 'blake3:' || printf('%064d', 0) "
                "WHERE id = (SELECT MAX(id) FROM event_body_blobs)")
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies")
    assert code == 1
    lines = archive_lines(out)
    assert any("archived body does not match the row that named it: index says blake3:" + "0" * 64 in line
               for line in lines)
    assert "  11/12 bodies read back and match their hashes" in lines


def test_verify_is_skipped_when_the_structure_is_damaged(ledger: Path) -> None:
    second, _, disk_len = blocks(ledger)[1]
    sql(ledger, "UPDATE body_blocks SET disk_len = ? WHERE block_offset = ?", (disk_len + 1, second))
    report = check_ledger(ledger, verify_bodies=True)
    verify = report.checks["verify_bodies"]
    assert verify.status == "skipped"
    assert "disagree" in verify.reason
    assert report.exit_code() == 1


def test_a_requested_but_skipped_verify_says_so_in_the_text_report(ledger: Path, capsys) -> None:
    second, _, disk_len = blocks(ledger)[1]
    sql(ledger, "UPDATE body_blocks SET disk_len = ? WHERE block_offset = ?", (disk_len + 1, second))
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies")
    assert code == 1
    skipped = [line for line in archive_lines(out) if "--verify-bodies" in line]
    assert skipped == ["  --verify-bodies skipped: the body index and archive disagree; "
                       "bodies are not read until they agree"]
    assert "bodies read back" not in out
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--json")
    verify = json.loads(out)["checks"]["verify_bodies"]
    assert verify["status"] == "skipped" and "disagree" in verify["reason"]
    # Not requested: the hint, not a "skipped" line.
    code, out, _ = run_cli(capsys, "--db", str(ledger))
    assert not any("skipped" in line for line in archive_lines(out))


def test_the_progress_bar_draws_bytes_bodies_and_speed_on_a_terminal(tmp_path: Path) -> None:
    import io

    stream = io.StringIO()
    stream.isatty = lambda: True  # type: ignore[method-assign]
    from capsem_core.cli.progress import VerifyProgressBar

    bar = VerifyProgressBar(stream)
    bar.begin(4 << 20, 100)
    bar(2 << 20, 50)
    bar.end()
    bar.end()  # idempotent
    text = stream.getvalue()
    assert "50/100 bodies" in text
    assert "MB" in text


def test_an_archive_that_is_a_symlink_is_a_finding_of_the_report_and_never_read(ledger: Path,
                                                                                tmp_path: Path) -> None:
    archive = bodies_of(ledger)
    elsewhere = tmp_path / "elsewhere.bodies"
    archive.rename(elsewhere)
    archive.symlink_to(elsewhere)
    report = check_ledger(ledger, verify_bodies=True)
    assert [f.message for f in report.checks["body_archive"].findings] == [
        "session.bodies is a symbolic link; a ledger's archive must be a regular file beside session.db"]
    assert not report.sound and report.checks["verify_bodies"].status == "skipped"


def _archive_section(db: Path, walked_blocks=None) -> dict:
    """The body_archive section as the check fills it, from a walk of ``walked_blocks`` (a
    function of the index's blocks) made before, or with no earlier walk."""
    from capsem_core.check.archive import check_body_archive, walk_body_archive
    from capsem_core.check.report import CheckResult
    from capsem_core.snapshot import Snapshot

    with Snapshot.open(db) as snapshot:
        index = snapshot.index()
        walked = walk_body_archive(snapshot, walked_blocks(index.blocks)) if walked_blocks else None
        result = CheckResult("body_archive", "Body archive")
        check_body_archive(snapshot, index, result, walked)
        return result.to_json()


def test_the_archive_walked_before_the_body_rows_reports_in_the_order_of_one_walk_after(ledger: Path) -> None:
    (first, _, _), (second, raw_len, _) = blocks(ledger)[:2]
    poke(ledger, "UPDATE body_blocks SET raw_len = -1 WHERE block_offset = ?", (first,))
    poke(ledger, "UPDATE body_blocks SET raw_len = ? WHERE block_offset = ?", (raw_len + 5, second))
    alone = _archive_section(ledger)
    assert [f["code"] for f in alone["findings"]] == ["block_out_of_range", "body_past_raw_len", "raw_len_mismatch"]
    assert list(alone["counts"]) == ["bodies", "blocks", "blocks_end", "archive_bytes", "extents_walked"]
    assert _archive_section(ledger, lambda b: b) == alone
    assert check_ledger(ledger).checks["body_archive"].to_json() == alone


def test_an_archive_walk_of_other_blocks_is_not_taken_and_the_blocks_are_walked_again(ledger: Path) -> None:
    # As when body_blocks was read on a connection of its own, before a writer's commit.
    alone = _archive_section(ledger)
    assert alone["findings"] == [] and alone["counts"]["extents_walked"] == len(blocks(ledger))
    assert _archive_section(ledger, lambda b: b.take(slice(0, 1))) == alone


def test_past_the_kept_findings_the_walk_before_still_counts_every_one(ledger: Path) -> None:
    from capsem_core.check.report import MAX_FINDINGS_PER_CHECK

    first = blocks(ledger)[0][0]
    extra = MAX_FINDINGS_PER_CHECK + 20
    for k in range(extra):   # blocks recorded inside the first one: an overlap each
        sql(ledger, "INSERT INTO body_blocks VALUES (?, 1, 1, 't')", (first + 1 + k,))
    section = check_ledger(ledger).checks["body_archive"]
    assert len(section.findings) == MAX_FINDINGS_PER_CHECK
    assert section.findings_total >= extra
    assert section.to_json() == _archive_section(ledger)


@pytest.mark.parametrize(("verify", "options", "rules"), [
    (True, None, True), (False, None, False), (True, "incremental", False), (True, "subset", False)])
def test_zlibs_rules_are_walked_ahead_only_where_every_block_is_read_back(ledger: Path, monkeypatch, verify: bool,
                                                                           options: str | None, rules: bool,
                                                                           tmp_path: Path, order: str) -> None:
    """...after the walk: where the bodies were read back first, the kernel walked the rules
    itself, and the walk after it has nothing to do ahead of."""
    from capsem_core.check.incremental import VerifyOptions
    from capsem_core.check.subset import Subset
    from capsem_core.snapshot import Snapshot

    asked: list[bool] = []
    walk_extents = Snapshot.walk_extents

    def recording(self, blocks, *, rules=False):   # type: ignore[no-untyped-def]
        asked.append(rules)
        return walk_extents(self, blocks, rules=rules)

    monkeypatch.setattr(Snapshot, "walk_extents", recording)
    chosen = {None: None, "incremental": VerifyOptions(incremental=True, record_dir=tmp_path),
              "subset": VerifyOptions(subset=Subset.parse("1/2"))}[options]
    report = check_ledger(ledger, verify_bodies=verify, options=chosen)
    assert report.sound and asked == [rules and order == "walk-first"]
