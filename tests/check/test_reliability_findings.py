"""The reliability findings (docs/reliability.md, "Findings"), each kept as the test that
reproduced it, now passing. F6 is a note, not a defect.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import struct

from oracles import archive_reader as oracle
import pytest
from blake3 import blake3
from tests.reliability_helpers import layout, net_row, sql, tree_snapshot, write_tiny

from capsem_core import cli
from capsem_core._native import _index
from capsem_core import errors
from capsem_core import format as fmt
from capsem_core.check import check_ledger
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter


def test_F1_a_text_body_offset_in_the_index_is_a_ledger_error_not_a_type_error(tmp_path):
    write_tiny(tmp_path)
    sql(tmp_path / "session.db", "UPDATE event_body_blobs SET body_offset = 'abc' WHERE id = 1")
    with Ledger(tmp_path) as ledger, pytest.raises(errors.LedgerError):
        ledger.read_body("000000000000", "net_events", "request")


def test_F2_plain_check_reports_a_span_whose_end_overflows_int64(tmp_path):
    write_tiny(tmp_path)
    sql(tmp_path / "session.db",
        "UPDATE event_body_blobs SET body_offset = 9223372036854775807, body_len = 1, stored_bytes = 1 WHERE id = 1")
    report = check_ledger(tmp_path / "session.db")
    assert not report.sound
    assert [f.code for f in report.checks["body_archive"].findings] == ["span_out_of_range"]


def test_F3_check_sees_no_damage_when_a_flush_lands_between_its_index_scans(tmp_path, monkeypatch):
    write_tiny(tmp_path)
    writer = LedgerWriter(tmp_path)
    writer.insert("net_events", net_row("bbbbbbbbbbbb"), bodies=[Body("request", b"first", "http.request")])
    writer.flush()
    flushes = []

    def flush_then(scan):   # a flush lands before each index scan, so one lands between them
        def scan_after_a_flush(db, **kw):
            eid = f"c{len(flushes):011x}"
            writer.insert("net_events", net_row(eid), bodies=[Body("request", eid.encode() * 3, "http.request")])
            writer.flush()
            flushes.append(eid)
            return scan(db, **kw)
        return scan_after_a_flush

    monkeypatch.setattr(_index, "scan_bodies", flush_then(_index.scan_bodies))
    monkeypatch.setattr(_index, "scan_blocks", flush_then(_index.scan_blocks))
    report = check_ledger(tmp_path / "session.db", verify_bodies=True)
    writer.close()
    assert len(flushes) == 3   # before the archive walk's blocks, the index's bodies, its blocks
    assert report.sound, [f.message for c in report.checks.values() for f in c.findings]


def test_F4_verify_bodies_agrees_with_the_reader_on_segments_that_do_not_inflate_to_their_raw_len(tmp_path):
    """Move one raw byte from segment 0 to segment 1 of a closed block (raw_len/raw_start and
    both hashes rewritten): the joined stream still inflates, but segment 0 inflates to more
    than its raw_len, so Ledger.read_body and check --verify-bodies both refuse the block."""
    now = [1.79e9]
    with LedgerWriter(tmp_path, clock=lambda: now[0]) as w:
        for i in range(2):
            w.insert("net_events", net_row(f"{i:012x}"), bodies=[Body("request", b"body %d " % i * 40, "http.request")])
            w.flush()
        now[0] += 3601
        w.flush()
    p = tmp_path / "session.bodies"
    data = bytearray(p.read_bytes())
    s1, s2 = layout(bytes(data))[0].segments[:2]
    raw = oracle.ArchiveOracle(p).read(16, 0, s1.raw_len + s2.raw_len)
    r1 = s1.raw_len - 1
    struct.pack_into("<I", data, s1.at + 12, r1)
    data[s1.at + 20:s1.at + 52] = blake3(raw[:r1]).digest()
    struct.pack_into("<II", data, s2.at + 8, r1, s2.raw_len + 1)
    data[s2.at + 20:s2.at + 52] = blake3(raw[r1:]).digest()
    p.write_bytes(bytes(data))
    with Ledger(tmp_path) as ledger, pytest.raises(errors.IntegrityError):
        ledger.read_body("000000000000", "net_events", "request")
    report = check_ledger(tmp_path / "session.db", verify_bodies=True)
    assert not report.sound
    damage = report.checks["verify_bodies"].findings
    assert len(damage) == 2 and all("the segment inflates to more than" in f.message for f in damage), damage


@pytest.mark.parametrize("link", ["session directory", "session.db"])
def test_F5_check_db_refuses_a_symlinked_session_db_or_directory(tmp_path, link):
    real = tmp_path / "real"
    write_tiny(real)
    linked = tmp_path / "linked"
    if link == "session directory":
        linked.symlink_to(real, target_is_directory=True)
    else:
        linked.mkdir()
        (linked / "session.db").symlink_to(real / "session.db")
        shutil.copyfile(real / "session.bodies", linked / "session.bodies")
    before = tree_snapshot(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", "--db", str(linked / "session.db")])
    named = linked if link == "session directory" else linked / "session.db"
    assert (code, out.getvalue()) == (1, "")
    assert err.getvalue() == f"capsem-ledger check: {named}: refusing a {link} that is a symbolic link\n"
    assert tree_snapshot(tmp_path) == before
