"""Behaviour of the ledger writer: the archive appender, the flush cycle, dedup, the lock.

Every archive written here is read back with ``oracles/archive_reader.py``, an independent
pure-Python reader, never with the writer's own code.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import stat
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest
from blake3 import blake3

from oracles import archive_reader as oracle
from capsem_core import format as fmt
from capsem_core.errors import (
    BadFileHeader,
    BlockFull,
    BodyTooLarge,
    LedgerError,
    RowRejected,
    SchemaMismatch,
    SymlinkRefused,
    WriterBusy,
    WriterPoisoned,
)
from capsem_core.writer import Body, BodyArchiveWriter, LedgerWriter, ledger_timestamp

MIB = 1 << 20
CODECS = ("deflate", "zstd")
T0 = 1_750_000_000.0


class Clock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def eid(i: int) -> str:
    return f"{i:012x}"


def net_row(i: int, **extra: object) -> dict[str, object]:
    return {"event_id": eid(i), "timestamp": "2025-06-15T15:06:40.000000Z", "domain": "api.example.com",
            "decision": "allowed", "trace_id": f"trace-{i // 10}", "turn_id": f"turn-{i // 100}", **extra}


def query(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def text_bytes(rng: random.Random, n: int) -> bytes:
    words = ["alpha", "beta", "gamma", "delta", "tool_use", "content", "role", "assistant", "{", "}", '"',
             "message", "stream", "token", "0", "1", "42", "error", "ok", ":", ","]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words).encode() + b" "
    return bytes(out[:n])


def json_text(rng: random.Random, n: int) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < n:
        out += json.dumps({"id": i, "role": rng.choice(["user", "assistant", "tool"]),
                           "content": text_bytes(rng, rng.randint(20, 200)).decode(),
                           "tokens": rng.randint(1, 5000)}).encode() + b"\n"
        i += 1
    return bytes(out[:n])


# --- the archive appender (§3.1, §8.2) ---------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_stage_names_the_real_block_offset_and_nothing_reaches_the_file_before_a_flush(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        assert w.stage(b"one") == (16, 0, 3)
        assert w.stage(b"three") == (16, 3, 5)
        assert path.stat().st_size == 16
        written = w.flush_segment()
        assert written.block_offset == 16 and written.raw_len == 8 and not written.closed
        assert written.disk_len == path.stat().st_size - 16
        assert w.end == path.stat().st_size
    assert oracle.ArchiveOracle(path).read(16, 3, 5) == b"three"


@pytest.mark.parametrize("codec", CODECS)
def test_a_flush_with_nothing_staged_writes_nothing(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        assert w.flush_segment() is None
        assert w.close_block() is None
        w.stage(b"x" * 10)
        w.flush_segment()
        size = path.stat().st_size
        assert w.flush_segment() is None
        assert path.stat().st_size == size


@pytest.mark.parametrize("codec", CODECS)
def test_five_flushes_grow_one_block_and_only_the_first_segment_carries_the_block_header(tmp_path, codec):
    path = tmp_path / "session.bodies"
    rng = random.Random(5)
    bodies = [text_bytes(rng, 700 + 100 * i) for i in range(5)]
    refs, disk = [], []
    with BodyArchiveWriter(path, codec=codec) as w:
        for body in bodies:
            refs.append(w.stage(body))
            disk.append(w.flush_segment().disk_len)
    assert {r[0] for r in refs} == {16}
    assert disk == sorted(set(disk))
    data = path.read_bytes()
    assert data.count(b"BLK2") == 1 and data[16:20] == b"BLK2"
    segments = oracle.walk_block(data, 16)
    assert len(segments) == 5 and not any(s.final for s in segments)
    reader = oracle.ArchiveOracle(path)
    assert [reader.read(*r) for r in refs] == bodies
    assert (reader.blocks_started, reader.segments_inflated) == (1, 5)


@pytest.mark.parametrize("codec", CODECS)
def test_close_writes_a_final_segment_and_the_next_body_opens_a_block_at_the_old_end(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        first = w.stage(b"carried by the close")
        closed = w.close_block()
        assert closed.closed and closed.raw_len == len(b"carried by the close")
        assert w.close_block() is None
        w.stage(b"idle")
        flushed = w.flush_segment()
        empty_close = w.close_block()
        assert empty_close.raw_len == flushed.raw_len and empty_close.disk_len > flushed.disk_len
        nxt = w.stage(b"next")
        assert nxt == (16 + closed.disk_len + empty_close.disk_len, 0, 4)
        w.flush_segment()
    data = path.read_bytes()
    first_block = oracle.walk_block(data, 16)
    assert len(first_block) == 1 and first_block[0].final
    idle_block = oracle.walk_block(data, 16 + closed.disk_len)
    assert [s.final for s in idle_block] == [False, True] and idle_block[1].raw_len == 0
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*first) == b"carried by the close"
    assert reader.read(*nxt) == b"next"
    with pytest.raises(oracle.OracleError, match="past the end of block"):
        reader.read(16, 0, len(b"carried by the close") + 1)


def test_wants_close_turns_true_at_exactly_one_mib_of_raw_bytes(tmp_path):
    with BodyArchiveWriter(tmp_path / "session.bodies") as w:
        w.stage(b"\0" * (MIB - 1))
        assert not w.wants_close
        w.stage(b"\0")
        assert w.wants_close
        w.close_block()
        assert not w.wants_close


def test_a_body_over_16_mib_is_too_large_and_one_that_does_not_fit_the_open_block_is_block_full(tmp_path):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path) as w:
        with pytest.raises(BodyTooLarge, match="16777216-byte block ceiling"):
            w.stage(b"\0" * (16 * MIB + 1))
        w.stage(b"a" * (10 * MIB))
        big = b"b" * (7 * MIB)
        with pytest.raises(BlockFull):
            w.stage(big)
        w.close_block()
        ref = w.stage(big)
        w.close_block()
    assert ref[1] == 0
    assert oracle.ArchiveOracle(path).read(*ref) == big


@pytest.mark.parametrize("codec", CODECS)
def test_an_empty_body_reads_back_empty(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        a = w.stage(b"")
        b = w.stage(b"after")
        w.close_block()
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*a) == b"" and reader.read(*b) == b"after"


def test_non_final_deflate_payloads_end_with_the_sync_flush_tail(tmp_path):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path) as w:
        for i in range(4):
            w.stage(os.urandom(300) + b"text" * i)
            w.flush_segment()
        w.close_block()
    data = path.read_bytes()
    for seg in oracle.walk_block(data, 16):
        payload = data[seg.at + 52:seg.end]
        assert payload.endswith(b"\x00\x00\xff\xff") != seg.final
    assert data.endswith(b"\x03\x00")  # the FINAL segment after a sync flush: an empty final block


def test_a_partial_write_poisons_the_writer_and_keeps_what_was_committed(tmp_path, monkeypatch):
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    good = w.stage(b"committed before the failure")
    w.flush_segment()
    end = w.end
    real_write = os.write

    def torn_write(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data[:30]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", torn_write)
    w.stage(os.urandom(5000))
    with pytest.raises(WriterPoisoned, match="failed after 0 bytes"):
        w.flush_segment()
    monkeypatch.setattr(os, "write", real_write)
    assert w.poisoned and w.end == end
    assert path.stat().st_size == end + 30  # the torn prefix really is in the file
    for operation in (lambda: w.stage(b"x"), w.flush_segment, w.close_block):
        with pytest.raises(WriterPoisoned):
            operation()
    w.close()
    assert oracle.ArchiveOracle(path).read(*good) == b"committed before the failure"
    with BodyArchiveWriter(path) as again:
        assert again.end == end + 30
        ref = again.stage(b"after the tear")
        again.close_block()
    reader = oracle.ArchiveOracle(path)
    assert ref[0] == end + 30
    assert reader.read(*ref) == b"after the tear"
    assert reader.read(*good) == b"committed before the failure"


@pytest.mark.parametrize("codec", CODECS)
def test_a_reopened_writer_never_continues_an_old_block_even_after_a_torn_tail(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        old = w.stage(b"open block, never closed")
        w.flush_segment()
    with open(path, "ab") as f:
        f.write(b"SGMT\x00torn")
    size = path.stat().st_size
    with BodyArchiveWriter(path, codec=codec) as w:
        assert w.end == size
        new = w.stage(b"new block")
        w.flush_segment()
    assert new == (size, 0, 9)
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*new) == b"new block" and reader.read(*old) == b"open block, never closed"


def test_open_refuses_a_symlink_and_leaves_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    link = tmp_path / "session.bodies"
    link.symlink_to(target)
    with pytest.raises(SymlinkRefused, match="symlink"):
        BodyArchiveWriter(link)
    assert target.read_bytes() == b"precious"


def test_open_creates_mode_0600_and_narrows_a_widened_archive(tmp_path):
    path = tmp_path / "session.bodies"
    BodyArchiveWriter(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == b"CAPSEMBL\x02\x00\x00\x00\x00\x00\x00\x00"
    os.chmod(path, 0o644)
    BodyArchiveWriter(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("content", [b"CAPSEMBL\x01\x00\x00\x00\x00\x00\x00\x00", b"SQLite format 3\x00", b"CAPS"])
def test_open_refuses_a_v1_archive_or_a_foreign_file_and_changes_nothing(tmp_path, content):
    path = tmp_path / "session.bodies"
    path.write_bytes(content)
    with pytest.raises(BadFileHeader, match="bad archive header"):
        BodyArchiveWriter(path)
    assert path.read_bytes() == content


def test_open_of_a_directory_is_an_error_naming_it(tmp_path):
    (tmp_path / "session.bodies").mkdir()
    with pytest.raises(LedgerError, match="session.bodies"):
        BodyArchiveWriter(tmp_path / "session.bodies")


def test_dropping_staged_bytes_warns_but_a_flushed_open_block_closes_quietly(tmp_path, recwarn):
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    ref = w.stage(b"flushed, block left open")
    w.flush_segment()
    w.close()
    assert not [x for x in recwarn if issubclass(x.category, ResourceWarning)]
    assert oracle.ArchiveOracle(path).read(*ref) == b"flushed, block left open"
    w = BodyArchiveWriter(path)
    w.stage(b"never written")
    with pytest.warns(ResourceWarning, match="13 staged bytes never written"):
        w.close()


# --- torn files (§8.4) -----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_keeps_exactly_the_bodies_whose_segments_are_whole(tmp_path, codec):
    rng = random.Random(84)
    path = tmp_path / "session.bodies"
    refs: list[tuple[tuple[int, int, int], bytes, int]] = []
    with BodyArchiveWriter(path, codec=codec) as w:
        for i in range(4):
            body = text_bytes(rng, 300) if i % 2 == 0 else rng.randbytes(120)
            ref = w.stage(body)
            written = w.close_block() if i == 3 else w.flush_segment()
            refs.append((ref, body, written.block_offset + written.disk_len))
    data = path.read_bytes()
    torn = tmp_path / "torn.bodies"
    for cut in range(16, len(data) + 1):
        torn.write_bytes(data[:cut])
        shared = oracle.ArchiveOracle(torn)  # one reader for every ref, going on after failures
        for ref, body, segment_end in refs:
            for reader in (shared, oracle.ArchiveOracle(torn)):
                if segment_end <= cut:
                    assert reader.read(*ref) == body, (cut, ref)
                else:
                    with pytest.raises(oracle.OracleError):
                        reader.read(*ref)
        with BodyArchiveWriter(torn, codec=codec) as again:
            assert again.end == cut
            ref = again.stage(b"after the cut")
            again.close_block()
        assert ref[0] == cut
        assert oracle.ArchiveOracle(torn).read(*ref) == b"after the cut"


# --- stream properties (§8.6) ----------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_every_cut_at_a_flush_answers_every_reference_handed_out_so_far(tmp_path, codec):
    rng = random.Random(86)
    path = tmp_path / "session.bodies"
    refs: list[tuple[tuple[int, int, int], bytes]] = []
    with BodyArchiveWriter(path, codec=codec) as w:
        for step in range(60):
            kind = rng.random()
            body = (rng.randbytes(rng.randint(0, 20_000)) if kind < 0.45 else b"" if kind < 0.5
                    else text_bytes(rng, rng.randint(1, 8000)))
            refs.append((w.stage(body), body))
            if rng.random() < 0.4:
                (w.close_block if rng.random() < 0.3 else w.flush_segment)()
                cut = tmp_path / "cut.bodies"
                cut.write_bytes(path.read_bytes()[:w.end])
                reader = oracle.ArchiveOracle(cut)
                for ref, expected in refs:
                    # A block that so far holds only empty bodies has not been written yet.
                    if ref[0] + 8 <= w.end:
                        assert reader.read(*ref) == expected
        w.close_block()
    reader = oracle.ArchiveOracle(path)
    for ref, expected in rng.sample(refs, len(refs)):
        assert reader.read(*ref) == expected


@pytest.mark.parametrize("codec", CODECS)
def test_a_10_mib_incompressible_body_round_trips_in_one_segment_followed_by_a_small_one(tmp_path, codec):
    path = tmp_path / "session.bodies"
    big = random.Random(10).randbytes(10 * MIB)
    with BodyArchiveWriter(path, codec=codec) as w:
        a = w.stage(big)
        w.flush_segment()
        b = w.stage(b"small")
        w.close_block()
    assert len(oracle.walk_block(path.read_bytes(), 16)) == 2
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*a) == big and reader.read(*b) == b"small"


@pytest.mark.parametrize("codec", CODECS)
def test_the_dictionary_survives_a_sync_flush(tmp_path, codec):
    path = tmp_path / "session.bodies"
    chunk = random.Random(8).randbytes(8 * 1024)
    with BodyArchiveWriter(path, codec=codec) as w:
        w.stage(chunk)
        first = w.flush_segment()
        ref = w.stage(chunk)
        second = w.flush_segment()
    assert second.disk_len - first.disk_len - 52 < 200
    assert oracle.ArchiveOracle(path).read(*ref) == chunk


def test_twelve_flushes_of_json_text_stay_within_3_percent_of_one_shot_level_6(tmp_path):
    text = json_text(random.Random(12), MIB)
    path = tmp_path / "session.bodies"
    step = len(text) // 12
    with BodyArchiveWriter(path) as w:
        for i in range(12):
            w.stage(text[i * step:(i + 1) * step if i < 11 else len(text)])
            w.flush_segment()
        w.close_block()
    one_shot = zlib.compressobj(6, zlib.DEFLATED, -15)
    baseline = len(one_shot.compress(text) + one_shot.flush())
    payload = sum(s.comp_len for s in oracle.walk_block(path.read_bytes(), 16))
    assert payload <= baseline * 1.03


# --- the ledger writer --------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_rows_and_bodies_round_trip_through_the_index(tmp_path, codec):
    rng = random.Random(1)
    clock = Clock()
    bodies = {
        "random": rng.randbytes(5000),
        "text": text_bytes(rng, 9000),
        "one_mib": rng.randbytes(MIB),
    }
    with LedgerWriter(tmp_path, codec=codec, clock=clock) as w:
        for i, (name, data) in enumerate(bodies.items()):
            w.insert("net_events", net_row(i), [Body("request", data, "http.request", "application/octet-stream"),
                                                Body("response", name.encode(), "http.request")])
            clock.now += 1.5
        w.insert("net_events", net_row(9), [Body("request", b"", "http.request")])
    db = tmp_path / "session.db"
    got = {(b.event_id, b.direction): b.data for b in oracle.archived_bodies(db)}
    for i, (name, data) in enumerate(bodies.items()):
        assert got[(eid(i), "request")] == data
        assert got[(eid(i), "response")] == name.encode()
    assert (eid(9), "request") not in got  # empty bodies are not archived
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(4,)]
    row = query(db, "SELECT event_type, content_type, original_bytes, stored_bytes, truncated, body_hash, trace_id, "
                    "turn_id, created_at FROM event_body_blobs WHERE event_id = ? AND direction = 'request'",
                (eid(1),))[0]
    assert row == ("http.request", "application/octet-stream", 9000, 9000, 0,
                   "blake3:" + blake3(bodies["text"]).hexdigest(), "trace-0", "turn-0", "2025-06-15T15:06:41.500000Z")
    oracle.check_index_extents(db)


@pytest.mark.parametrize("codec", CODECS)
def test_a_body_over_10_mib_is_cut_and_marked_truncated(tmp_path, codec):
    big = random.Random(3).randbytes(10 * MIB + 123)
    with LedgerWriter(tmp_path, codec=codec) as w:
        w.insert("net_events", net_row(1), [Body("response", big, "http.request", original_bytes=5)])
        w.insert("net_events", net_row(2), [Body("response", b"short", "http.request", original_bytes=900)])
        w.insert("net_events", net_row(3), [Body("response", b"exact", "http.request", original_bytes=2)])
    db = tmp_path / "session.db"
    rows = query(db, "SELECT event_id, original_bytes, stored_bytes, truncated, body_len FROM event_body_blobs "
                     "ORDER BY event_id")
    assert rows == [(eid(1), 10 * MIB + 123, 10 * MIB, 1, 10 * MIB), (eid(2), 900, 5, 1, 5), (eid(3), 5, 5, 0, 5)]
    assert oracle.read_body(db, eid(1), "net_events", "response") == big[:10 * MIB]


def test_a_row_without_an_event_id_gets_twelve_lowercase_hex(tmp_path):
    with LedgerWriter(tmp_path) as w:
        row = net_row(0)
        del row["event_id"]
        w.insert("net_events", row, [Body("request", b"body of a row that named no event", "http.request")])
    db = tmp_path / "session.db"
    (event_id,), = query(db, "SELECT event_id FROM net_events")
    assert len(event_id) == 12 and set(event_id) <= set("0123456789abcdef")
    assert query(db, "SELECT event_id FROM event_body_blobs") == [(event_id,)]


def test_a_fresh_ledger_has_the_schema_and_the_writer_connection_enforces_foreign_keys(tmp_path):
    with LedgerWriter(tmp_path / "new" / "dir") as w:
        assert w.db_path == tmp_path / "new" / "dir" / "session.db"
        assert w.bodies_path == tmp_path / "new" / "dir" / "session.bodies"
        assert w._conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert w._conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert w._conn.execute("PRAGMA synchronous").fetchone() == (1,)
    assert query(w.db_path, "SELECT id, version FROM transport_schema") == [(1, 1)]
    assert w.bodies_path.read_bytes() == fmt.pack_file_header()


def test_close_checkpoints_the_wal_releases_the_lock_then_calls_on_close(tmp_path):
    seen = []

    def on_close(writer: LedgerWriter) -> None:
        # The lock is free: another writer can open at once.
        with LedgerWriter(writer.directory, lock_timeout=0):
            pass
        seen.append(writer.closed)

    w = LedgerWriter(tmp_path, on_close=on_close)
    w.insert("net_events", net_row(1), [Body("request", b"x" * 100, "http.request")])
    w.close()
    w.close()  # idempotent: on_close runs once
    assert seen == [True]
    wal = tmp_path / "session.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    with pytest.raises(LedgerError, match="closed"):
        w.insert("net_events", net_row(2))


def test_timestamps_are_rfc3339_utc_to_the_microsecond():
    assert ledger_timestamp(0) == "1970-01-01T00:00:00.000000Z"
    assert ledger_timestamp(1_750_000_000.123456) == "2025-06-15T15:06:40.123456Z"
    assert ledger_timestamp(1_750_000_000.9999996) == "2025-06-15T15:06:41.000000Z"


# --- blocks and the body index (§3.2.5-3.2.7, §8.8) ------------------------------------------------

def test_an_open_block_is_readable_after_each_flush_and_its_extent_tracks_the_file(tmp_path):
    db = tmp_path / "session.db"
    rng = random.Random(7)
    with LedgerWriter(tmp_path) as w:
        last = (0, 0)
        for i in range(6):
            data = text_bytes(rng, 3000)
            w.insert("net_events", net_row(i), [Body("request", data, "http.request")])
            w.flush()
            blocks = query(db, "SELECT block_offset, raw_len, disk_len FROM body_blocks")
            assert len(blocks) == 1
            block_offset, raw_len, disk_len = blocks[0]
            assert block_offset + disk_len == w.bodies_path.stat().st_size
            assert (raw_len, disk_len) > last
            last = (raw_len, disk_len)
            assert oracle.read_body(db, eid(i), "net_events", "request") == data


def test_two_bodies_over_half_a_block_fill_it_and_the_third_opens_the_next(tmp_path):
    db = tmp_path / "session.db"
    size = fmt.TARGET_BLOCK_BYTES // 2 + 1
    with LedgerWriter(tmp_path) as w:
        for i in range(3):
            w.insert("net_events", net_row(i), [Body("response", bytes([i]) * size, "http.request")])
    blocks = query(db, "SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset")
    assert [b[1] for b in blocks] == [2 * size, size]
    assert blocks[1][0] == blocks[0][0] + blocks[0][2]
    assert blocks[1][0] + blocks[1][2] == (tmp_path / "session.bodies").stat().st_size
    data = (tmp_path / "session.bodies").read_bytes()
    assert oracle.walk_block(data, blocks[1][0])[-1].final
    with pytest.raises(oracle.OracleError, match="past the end of block"):
        oracle.ArchiveOracle(tmp_path / "session.bodies").read(blocks[1][0], size, 1)


def test_two_10_mib_bodies_land_in_two_blocks(tmp_path):
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", b"a" * (10 * MIB), "http.request"),
                                            Body("response", b"b" * (10 * MIB), "http.request")])
    db = tmp_path / "session.db"
    assert len(query(db, "SELECT * FROM body_blocks")) == 2
    assert oracle.read_body(db, eid(1), "net_events", "response") == b"b" * (10 * MIB)


def test_a_block_closes_after_an_hour_by_the_ledger_clock(tmp_path):
    clock = Clock()
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path, clock=clock) as w:
        w.insert("net_events", net_row(1), [Body("request", b"first hour", "http.request")])
        w.flush()
        clock.now += 3599
        w.insert("net_events", net_row(2), [Body("request", b"same block", "http.request")])
        clock.now += 1
        w.insert("net_events", net_row(3), [Body("request", b"next block", "http.request")])
        w.flush()
        clock.now -= 10_000  # a clock that went backwards never makes a block stale
        w.insert("net_events", net_row(4), [Body("request", b"still the next block", "http.request")])
    offsets = [r[0] for r in query(db, "SELECT block_offset FROM event_body_blobs ORDER BY event_id")]
    assert offsets[0] == offsets[1] != offsets[2] == offsets[3]


def test_an_empty_final_segment_does_not_refresh_sealed_at(tmp_path):
    clock = Clock()
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path, clock=clock)
    w.insert("net_events", net_row(1), [Body("request", b"sealed once", "http.request")])
    w.flush()
    (sealed, disk), = query(db, "SELECT sealed_at, disk_len FROM body_blocks")
    clock.now += 500
    w.close()
    (sealed_after, disk_after), = query(db, "SELECT sealed_at, disk_len FROM body_blocks")
    assert sealed_after == sealed == ledger_timestamp(T0) and disk_after > disk


def test_close_every_flush_closes_each_block(tmp_path):
    with LedgerWriter(tmp_path, close_every_flush=True) as w:
        for i in range(3):
            w.insert("net_events", net_row(i), [Body("request", b"block %d" % i, "http.request")])
            w.flush()
    assert len(query(tmp_path / "session.db", "SELECT * FROM body_blocks")) == 3


def _flush_one_body(directory: Path, steps: list[str]) -> None:
    """One body written and flushed, "commit" added to steps when the index commits."""
    w = LedgerWriter(directory)
    w._conn.set_trace_callback(lambda sql: steps.append("commit") if sql == "COMMIT" else None)
    w.insert("net_events", net_row(1), [Body("request", b"ordered", "http.request")])
    w.flush()
    w.close()


def test_the_archive_is_synced_before_the_index_commits(tmp_path, monkeypatch):
    steps: list[str] = []
    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (steps.append("sync"), real_fdatasync(fd))[1])
    _flush_one_body(tmp_path, steps)
    assert steps[:2] == ["sync", "commit"]


def test_where_the_system_has_no_fdatasync_the_archive_is_still_synced_before_the_index_commits(tmp_path, monkeypatch):
    # macOS has no os.fdatasync: the writer takes F_FULLFSYNC there, plain fsync elsewhere.
    import fcntl

    steps: list[str] = []
    monkeypatch.delattr(os, "fdatasync")
    if hasattr(fcntl, "F_FULLFSYNC"):
        real_fcntl = fcntl.fcntl
        monkeypatch.setattr(fcntl, "fcntl", lambda fd, op, *a: (
            steps.append("sync") if op == fcntl.F_FULLFSYNC else None, real_fcntl(fd, op, *a))[1])
    else:
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (steps.append("sync"), real_fsync(fd))[1])
    _flush_one_body(tmp_path, steps)
    assert steps[:2] == ["sync", "commit"]
    assert len(query(tmp_path / "session.db", "SELECT * FROM body_blocks")) == 1


class _FailingCommit:
    """A connection whose next COMMIT fails as a full disk would (then behaves)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.fail = 1

    def execute(self, sql: str, *args):
        if sql == "COMMIT" and self.fail:
            self.fail -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_failed_flush_keeps_its_rows_and_the_retry_records_the_grown_extent_once(tmp_path):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path)
    w.insert("net_events", net_row(1), [Body("request", b"first body " * 20, "http.request")])
    real = w._conn
    w._conn = _FailingCommit(real)
    with pytest.raises(LedgerError, match="retried by the next flush"):
        w.flush()
    assert query(db, "SELECT COUNT(*) FROM event_body_blobs") == [(0,)]
    w._conn = real
    w.insert("net_events", net_row(2), [Body("request", b"second body " * 20, "http.request")])
    w.flush()
    blocks = query(db, "SELECT block_offset, disk_len FROM body_blocks")
    assert len(blocks) == 1 and sum(blocks[0]) == w.bodies_path.stat().st_size
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(2,)]
    assert oracle.read_body(db, eid(1), "net_events", "request") == b"first body " * 20
    assert oracle.read_body(db, eid(2), "net_events", "request") == b"second body " * 20
    w.close()


def test_rows_the_schema_refuses_are_dropped_and_the_rest_commit(tmp_path):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path)
    w.insert("net_events", net_row(1), [Body("request", b"kept", "http.request")])
    w.insert("net_events", {**net_row(2), "headers_truncated": 7})
    w.insert("net_events", net_row(3))
    with pytest.raises(RowRejected, match="refused 1 rows.*CHECK constraint failed"):
        w.flush()
    assert [r[0] for r in query(db, "SELECT event_id FROM net_events ORDER BY id")] == [eid(1), eid(3)]
    assert w.rows_rejected == 1 and w.buffered_rows == 0
    w.close()
    assert oracle.read_body(db, eid(1), "net_events", "request") == b"kept"


@pytest.mark.parametrize("table, row, body, message", [
    ("no_such_table", {}, None, "not a session.db table"),
    ("body_blocks", {"block_offset": 16}, None, "not a session.db table this writer fills"),
    ("net_events", {"nonsense": 1}, None, "no column 'nonsense'"),
    ("fs_events", {"event_id": "0" * 12}, Body("request", b"x", "file.event"), "carry no archived bodies"),
    ("net_events", {"event_id": "ABCDEF012345"}, Body("request", b"x", "http.request"), "12 lowercase hex"),
    ("net_events", {"event_id": "0" * 12}, Body("sideways", b"x", "http.request"), "direction"),
    ("net_events", {"event_id": "0" * 12}, Body("request", b"x", "network.connect"), "event_type"),
    ("net_events", {"event_id": "0" * 12}, Body("request", "text", "http.request"), "must be bytes"),
])
def test_a_row_the_ledger_cannot_hold_is_refused_at_insert(tmp_path, table, row, body, message):
    with LedgerWriter(tmp_path) as w:
        with pytest.raises(ValueError, match=message):
            w.insert(table, row, [body] if body else ())
        assert w.buffered_rows == 0


def test_any_table_takes_rows_and_an_empty_body_iterable(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        w.insert("fs_events", {"timestamp": "t", "action": "write", "path": "/a", "directory": "/", "name": "a"},
                 iter(()))
        w.insert("transport_events", {"event_id": eid(5), "timestamp_unix_ms": 1, "event_type": "network.connect",
                                      "event_json": "{}"})
    assert query(db, "SELECT path FROM fs_events") == [("/a",)]
    assert query(db, "SELECT event_id FROM transport_events") == [(eid(5),)]


def test_buffered_work_flushes_by_itself(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path, flush_rows=10) as w:
        for i in range(12):
            w.insert("net_events", net_row(i))
        w.wait()
        assert query(db, "SELECT COUNT(*) FROM net_events") == [(10,)]
        # Bodies count too: 2 rows left over + 4 rows with one body each reach 10.
        for i in range(12, 15):
            w.insert("net_events", net_row(i), [Body("request", b"r%d" % i, "http.request")])
        w.wait()
        assert query(db, "SELECT COUNT(*) FROM net_events") == [(10,)]
        w.insert("net_events", net_row(15), [Body("request", b"r15", "http.request")])
        w.wait()
        assert not w.committing
        assert query(db, "SELECT COUNT(*) FROM net_events") == [(16,)]
        assert query(db, "SELECT COUNT(*) FROM event_body_blobs") == [(4,)]
        assert oracle.read_body(db, eid(15), "net_events", "request") == b"r15"


def _write_with_background_flushes(directory: Path, codec: str) -> None:
    rng = random.Random(99)
    shared = [rng.randbytes(rng.choice([600, 3000])) for _ in range(20)]
    with LedgerWriter(directory, codec=codec, clock=Clock(), flush_rows=25) as w:
        for i in range(400):
            w.insert("net_events", net_row(i), [Body("request", rng.choice(shared), "http.request"),
                                                Body("response", text_bytes(rng, rng.randint(10, 4000)),
                                                     "http.request")])


@pytest.mark.parametrize("codec", CODECS)
def test_background_flushes_give_the_same_ledger_every_time(tmp_path, codec):
    _write_with_background_flushes(tmp_path / "a", codec)
    _write_with_background_flushes(tmp_path / "b", codec)
    assert (tmp_path / "a" / "session.bodies").read_bytes() == (tmp_path / "b" / "session.bodies").read_bytes()
    rows = "SELECT event_id, direction, block_offset, body_offset, body_len, created_at FROM event_body_blobs ORDER BY id"
    assert query(tmp_path / "a" / "session.db", rows) == query(tmp_path / "b" / "session.db", rows)
    bodies = oracle.archived_bodies(tmp_path / "a" / "session.db")
    assert len(bodies) == 800
    spans = query(tmp_path / "a" / "session.db", "SELECT COUNT(DISTINCT block_offset || ':' || body_offset) "
                                                 "FROM event_body_blobs WHERE direction = 'request'")[0][0]
    assert spans < 100  # 20 shared request bodies, reused within and across blocks
    oracle.check_index_extents(tmp_path / "a" / "session.db")


def test_a_failed_background_flush_surfaces_and_its_rows_are_retried(tmp_path):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path, flush_rows=4)
    real = w._conn
    w._conn = _FailingCommit(real)
    w.insert("net_events", net_row(1), [Body("request", b"one " * 100, "http.request")])
    w.insert("net_events", net_row(2), [Body("request", b"two " * 100, "http.request")])  # starts a flush
    with pytest.raises(LedgerError, match="retried by the next flush"):
        w.wait()
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(0,)]
    w.insert("net_events", net_row(3), [Body("request", b"three " * 100, "http.request")])
    w.close()
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(3,)]
    assert [b.data for b in oracle.archived_bodies(db)] == [b"one " * 100, b"two " * 100, b"three " * 100]
    (block_offset, disk_len), = query(db, "SELECT block_offset, disk_len FROM body_blocks")
    assert block_offset + disk_len == (tmp_path / "session.bodies").stat().st_size


def test_a_later_body_with_the_same_key_replaces_the_earlier_row(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("response", b"partial", "http.request")])
        w.flush()
        w.insert("exec_events", {"event_id": eid(1), "timestamp": "t", "exec_id": 1, "command": "ls"},
                 [Body("stdout", b"listing", "process.exec")])
        w.insert("net_events", net_row(1), [Body("response", b"complete", "http.request")])
    assert oracle.read_body(db, eid(1), "net_events", "response") == b"complete"
    assert oracle.read_body(db, eid(1), "exec_events", "stdout") == b"listing"
    assert query(db, "SELECT COUNT(*) FROM event_body_blobs") == [(2,)]


# --- dedup (§3.2.4, §8.8) --------------------------------------------------------------------------

def security_rows(i: int) -> list[tuple[str, dict[str, object]]]:
    base = {"event_id": eid(i), "event_type": "http.request", "timestamp_unix_ms": 1_750_000_000_000 + i}
    return [
        ("security_rule_events", {**base, "rule_id": "r1", "rule_action": "block", "rule_json": "{}"}),
        ("security_decision_events", {**base, "stage": "rule", "actor": "policy", "previous_decision": "allow",
                                      "requested_decision": "block", "effective_decision": "block"}),
    ]


def test_a_rule_payload_and_its_decision_share_one_span_and_the_archive_grows_by_one_copy(tmp_path):
    payload = json.dumps({"event": "http.request", "url": "https://example.com/" + "x" * 3000}).encode()
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        for table, row in security_rows(1):
            w.insert(table, row, [Body("payload", payload, "security.rule")])
        assert (w.bodies_stored, w.bodies_deduplicated, w.bodies_deduplicated_in_block) == (1, 1, 1)
    spans = query(db, "SELECT DISTINCT block_offset, body_offset, body_len FROM event_body_blobs")
    assert len(spans) == 1
    assert sum(s.raw_len for s in oracle.walk_block((tmp_path / "session.bodies").read_bytes(), 16)) == len(payload)
    for table, _ in security_rows(1):
        assert oracle.read_body(db, eid(1), table, "payload") == payload


def test_three_matches_of_one_event_store_its_payload_once(tmp_path):
    payload = b'{"matched": "three rules"}'
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        for rule in ("a", "b", "c"):
            w.insert("security_rule_events", {**security_rows(2)[0][1], "rule_id": rule},
                     [Body("payload", payload, "security.rule")])
    assert query(db, "SELECT COUNT(*) FROM security_rule_events") == [(3,)]
    assert query(db, "SELECT COUNT(*), SUM(body_len) FROM event_body_blobs") == [(1, len(payload))]
    assert query(db, "SELECT raw_len FROM body_blocks") == [(len(payload),)]


def test_a_committed_body_of_512_bytes_or_more_is_reused_from_an_earlier_block(tmp_path):
    db = tmp_path / "session.db"
    big, small = b"B" * 512, b"s" * 511
    with LedgerWriter(tmp_path, close_every_flush=True) as w:
        w.insert("net_events", net_row(1), [Body("request", big, "http.request"),
                                            Body("response", small, "http.request")])
        w.flush()
        w.insert("net_events", net_row(2), [Body("request", big, "http.request"),
                                            Body("response", small, "http.request")])
        assert (w.bodies_deduplicated_in_archive, w.bodies_stored) == (1, 3)
    spans = dict(((e, d), (b, o)) for e, d, b, o in
                 query(db, "SELECT event_id, direction, block_offset, body_offset FROM event_body_blobs"))
    assert spans[(eid(1), "request")] == spans[(eid(2), "request")]
    assert spans[(eid(1), "response")][0] != spans[(eid(2), "response")][0]
    for i in (1, 2):
        assert oracle.read_body(db, eid(i), "net_events", "request") == big
        assert oracle.read_body(db, eid(i), "net_events", "response") == small


def test_a_reopened_writer_reuses_bodies_committed_by_the_previous_one(tmp_path):
    body = random.Random(4).randbytes(4096)
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", body, "http.request")])
    size = (tmp_path / "session.bodies").stat().st_size
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(2), [Body("request", body, "http.request")])
        assert w.bodies_deduplicated_in_archive == 1
    assert (tmp_path / "session.bodies").stat().st_size == size
    assert oracle.read_body(tmp_path / "session.db", eid(2), "net_events", "request") == body


def test_equal_length_different_bytes_are_two_bodies(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", b"a" * 600, "http.request")])
        w.flush()
        w.insert("net_events", net_row(2), [Body("request", b"b" * 600, "http.request"),
                                            Body("response", b"a" * 599 + b"b", "http.request")])
    assert len(query(db, "SELECT DISTINCT body_offset FROM event_body_blobs")) == 3
    assert oracle.read_body(db, eid(2), "net_events", "response") == b"a" * 599 + b"b"


# --- the ledger as a pair: lock, symlinks, schema, extents ------------------------------------------

def test_a_second_writer_on_the_same_ledger_is_refused(tmp_path):
    with LedgerWriter(tmp_path):
        with pytest.raises(WriterBusy, match="exactly one writer"):
            LedgerWriter(tmp_path, lock_timeout=0.1)
    LedgerWriter(tmp_path, lock_timeout=0).close()


def test_a_writer_in_another_process_holds_the_ledger(tmp_path):
    src = Path(__file__).resolve().parents[2] / "src"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(src)!r})
            from capsem_core.writer import LedgerWriter
            with LedgerWriter({str(tmp_path)!r}):
                print("held", flush=True)
                sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(WriterBusy, match=str(tmp_path)):
            LedgerWriter(tmp_path, lock_timeout=0.1)
    finally:
        child.communicate("done\n", timeout=30)
    LedgerWriter(tmp_path, lock_timeout=0).close()


@pytest.mark.parametrize("name", ["session.db", "session.bodies"])
def test_a_symlinked_ledger_file_is_refused_and_its_target_untouched(tmp_path, name):
    target = tmp_path / "target"
    target.write_bytes(b"not yours")
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (ledger / name).symlink_to(target)
    with pytest.raises(SymlinkRefused, match=name):
        LedgerWriter(ledger)
    assert target.read_bytes() == b"not yours"


def test_a_ledger_from_an_older_build_is_refused_by_name(tmp_path):
    with LedgerWriter(tmp_path):
        pass
    conn = sqlite3.connect(tmp_path / "session.db")
    conn.executescript("DROP TABLE transport_events; DROP TABLE transport_schema;")
    conn.close()
    before = (tmp_path / "session.db").read_bytes()
    with pytest.raises(SchemaMismatch, match=r"session\.db.*predates the transport ledger"):
        LedgerWriter(tmp_path)
    assert (tmp_path / "session.db").read_bytes() == before


def test_an_index_naming_bytes_past_the_archive_stores_no_bodies_and_leaves_the_file_alone(tmp_path):
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", os.urandom(2000), "http.request")])
    archive = tmp_path / "session.bodies"
    archive.write_bytes(archive.read_bytes()[:100])
    with pytest.warns(RuntimeWarning, match="past the end of the archive"):
        w = LedgerWriter(tmp_path)
    with w:
        assert w.archive is None and "stores no bodies" in w.archive_out_of_service
        w.insert("net_events", net_row(2), [Body("request", b"dropped", "http.request")])
        assert w.bodies_dropped == 1
    assert archive.stat().st_size == 100
    assert query(tmp_path / "session.db", "SELECT COUNT(*) FROM net_events") == [(2,)]
    assert query(tmp_path / "session.db", "SELECT COUNT(*) FROM event_body_blobs") == [(1,)]


def test_a_v1_archive_beside_a_ledger_is_left_alone_and_no_bodies_are_stored(tmp_path):
    archive = tmp_path / "session.bodies"
    v1 = b"CAPSEMBL\x01\x00\x00\x00\x00\x00\x00\x00BLK1"
    archive.write_bytes(v1)
    with pytest.warns(RuntimeWarning, match="bad archive header"):
        w = LedgerWriter(tmp_path)
    with w:
        w.insert("net_events", net_row(1), [Body("request", b"nowhere to go", "http.request")])
    assert archive.read_bytes() == v1
    assert query(tmp_path / "session.db", "SELECT COUNT(*) FROM net_events") == [(1,)]


def test_a_failed_append_retires_the_archive_but_keeps_committed_bodies_and_rows(tmp_path, monkeypatch):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path)
    w.insert("net_events", net_row(1), [Body("request", b"safe", "http.request")])
    w.flush()

    def failing_write(fd: int, data: bytes) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "write", failing_write)
    w.insert("net_events", net_row(2), [Body("request", b"lost", "http.request")])
    with pytest.warns(RuntimeWarning, match="no more bodies"):
        w.flush()
    monkeypatch.undo()
    w.insert("net_events", net_row(3), [Body("request", b"after", "http.request")])
    w.close()
    assert w.bodies_dropped == 2
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(3,)]
    assert [b.data for b in oracle.archived_bodies(db)] == [b"safe"]
    oracle.check_index_extents(db)
