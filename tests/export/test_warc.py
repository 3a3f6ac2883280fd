"""``Ledger.export_warc``: a session as WARC 1.1 that warcio and FastWARC read, in Capsem's own
export's format, every body through the verified read path, every body that cannot be
described honestly skipped by reason and counted in the closing warcinfo."""

from __future__ import annotations

import io
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from capsem_core import __version__
from capsem_core._native import _blake3
from capsem_core.errors import LedgerError
from capsem_core.export import SKIP_REASONS
from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_ledger
from tests.bodies.conftest import write_blocks_ledger
from tests.export.conftest import (
    HOSTILE_SKIPS,
    HOSTILE_WRITTEN,
    MS,
    gzip_members,
    read_fastwarc,
    read_warcio,
    warc_fields,
    write_hostile_ledger,
    write_upstream_ledger,
)

SOFTWARE = f"capsem-core/{__version__}"
_SAMPLES: dict[str, Path] = {}


@pytest.fixture
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A realistic sample ledger (every body table), written once for the module's tests."""
    if "s" not in _SAMPLES:
        base = tmp_path_factory.mktemp("warc-sample") / "sample-session"
        write_sample_ledger(base, seed=11, mix="realistic", bodies=600)
        _SAMPLES["s"] = base
    return _SAMPLES["s"]


def _export(ledger_dir: Path, out: Path, **options: int) -> tuple[object, list]:
    with Ledger(ledger_dir) as ledger:
        summary = ledger.export_warc(out, **options)
    return summary, read_warcio(out)


def _key(record_id: str) -> tuple[str, str, str]:
    m = re.fullmatch(r"<urn:capsem:[^:]+:([a-z_]+):([^:]+):([a-z]+)>", record_id)
    assert m, record_id
    return m.group(2), m.group(1), m.group(3)


def test_warcio_and_fastwarc_read_every_record_and_each_payload_is_the_verified_body(sample: Path,
                                                                                    tmp_path: Path) -> None:
    summary, records = _export(sample, tmp_path / "s.warc.gz")
    with Ledger(sample) as ledger:
        index = ledger.index()
        resources = [r for r in records if r.type == "resource"]
        assert summary.records == len(resources) == len(index) and summary.skipped == 0
        for r in resources:
            assert r.payload == ledger.read_body(*_key(r.header("WARC-Record-ID")))
            assert r.header("WARC-Block-Digest") == "blake3:" + _blake3.hexdigest(r.payload)
            assert int(r.header("Content-Length")) == len(r.payload)
        # In archive order, each body once.
        order = [index.key(i) for i in range(len(index))]
        assert [_key(r.header("WARC-Record-ID")) for r in resources] == order
    fast = read_fastwarc(tmp_path / "s.warc.gz")
    assert [(r.type, r.headers, r.payload) for r in fast] == [(r.type, r.headers, r.payload) for r in records]
    assert summary.bytes == (tmp_path / "s.warc.gz").stat().st_size


def test_record_ids_are_unique(sample: Path, tmp_path: Path) -> None:
    _, records = _export(sample, tmp_path / "s.warc.gz")
    ids = [r.header("WARC-Record-ID") for r in records]
    assert len(ids) == len(set(ids))


def test_every_record_is_one_gzip_member(sample: Path, tmp_path: Path) -> None:
    _, records = _export(sample, tmp_path / "s.warc.gz")
    members = gzip_members((tmp_path / "s.warc.gz").read_bytes())
    assert len(members) == len(records)
    for member, record in zip(members, records):
        assert member.startswith(b"WARC/1.1\r\n") and member.endswith(b"\r\n\r\n")
        assert member.count(b"WARC/1.1\r\nWARC-Type: ") == 1 + record.payload.count(b"WARC/1.1\r\nWARC-Type: ")
        assert member[:-4].endswith(record.payload)


def test_the_first_and_last_records_are_warcinfo_bracketing_the_export(sample: Path, tmp_path: Path) -> None:
    summary, records = _export(sample, tmp_path / "a.warc.gz")
    first, last = records[0], records[-1]
    assert first.type == last.type == "warcinfo"
    assert all(r.type == "resource" for r in records[1:-1])
    uuid = summary.export_id
    assert re.fullmatch(r"[0-9a-f]{32}", uuid)
    assert first.header("WARC-Record-ID") == f"<urn:capsem:sample-session:warcinfo:opening:{uuid}>"
    assert last.header("WARC-Record-ID") == f"<urn:capsem:sample-session:warcinfo:closing:{uuid}>"
    for r in (first, last):
        assert [k for k, _ in r.headers] == ["WARC-Type", "WARC-Record-ID", "WARC-Date", "WARC-Block-Digest",
                                             "Content-Type", "Content-Length"]
        assert r.header("Content-Type") == "application/warc-fields"
        assert r.header("WARC-Date") == summary.exported_at
        assert r.header("WARC-Block-Digest") == "blake3:" + _blake3.hexdigest(r.payload)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", summary.exported_at)
    assert warc_fields(first.payload) == [("software", SOFTWARE), ("format", "WARC File Format 1.1"),
                                          ("capsem-session", "sample-session"),
                                          ("capsem-exported-at", summary.exported_at),
                                          ("capsem-block-digest-algorithm", "blake3")]
    assert warc_fields(last.payload) == [("software", SOFTWARE),
                                         ("capsem-records", str(summary.records)), ("capsem-skipped", "0")]
    # One uuid per export: a second export of the same session never reuses an id.
    again, _ = _export(sample, tmp_path / "b.warc.gz")
    assert again.export_id != uuid


def test_an_upstream_shaped_ledger_matches_the_facts_field_for_field(tmp_path: Path) -> None:
    write_upstream_ledger(tmp_path / "run-7")
    summary, records = _export(tmp_path / "run-7", tmp_path / "u.warc.gz")
    got = {_key(r.header("WARC-Record-ID")): r for r in records if r.type == "resource"}
    s = "urn:capsem:run-7"
    want = {
        ("00000000000a", "net_events", "request"):
            ("https://api.example.com/v1/x", "2026-11-30T12:00:01Z", False, "application/json", b"GET body"),
        ("00000000000a", "net_events", "response"):
            ("https://api.example.com/v1/x", "2026-11-30T12:00:01Z", True, "application/octet-stream",
             b"a prefix of a larger body"),
        ("00000000000b", "model_calls", "request"):
            ("https://api.anthropic.com/v1/messages", "2026-11-30T12:00:02Z", False, "application/json",
             b'{"model": "m"}'),
        ("00000000000c", "tool_calls", "request"):
            ("capsem://tool/bash", "2026-11-30T12:00:03Z", False, "application/json", b'{"cmd": "ls"}'),
        ("00000000000d", "tool_responses", "response"):
            ("capsem://tool-response/toolu_01", "2026-11-30T12:00:04Z", False, "text/plain", b"file1\nfile2\n"),
        ("00000000000e", "exec_events", "stdout"):
            ("capsem://exec/42", "2026-11-30T12:00:01Z", False, "text/plain", b"out\n"),
        ("00000000000e", "exec_events", "stderr"):
            ("capsem://exec/42", "2026-11-30T12:00:01Z", False, "text/plain", b"err\n"),
        ("00000000000f", "security_rule_events", "payload"):
            ("capsem://security/rule-7", "2026-11-30T12:00:05Z", False, "application/json", b'{"rule": 1}'),
        ("00000000000f", "security_decision_events", "payload"):
            ("capsem://security-decision/policy", "2026-11-30T12:00:06Z", False, "application/json",
             b'{"decision": 1}'),
        ("000000000010", "security_ask_events", "payload"):
            ("capsem://security-ask/0000000000a5", "1970-01-01T00:00:00Z", False, "application/json", b'{"ask": 1}'),
    }
    # MS is 2026-11-30T12:00:05.999Z: truncated to the second, never rounded.
    assert MS % 1000 == 999
    assert set(got) == set(want) and summary.records == len(want) and summary.skipped == 0
    for key, (uri, date, truncated, content_type, payload) in want.items():
        headers = [("WARC-Type", "resource"), ("WARC-Record-ID", f"<{s}:{key[1]}:{key[0]}:{key[2]}>"),
                   ("WARC-Target-URI", uri), ("WARC-Date", date),
                   ("WARC-Block-Digest", "blake3:" + _blake3.hexdigest(payload))]
        headers += [("WARC-Truncated", "length")] if truncated else []
        headers += [("Content-Type", content_type), ("Content-Length", str(len(payload)))]
        assert got[key].headers == headers, key
        assert got[key].payload == payload
    # The version line, and the blank line and the two CRLFs around the block, byte for byte.
    member = gzip_members((tmp_path / "u.warc.gz").read_bytes())[1]
    assert member.startswith(b"WARC/1.1\r\nWARC-Type: resource\r\n")
    assert re.search(rb"Content-Length: \d+\r\n\r\n", member) and member.endswith(b"\r\n\r\n")


def test_a_hostile_ledger_loses_only_what_cannot_be_described_each_counted_by_reason(tmp_path: Path) -> None:
    write_hostile_ledger(tmp_path / "hostile")
    summary, records = _export(tmp_path / "hostile", tmp_path / "h.warc.gz")
    written = {_key(r.header("WARC-Record-ID")) for r in records if r.type == "resource"}
    assert written == HOSTILE_WRITTEN
    skipped = {(b.event_id, b.source_table, b.direction): (b.reason, b.field) for b in summary.sample}
    assert skipped == HOSTILE_SKIPS
    counts = {reason: sum(1 for r, _ in HOSTILE_SKIPS.values() if r == reason) for reason in SKIP_REASONS}
    assert summary.skipped_by_reason == counts and summary.skipped == len(HOSTILE_SKIPS)
    closing = warc_fields(records[-1].payload)
    assert closing == [("software", SOFTWARE), ("capsem-records", "2"),
                       ("capsem-skipped", str(len(HOSTILE_SKIPS))),
                       *[(f"capsem-skipped-{r}", str(n)) for r, n in sorted(counts.items()) if n]]
    # Nothing a ledger forged reached a header: every record's header block is as written.
    raw = b"".join(gzip_members((tmp_path / "h.warc.gz").read_bytes()))
    assert b"revisit" not in raw and b"evil" not in raw


def test_a_forged_content_type_is_skipped_by_name_and_counted(tmp_path: Path) -> None:
    write_hostile_ledger(tmp_path / "hostile")
    summary, records = _export(tmp_path / "hostile", tmp_path / "h.warc.gz")
    forged = next(b for b in summary.sample if b.event_id == "0000000000a2")
    assert (forged.reason, forged.field) == ("unrepresentable-header", "content_type")
    assert "WARC-Type: revisit" in forged.detail
    assert ("capsem-skipped-unrepresentable-header", "1") in warc_fields(records[-1].payload)


def test_a_tool_name_with_a_newline_is_skipped_by_name_and_counted(tmp_path: Path) -> None:
    write_hostile_ledger(tmp_path / "hostile")
    summary, records = _export(tmp_path / "hostile", tmp_path / "h.warc.gz")
    tool = next(b for b in summary.sample if b.source_table == "tool_calls")
    assert tool.reason == "unrepresentable-uri" and "capsem://tool/evil\\n" in tool.detail
    assert ("capsem-skipped-unrepresentable-uri", "2") in warc_fields(records[-1].payload)


def test_a_damaged_block_costs_only_its_own_bodies(tmp_path: Path) -> None:
    written = write_blocks_ledger(tmp_path / "blocks", count=24, size=180_000)
    with Ledger(tmp_path / "blocks") as ledger:
        index = ledger.index()
    blocks = sorted(set(index.block_offset.tolist()))
    assert len(blocks) >= 3
    damaged = blocks[1]
    in_damaged = {index.key(i) for i in range(len(index)) if index.block_offset[i] == damaged}
    with open(tmp_path / "blocks" / "session.bodies", "r+b") as f:
        f.seek(damaged + 200)
        byte = f.read(1)
        f.seek(damaged + 200)
        f.write(bytes([byte[0] ^ 0xFF]))
    summary, records = _export(tmp_path / "blocks", tmp_path / "d.warc.gz")
    got = {_key(r.header("WARC-Record-ID")): r.payload for r in records if r.type == "resource"}
    assert set(got) == set(written) - in_damaged
    assert all(got[k] == written[k] for k in got)
    assert summary.skipped == len(in_damaged) == summary.skipped_by_reason["unreadable-body"]
    assert {(b.event_id, b.source_table, b.direction) for b in summary.sample} == in_damaged


def test_a_span_edited_inside_its_block_is_a_corrupt_body_and_outside_it_an_unreadable_one(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "blocks", count=4, size=20_000)
    with sqlite3.connect(tmp_path / "blocks" / "session.db") as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM event_body_blobs ORDER BY id")]
        conn.execute("UPDATE event_body_blobs SET body_offset = body_offset + 1 WHERE id = ?", (ids[0],))
        conn.execute("UPDATE event_body_blobs SET body_offset = 1 << 40 WHERE id = ?", (ids[1],))
    conn.close()
    summary, _ = _export(tmp_path / "blocks", tmp_path / "e.warc.gz")
    assert summary.skipped_by_reason["corrupt-body"] == 1 and summary.skipped_by_reason["unreadable-body"] == 1
    assert summary.records == len(ids) - 2


def test_a_binary_file_destination_is_written_and_left_open(sample: Path) -> None:
    buffer = io.BytesIO()
    with Ledger(sample) as ledger:
        summary = ledger.export_warc(buffer, level=1, threads=1)
    assert not buffer.closed and len(buffer.getvalue()) == summary.bytes
    assert len(gzip_members(buffer.getvalue())) == summary.records + 2


def test_the_records_do_not_depend_on_the_level_the_threads_or_the_batch_size(sample: Path, tmp_path: Path) -> None:
    _, a = _export(sample, tmp_path / "a.warc.gz", level=0, threads=1, max_bytes=50_000)
    _, b = _export(sample, tmp_path / "b.warc.gz", level=9, threads=3)
    assert [(r.headers, r.payload) for r in a[1:-1]] == [(r.headers, r.payload) for r in b[1:-1]]


@pytest.mark.parametrize("options, words", [({"level": 13}, "level"), ({"level": -1}, "level"),
                                            ({"threads": -1}, "threads"), ({"max_bytes": 0}, "max_bytes")])
def test_bad_options_are_a_value_error_and_write_nothing(sample: Path, tmp_path: Path, options: dict[str, int],
                                                          words: str) -> None:
    with Ledger(sample) as ledger, pytest.raises(ValueError, match=words):
        ledger.export_warc(tmp_path / "x.warc.gz", **options)
    assert list(tmp_path.iterdir()) == []


def test_a_ledger_directory_name_no_record_id_can_carry_is_refused_before_anything_is_written(
        sample: Path, tmp_path: Path) -> None:
    odd = tmp_path / "bad\nname"
    shutil.copytree(sample, odd)
    with Ledger(odd) as ledger, pytest.raises(LedgerError, match="record id"):
        ledger.export_warc(tmp_path / "x.warc.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad\nname"]


def test_a_failure_mid_export_leaves_no_file(sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x.warc.gz").write_bytes(b"an older export")
    from capsem_core.export import warc

    def broken(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(warc.sources, "source_rows", broken)
    with Ledger(sample) as ledger, pytest.raises(LedgerError, match="No space left on device") as raised:
        ledger.export_warc(tmp_path / "x.warc.gz")
    assert raised.value.path is not None and Path(raised.value.path).name == "x.warc.gz"   # the output, named
    assert [p.name for p in tmp_path.iterdir()] == ["x.warc.gz"]
    assert (tmp_path / "x.warc.gz").read_bytes() == b"an older export"


def test_key_parts_that_would_make_two_bodies_share_a_record_id_are_skipped(tmp_path: Path) -> None:
    """Record ids join the key's parts with ':' inside '<>': a forged event_id 'evil:x' and
    a forged direction 'x:request' named one id. Parts holding ':', '<', '>', a space or a
    control are skipped by name; a long forged value is quoted cut short."""
    write_blocks_ledger(tmp_path / "forged", count=4, size=2000)
    with sqlite3.connect(tmp_path / "forged" / "session.db") as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        first, second = (r[0] for r in conn.execute(
            "SELECT event_id FROM net_events ORDER BY id LIMIT 2"))
        conn.execute("UPDATE net_events SET event_id = 'evil:x' WHERE event_id = ?", (first,))
        conn.execute("UPDATE event_body_blobs SET event_id = 'evil:x' WHERE event_id = ?", (first,))
        conn.execute("UPDATE event_body_blobs SET direction = 'x\x1b:request', content_type = ? "
                     "WHERE event_id = ? AND direction = 'response'", ("a\x07" * 100_000, second))
    summary, records = _export(tmp_path / "forged", tmp_path / "f.warc.gz")
    skipped = {(b.event_id, b.direction): (b.reason, b.field) for b in summary.sample}
    assert skipped == {("evil:x", "request"): ("unrepresentable-header", "event_id"),
                       ("evil:x", "response"): ("unrepresentable-header", "event_id"),
                       (second, "x\x1b:request"): ("unrepresentable-header", "direction")}
    ids = [r.header("WARC-Record-ID") for r in records]
    assert len(ids) == len(set(ids)) and not any("evil" in i for i in ids)
    assert all(len(b.detail) < 400 for b in summary.sample)


def test_a_ledger_directory_whose_name_would_break_its_record_ids_is_refused(tmp_path: Path) -> None:
    for name in ("a:b", "a b", "x\u2028capsem-records: 999", "t\x1b]0;x\x07"):
        directory = tmp_path / name
        write_blocks_ledger(directory, count=1, size=100)
        with pytest.raises(LedgerError, match="cannot be part of a WARC record id"):
            _export(directory, tmp_path / "n.warc.gz")
        assert not (tmp_path / "n.warc.gz").exists()
