"""The archive's edges no body reaches. The empty FINAL segment a block ends with when its
last flush held no body: no body's span reaches it, so no read back ever inflates it, yet it
is inside the recorded extent. The extent walk holds it to what an empty segment is (a hash of
no bytes, a whole deflate stream yielding nothing), so damage there makes the ledger damaged,
with or without --verify-bodies, while every body still reads. And a ledger with no body and
no session.bodies (a writer stopped while it created them): sound, as Capsem's rules have it,
its verification skipped for the reason that holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.check.test_check_archive import blocks, flip, segments

from capsem_core.check import check_ledger
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter

BODIES = [b"GET /%d HTTP/1.1\r\n\r\n" % n * 20 for n in range(2)]


def flushed_each(directory: Path) -> Path:
    """Two bodies, a flush after each: the block closes with an empty FINAL segment."""
    with LedgerWriter(directory, durable=False) as w:
        for n, body in enumerate(BODIES):
            w.insert("net_events", {"event_id": f"00000000000{n}", "timestamp": f"2026-01-01T00:00:0{n}.000000Z",
                                    "domain": "api.example.com", "decision": "allowed"},
                     [Body("request", body, "http.request")])
            w.flush()
    return directory


def last_segment(ledger: Path) -> tuple[int, int, int]:
    (block_offset, _raw, disk_len), = blocks(ledger / "session.db")
    return segments(ledger / "session.bodies", block_offset, disk_len)[-1]


def test_a_block_ending_in_an_empty_final_segment_is_sound(tmp_path: Path) -> None:
    ledger = flushed_each(tmp_path / "ledger")
    at, raw_len, comp_len = last_segment(ledger)
    assert raw_len == 0 and comp_len > 0     # the case this file is about
    report = check_ledger(ledger / "session.db", verify_bodies=True)
    assert report.sound, [f.message for c in report.checks.values() for f in c.findings]


@pytest.mark.parametrize("where", ["hash", "payload"])
@pytest.mark.parametrize("verify", [False, True])
def test_damage_in_the_empty_final_segment_no_body_reaches_makes_the_ledger_damaged(
        tmp_path: Path, where: str, verify: bool) -> None:
    ledger = flushed_each(tmp_path / "ledger")
    at, _raw, _comp = last_segment(ledger)
    flip(ledger / "session.bodies", at + 20 if where == "hash" else at + 52)
    report = check_ledger(ledger / "session.db", verify_bodies=verify)
    found = [f for f in report.checks["body_archive"].findings if f.code == "bad_empty_segment"]
    assert not report.sound and len(found) == 1
    assert found[0].location == {"block_offset": blocks(ledger / "session.db")[0][0], "segment_offset": at}
    with Ledger(ledger) as opened:   # the bodies themselves are whole, and still read
        assert [opened.read_body(f"00000000000{n}", "net_events", "request") for n in range(2)] == BODIES


def test_a_ledger_with_no_body_and_no_archive_is_sound_and_says_why_nothing_is_read_back(tmp_path: Path) -> None:
    LedgerWriter(tmp_path / "ledger").close()
    (tmp_path / "ledger" / "session.bodies").unlink()
    report = check_ledger(tmp_path / "ledger" / "session.db", verify_bodies=True)
    assert report.sound
    assert report.checks["verify_bodies"].reason == "no body is indexed: there is nothing to read back"
