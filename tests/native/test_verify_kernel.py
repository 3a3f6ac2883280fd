"""The verify-bodies kernel: same findings as the pure-Python baseline, for any thread count."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import zlib
from pathlib import Path

from oracles import archive_reader as oracle
import pytest
from blake3 import blake3
from tests.reliability_helpers import layout, net_row

from tests import scans as _index
from capsem_core import verify as _verify
from capsem_core._native import _archive, _errors
from capsem_core import errors
from capsem_core import format as fmt
from capsem_core.writer import Body, LedgerWriter
from oracles import baseline_verify as baseline
from oracles import verify_floor



def _bytes(r: random.Random, n: int) -> bytes:
    words = [b"alpha", b"beta", b"gamma", b"delta", b"{\"k\": ", b"}\n", b"tool_use", b"content"]
    text = b" ".join(r.choice(words) for _ in range(n // 5 + 1))[: n - n // 4]
    return text + r.randbytes(n - len(text))


def make_ledger(directory: Path, *, rows: int, seed: int, codec: str = "deflate", flush_every: int = 25,
                body_bytes: tuple[int, int] = (100, 3000), close_every_flush: bool = False) -> Path:
    """A ledger of `rows` net_events, each with a request and a response body, flushed every
    `flush_every` rows (one segment per flush; blocks close at 1 MiB). Returns session.db."""
    r = random.Random(seed)
    w = LedgerWriter(directory, codec=codec, close_every_flush=close_every_flush)
    for i in range(rows):
        w.insert("net_events", {"timestamp": f"2025-06-02T09:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                "domain": "api.example.com", "decision": "allowed", "method": "POST",
                                "path": f"/v1/{i}", "status_code": 200},
                 [Body("request", _bytes(r, r.randint(*body_bytes)), "http.request"),
                  Body("response", _bytes(r, r.randint(*body_bytes)), "http.request")])
        if (i + 1) % flush_every == 0:
            w.flush()
    w.close()
    return directory / "session.db"


def kernel(db: Path, **kw) -> tuple[int, list[tuple]]:
    verified, findings = _verify.verify_ledger(db, **kw)
    return verified, [tuple(f) for f in findings]


def all_agree(db: Path) -> tuple[int, list[tuple]]:
    want = baseline.verify_ledger(db)
    assert kernel(db, threads=1) == want
    assert kernel(db, threads=2) == want
    assert kernel(db, threads=3, use_libdeflate=False) == want
    return want


def _segments(bodies: Path, block: int) -> list[tuple[int, int]]:
    """(header offset, comp_len) of each segment of a block."""
    data = bodies.read_bytes()
    at, out = block + 8, []
    while at + 52 <= len(data) and data[at:at + 4] == b"SGMT":
        comp_len = struct.unpack_from("<I", data, at + 16)[0]
        out.append((at, comp_len))
        final = data[at + 4] & 1
        at += 52 + comp_len
        if final:
            break
    return out


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _sql(db: Path, statement: str, *args) -> None:
    con = sqlite3.connect(db)
    con.execute(statement, args)
    con.commit()
    con.close()


@pytest.fixture(scope="module", params=["deflate", "zstd"])
def pristine(request, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp(request.param)
    make_ledger(directory, rows=300, seed=11, codec=request.param, body_bytes=(100, 4000))
    return directory


def _private_copy(directory: Path, tmp_path: Path) -> Path:
    """A copy of a module's sound ledger (tests damage it)."""
    for name in ("session.db", "session.bodies"):
        shutil.copyfile(directory / name, tmp_path / name)
    return tmp_path / "session.db"


@pytest.fixture
def ledger(pristine, tmp_path) -> Path:
    return _private_copy(pristine, tmp_path)


def test_a_sound_ledger_verifies_every_body_the_same_way_everywhere(ledger):
    verified, findings = all_agree(ledger)
    assert findings == []
    assert verified == _index.scan_bodies(ledger)["id"].shape[0] == 600
    assert len(_index.scan_blocks(ledger)["block_offset"]) >= 2


def test_a_flipped_payload_byte_fails_that_segment_and_every_later_body_of_its_block(ledger):
    blocks = _index.scan_blocks(ledger)["block_offset"].tolist()
    bodies_path = ledger.with_suffix(".bodies")
    segs = _segments(bodies_path, blocks[0])
    at, comp_len = segs[len(segs) // 2]
    _flip(bodies_path, at + 52 + comp_len // 2)
    verified, findings = all_agree(ledger)
    assert findings and verified + len(findings) == 600
    assert {f[4] for f in findings} == {blocks[0]}
    assert {f[7] for f in findings} == {at}
    assert findings[0][8] in ("inflate", "segment_hash", "integrity")
    assert findings[0][9].startswith(f"{findings[0][1]} net_events/")


def test_a_flipped_segment_hash_byte_is_a_segment_hash_finding(ledger):
    blocks = _index.scan_blocks(ledger)["block_offset"].tolist()
    bodies_path = ledger.with_suffix(".bodies")
    at, _ = _segments(bodies_path, blocks[-1])[0]
    _flip(bodies_path, at + 20 + 5)
    verified, findings = all_agree(ledger)
    assert findings and {f[8] for f in findings} == {"segment_hash"}
    assert "failed integrity check: header says" in findings[0][9]


def test_a_flipped_body_hash_in_the_index_fails_only_that_row(ledger):
    bodies = _index.scan_bodies(ledger)
    victim = int(bodies["id"][123])
    good = fmt.body_hash_text(bytes(bodies["digest"][123]))
    bad = good[:-1] + ("0" if good[-1] != "0" else "1")
    _sql(ledger, "UPDATE event_body_blobs SET body_hash = ? WHERE id = ?", bad, victim)
    verified, findings = all_agree(ledger)
    assert [(f[0], f[8]) for f in findings] == [(victim, "body_hash")]
    assert f"index says {bad}, bytes hash to {good}" in findings[0][9]


def test_a_malformed_body_hash_is_a_finding_not_a_crash(ledger):
    victim = int(_index.scan_bodies(ledger)["id"][7])
    _sql(ledger, "UPDATE event_body_blobs SET body_hash = ? WHERE id = ?", "blake3:0" + "Z" * 63, victim)
    verified, findings = all_agree(ledger)
    assert [(f[0], f[8]) for f in findings] == [(victim, "bad_body_hash_text")]


def test_a_truncated_archive_fails_exactly_the_bodies_past_the_cut(ledger):
    bodies_path = ledger.with_suffix(".bodies")
    blocks = _index.scan_blocks(ledger)
    last = int(blocks["block_offset"][-1])
    segs = _segments(bodies_path, last)
    cut = segs[len(segs) // 2][0] + 30
    bodies_path.write_bytes(bodies_path.read_bytes()[:cut])
    verified, findings = all_agree(ledger)
    assert findings and {f[8] for f in findings} == {"truncated"}
    assert {f[4] for f in findings} == {last}


def test_a_span_past_its_blocks_raw_bytes_is_out_of_range(ledger):
    blocks = _index.scan_blocks(ledger)
    first, raw_len = int(blocks["block_offset"][0]), int(blocks["raw_len"][0])
    con = sqlite3.connect(ledger)
    victim = con.execute("SELECT id FROM event_body_blobs WHERE block_offset = ? ORDER BY body_offset LIMIT 1",
                         (first,)).fetchone()[0]
    con.execute("UPDATE event_body_blobs SET body_offset = ? WHERE id = ?", (raw_len - 10, victim))
    con.commit()
    con.close()
    verified, findings = all_agree(ledger)
    assert [(f[0], f[8]) for f in findings] == [(victim, "out_of_range")]
    assert findings[0][9].endswith("body reference out of range for its block")


def test_a_bad_block_header_fails_every_body_of_that_block(ledger):
    blocks = _index.scan_blocks(ledger)["block_offset"].tolist()
    bodies_path = ledger.with_suffix(".bodies")
    _flip(bodies_path, blocks[0] + 1)
    verified, findings = all_agree(ledger)
    in_block = int((_index.scan_bodies(ledger)["block_offset"] == blocks[0]).sum())
    assert len(findings) == in_block
    assert {f[8] for f in findings} == {"bad_block_header"}


def test_many_small_blocks_and_threads_give_identical_results(tmp_path):
    db = make_ledger(tmp_path, rows=200, seed=5, flush_every=3, close_every_flush=True, body_bytes=(0, 400))
    bodies_path = db.with_suffix(".bodies")
    blocks = _index.scan_blocks(db)["block_offset"].tolist()
    for block in blocks[3::7]:
        at, comp_len = _segments(bodies_path, block)[0]
        _flip(bodies_path, at + 52 + comp_len // 3)
    verified, findings = all_agree(db)
    assert findings and verified > 0


def test_progress_is_reported_from_the_calling_thread(ledger):
    import threading
    seen = []
    main = threading.get_ident()
    verified, _ = _verify.verify_ledger(ledger, progress=lambda b, n: seen.append((b, n, threading.get_ident())))
    assert seen and seen[-1][1] == verified == 600
    assert seen[-1][0] == int(_index.scan_bodies(ledger)["body_len"].sum())
    assert {t for _, _, t in seen} == {main}


def test_a_missing_archive_with_indexed_bodies_is_a_ledger_error(tmp_path):
    db = make_ledger(tmp_path, rows=3, seed=1)
    db.with_suffix(".bodies").unlink()
    with pytest.raises(errors.ArchiveError, match="io: No such file"):
        _verify.verify_ledger(db)


def _shared_span_ledger(directory: Path, *, rows: int, codec: str = "deflate") -> Path:
    """Rows whose bodies repeat: the writer stores each distinct body once, so many rows name
    one span (adjacent in archive order)."""
    r = random.Random(21)
    common = [_bytes(r, n) for n in (0, 1, 300, 2500)]
    w = LedgerWriter(directory, codec=codec)
    for i in range(rows):
        w.insert("net_events", {"timestamp": f"2025-06-02T09:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                "domain": "api.example.com", "decision": "allowed", "method": "POST",
                                "path": f"/v1/{i}", "status_code": 200},
                 [Body("request", common[i % len(common)], "http.request"),
                  Body("response", common[3] if i % 3 else _bytes(r, 700), "http.request")])
        if (i + 1) % 500 == 0:
            w.flush()
    w.close()
    return directory / "session.db"


def test_rows_sharing_a_span_each_have_their_own_digest_compared(tmp_path):
    # 2,600 rows in one block: more rows than one hash batch holds members.
    shared = _shared_span_ledger(tmp_path, rows=2600)
    bodies = _index.scan_bodies(shared)
    spans = list(zip(bodies["block_offset"].tolist(), bodies["body_offset"].tolist(), bodies["body_len"].tolist()))
    assert len(set(spans)) < len(spans) // 4  # the sample really shares spans
    verified, findings = all_agree(shared)
    assert findings == [] and verified == len(spans)
    # Damage the index digest of one row in the middle of a run of rows naming one span.
    run = [i for i in range(1, len(spans) - 1) if spans[i - 1] == spans[i] == spans[i + 1]]
    k = run[len(run) // 2]
    victim = int(bodies["id"][k])
    good = fmt.body_hash_text(bytes(bodies["digest"][k]))
    bad = good[:-1] + ("0" if good[-1] != "0" else "1")
    _sql(shared, "UPDATE event_body_blobs SET body_hash = ? WHERE id = ?", bad, victim)
    verified, findings = all_agree(shared)
    assert [(f[0], f[8]) for f in findings] == [(victim, "body_hash")]
    assert f"index says {bad}, bytes hash to {good}" in findings[0][9]


def test_a_damaged_shared_span_fails_every_row_that_names_it(tmp_path):
    shared = _shared_span_ledger(tmp_path, rows=300)
    bodies = _index.scan_bodies(shared)
    blocks = _index.scan_blocks(shared)["block_offset"].tolist()
    bodies_path = shared.with_suffix(".bodies")
    # The first segment holds the spans most rows share.
    at, comp_len = _segments(bodies_path, blocks[0])[0]
    _flip(bodies_path, at + 52 + comp_len // 2)
    verified, findings = all_agree(shared)
    assert len(findings) > 200
    in_block = int((bodies["block_offset"] == blocks[0]).sum())
    assert findings and len(findings) <= in_block and {f[4] for f in findings} == {blocks[0]}


# --- segments the one-call-per-segment libdeflate path must judge as the streaming reader does ---

def _one_block_ledger(directory: Path, bodies: list[bytes]) -> Path:
    """One closed deflate block at offset 16: a non-final segment per body (one flush each),
    then the empty FINAL segment the writer closes it with."""
    now = [1.79e9]
    with LedgerWriter(directory, clock=lambda: now[0]) as w:
        for i, body in enumerate(bodies):
            w.insert("net_events", net_row(f"{i:012x}"), bodies=[Body("request", body, "http.request")])
            w.flush()
        now[0] += 3601
        w.flush()
    db = directory / "session.db"
    assert [b.offset for b in layout(db.with_suffix(".bodies").read_bytes())] == [16]
    return db


def _block_raw(db: Path) -> bytes:
    return oracle.ArchiveOracle(db.with_suffix(".bodies")).read(16, 0, sum(s.raw_len for s in _segs(db)))


def _segs(db: Path) -> tuple:
    return layout(db.with_suffix(".bodies").read_bytes())[0].segments


def _rewrite_block(db: Path, segments: list[tuple[bool, bytes, bytes]]) -> None:
    """Replace the block at 16 by segments (final, raw bytes, payload), each header's raw_start,
    raw_len, comp_len and hash written to match; body_blocks follows."""
    path = db.with_suffix(".bodies")
    out = bytearray(path.read_bytes()[:24])   # file header, block header
    start = 0
    for final, raw, payload in segments:
        out += struct.pack("<4sB3sIII", b"SGMT", int(final), b"\0\0\0", start, len(raw), len(payload))
        out += blake3(raw).digest() + payload
        start += len(raw)
    path.write_bytes(bytes(out))
    _sql(db, "UPDATE body_blocks SET disk_len = ?, raw_len = ? WHERE block_offset = 16", len(out) - 16, start)


def _sync_payload(raw: bytes, window: bytes) -> bytes:
    """raw deflated as a sync-flushed segment that continues a stream whose window is `window`."""
    z = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=window[-32768:]) if window else zlib.compressobj(6, zlib.DEFLATED, -15)
    return z.compress(raw) + z.flush(zlib.Z_SYNC_FLUSH)


def _reader_verdicts(db: Path) -> dict[int, type | None]:
    """What ArchiveReader (the streaming reader, one cursor, as Ledger.read_body uses it) says of
    every indexed body: None when it reads back verified, else the error's class."""
    bodies = _index.scan_bodies(db)
    verdicts: dict[int, type | None] = {}
    with _archive.ArchiveReader(db.with_suffix(".bodies")) as reader:
        for i in range(bodies["id"].shape[0]):
            try:
                reader.read_verified(int(bodies["block_offset"][i]), int(bodies["body_offset"][i]),
                                     int(bodies["body_len"][i]), bytes(bodies["digest"][i]))
                verdicts[int(bodies["id"][i])] = None
            except errors.LedgerError as exc:
                verdicts[int(bodies["id"][i])] = type(exc)
    return verdicts


# Finding kind -> the exception the reader raises for it, from the native status table.
_KIND_CLASS = {s.kind: _errors.exception_class(s.code) for s in _errors.STATUSES if s.exception}


@pytest.fixture(params=[(True, 1), (True, 2), (False, 1), (False, 2)], ids=lambda p: f"libdeflate={p[0]}-threads={p[1]}")
def kernel_setting(request) -> dict:
    return {"use_libdeflate": request.param[0], "threads": request.param[1]}


def agree_with_baseline_and_reader(db: Path, setting: dict) -> tuple[int, list[tuple]]:
    want = baseline.verify_ledger(db)
    got = kernel(db, **setting)
    assert got == want
    verdicts = {f[0]: _KIND_CLASS[f[8]] for f in got[1]}
    assert {rid: verdicts.get(rid) for rid in _reader_verdicts(db)} == _reader_verdicts(db)
    return got


def test_a_segment_boundary_moved_by_one_raw_byte_fails_every_body_of_the_block(tmp_path, kernel_setting):
    """Reliability F4: segment 0 claims one raw byte less and segment 1 one more (raw_start,
    raw_len and both hashes rewritten). The joined stream still inflates to the same bytes, but
    segment 0 inflates to more than its raw_len, so every reader refuses the block."""
    db = _one_block_ledger(tmp_path, [b"body %d " % i * 40 for i in range(3)])
    raw = _block_raw(db)
    s0, s1 = _segs(db)[:2]
    path = db.with_suffix(".bodies")
    data = bytearray(path.read_bytes())
    cut = s0.raw_len - 1
    struct.pack_into("<I", data, s0.at + 12, cut)
    data[s0.at + 20:s0.at + 52] = blake3(raw[:cut]).digest()
    struct.pack_into("<II", data, s1.at + 8, cut, s1.raw_len + 1)
    data[s1.at + 20:s1.at + 52] = blake3(raw[cut:s0.raw_len + s1.raw_len]).digest()
    path.write_bytes(bytes(data))
    verified, findings = agree_with_baseline_and_reader(db, kernel_setting)
    assert verified == 0 and len(findings) == 3
    assert {(f[7], f[8]) for f in findings} == {(s0.at, "integrity")}
    assert "the segment inflates to more than" in findings[0][9]


@pytest.mark.parametrize("k", [0, 1])
def test_a_final_deflate_block_inside_a_non_final_segment_ends_the_stream_too_early(tmp_path, kernel_setting, k):
    """Segment k re-encoded to the same raw bytes followed by an empty FINAL stored block
    (01 00 00 FF FF, so it still ends on the sync-flush bytes): it inflates to exactly raw_len
    and consumes every byte, but ends the stream in a segment that is not FINAL."""
    bodies = [b"alpha %d " % i * 30 for i in range(3)]
    db = _one_block_ledger(tmp_path, bodies)
    segs = _segs(db)
    data = db.with_suffix(".bodies").read_bytes()
    window = b"".join(bodies[:k])
    forged = [(s.final, bodies[i] if i < 3 else b"", data[s.at + 52:s.end]) for i, s in enumerate(segs)]
    forged[k] = (False, bodies[k], _sync_payload(bodies[k], window) + b"\x01\x00\x00\xff\xff")
    _rewrite_block(db, forged)
    verified, findings = agree_with_baseline_and_reader(db, kernel_setting)
    assert verified == k and len(findings) == 3 - k
    assert {f[8] for f in findings} == {"integrity"}
    assert findings[0][9].endswith("the stream ends in a segment that is not FINAL")


def test_a_payload_that_ends_inside_a_stored_block_on_sync_flush_bytes_still_verifies(tmp_path, kernel_setting):
    """A stored deflate block split across segments 0 and 1, segment 0's part ending with the
    bytes 00 00 FF FF: the streaming reader accepts it (each segment inflates to exactly its
    raw_len with every byte consumed and no stream end), so the kernel must too, even though
    segment 0 alone is not a stream that a libdeflate call can finish."""
    bodies = [b"stored body zero \x00\x00\xff\xff", b"stored body one " * 5, b"compressed body two " * 20]
    db = _one_block_ledger(tmp_path, bodies)
    segs = _segs(db)
    data = db.with_suffix(".bodies").read_bytes()
    n = len(bodies[0]) + len(bodies[1])
    stored_head = b"\x00" + struct.pack("<HH", n, n ^ 0xFFFF)     # BFINAL 0, BTYPE 00, LEN, NLEN
    _rewrite_block(db, [
        (False, bodies[0], stored_head + bodies[0]),
        (False, bodies[1], bodies[1] + b"\x00\x00\x00\xff\xff"),  # the block's rest, then a sync flush
        (False, bodies[2], _sync_payload(bodies[2], bodies[0] + bodies[1])),
        (True, b"", data[segs[3].at + 52:segs[3].end]),
    ])
    verified, findings = agree_with_baseline_and_reader(db, kernel_setting)
    assert (verified, findings) == (3, [])


def test_a_sound_block_of_many_segments_reads_back_through_every_window(tmp_path, kernel_setting):
    """Segments after the first reach back into earlier segments' raw bytes, beyond 32 KiB of
    history too: the window each per-segment call is given must be exactly the deflate window."""
    r = random.Random(9)
    bodies = [_bytes(r, r.randint(1, 40000)) * 2 for _ in range(12)]
    db = _one_block_ledger(tmp_path, bodies)
    assert len(_segs(db)) == 13 and _block_raw(db) == b"".join(bodies)
    verified, findings = agree_with_baseline_and_reader(db, kernel_setting)
    assert (verified, findings) == (12, [])


class _Bits:
    """A deflate bit writer: fields least significant bit first, Huffman codes most significant first."""

    def __init__(self) -> None:
        self.bits: list[int] = []

    def field(self, value: int, n: int) -> None:
        self.bits += [(value >> k) & 1 for k in range(n)]

    def code(self, value: int, n: int) -> None:
        self.bits += [(value >> k) & 1 for k in range(n - 1, -1, -1)]

    def fixed_litlen(self, sym: int) -> None:
        if sym < 144:
            self.code(0x30 + sym, 8)
        elif sym < 256:
            self.code(0x190 + sym - 144, 9)
        elif sym < 280:
            self.code(sym - 256, 7)
        else:
            self.code(0xC0 + sym - 280, 8)

    def bytes(self) -> bytes:
        b = self.bits + [0] * (-len(self.bits) % 8)
        return bytes(sum(b[i + k] << k for k in range(8)) for i in range(0, len(b), 8))


def _symbol_286_ledger(tmp_path):
    """A fixed-Huffman block using litlen symbol 286 (no length in deflate: zlib says "invalid
    literal/length code"), every hash written to match what libdeflate makes of it (length
    258); (session.db, the body)."""
    body = b"a" * 261
    db = _one_block_ledger(tmp_path, [body, b"second body " * 4])
    segs = _segs(db)
    data = db.with_suffix(".bodies").read_bytes()
    w = _Bits()
    w.field(0, 1)
    w.field(1, 2)                                  # BFINAL 0, fixed Huffman
    for _ in range(3):
        w.fixed_litlen(ord("a"))
    w.fixed_litlen(286)
    w.code(0, 5)                                   # distance 1
    w.fixed_litlen(256)
    w.field(0, 3)                                  # the sync flush's empty stored block
    forged = w.bytes() + b"\x00\x00\xff\xff"
    _rewrite_block(db, [(False, body, forged),
                        (False, b"second body " * 4, _sync_payload(b"second body " * 4, body)),
                        (True, b"", data[segs[2].at + 52:segs[2].end])])
    return db, body


def test_a_length_symbol_zlib_refuses_fails_the_block_with_libdeflate_too(tmp_path):
    db, _ = _symbol_286_ledger(tmp_path)
    want = baseline.verify_ledger(db)
    assert want[0] == 0 and {f[8] for f in want[1]} == {"inflate"}
    assert kernel(db, threads=1, use_libdeflate=False) == want
    assert kernel(db, threads=1, use_libdeflate=True) == want


def test_a_length_symbol_zlib_refuses_is_refused_by_the_reader_with_libdeflate_too(tmp_path):
    db, body = _symbol_286_ledger(tmp_path)
    ref = (16, 0, len(body))
    with pytest.raises(errors.InflateError):
        _archive.ArchiveReader(db.with_suffix(".bodies"), use_libdeflate=False).read(*ref)
    with pytest.raises(errors.InflateError):
        _archive.ArchiveReader(db.with_suffix(".bodies")).read(*ref)


@pytest.mark.parametrize("hasher", ["ours", "package"])
def test_the_verify_floor_inflates_every_referenced_segment_once_and_hashes_each_byte_twice(tmp_path, hasher):
    db = make_ledger(tmp_path, rows=300, seed=7, flush_every=40)
    work = verify_floor.plan(db)
    con = sqlite3.connect(db)
    raw = con.execute("SELECT SUM(raw_len) FROM body_blocks").fetchone()[0]
    spans = con.execute("SELECT SUM(body_len) FROM (SELECT DISTINCT block_offset, body_offset, body_len "
                        "FROM event_body_blobs)").fetchone()[0]
    con.close()
    inflated, hashed, inflate_s, hash_s = verify_floor.run(work, hasher)
    # Every committed byte is referenced here (no stranded tails), so the floor reads them all.
    assert inflated == raw
    assert hashed == raw + spans
    assert inflate_s > 0 and hash_s > 0


def test_the_verify_floor_refuses_bytes_that_do_not_hash_to_their_header(tmp_path):
    db = make_ledger(tmp_path, rows=60, seed=8, flush_every=20)
    work = verify_floor.plan(db)
    w = work[0]
    w.expected = w.expected.copy()
    w.expected[0, 0] ^= 1  # the first segment's header digest, as if the payload had changed
    with pytest.raises(RuntimeError, match="differs from its header or index row"):
        verify_floor.run(work, "ours")


# pthread_create for the verify kernel's workers (found by their start routine's library):
# after $SHIM_ALLOW_THREADS successes one fails, then the count starts over. The kernel stops
# starting workers at the first failure, so every verify starts exactly that many.
_THREAD_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    static int started;
    if (!real) real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(RTLD_NEXT, "pthread_create");
    Dl_info info;
    if (dladdr((void *)fn, &info) && info.dli_fname && strstr(info.dli_fname, "_archive.")) {
        const char *allow = getenv("SHIM_ALLOW_THREADS");
        if (started >= (allow ? atoi(allow) : 0)) {
            started = 0;
            return EAGAIN;
        }
        int rc = real(t, a, fn, arg);
        if (rc == 0) started++;
        return rc;
    }
    return real(t, a, fn, arg);
}
"""

# Verifies a ledger many times with 4 workers asked for; prints the result and how much the
# C heap grew (a worker that never started must still have its cursor freed).
_THREAD_SCRIPT = r"""
import ctypes, gc, sys
from capsem_core import verify as _verify
from capsem_core._native import _archive

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
db = sys.argv[1]
first = _verify.verify_ledger(db, threads=4)
for _ in range(200):  # warm up: the heap settles after a few hundred runs
    _verify.verify_ledger(db, threads=4)
gc.collect()
before = libc.mallinfo2().uordblks
for _ in range(400):
    assert _verify.verify_ledger(db, threads=4) == first
gc.collect()
print(first[0], len(first[1]), libc.mallinfo2().uordblks - before)
"""


def _shim_env(tmp_path: Path, allow: int) -> dict[str, str]:
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        # ASan's own pthread_create wraps each start routine in its own, so under
        # scripts/sanitize the shim cannot tell the kernel's workers from other threads.
        pytest.skip("the pthread_create shim cannot see through AddressSanitizer's interceptor")
    src, lib = tmp_path / "shim.c", tmp_path / "shim.so"
    src.write_text(_THREAD_SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src), "-ldl"], check=True)
    # After whatever is preloaded already, which must stay first.
    preload = " ".join(p for p in (os.environ.get("LD_PRELOAD", ""), str(lib)) if p)
    return dict(os.environ, LD_PRELOAD=preload, SHIM_ALLOW_THREADS=str(allow))


@pytest.mark.parametrize("allow", [1, 3])
def test_workers_that_cannot_start_leave_the_others_to_verify_everything_and_leak_nothing(tmp_path, allow):
    db = make_ledger(tmp_path / "ledger", rows=120, seed=11, flush_every=5, body_bytes=(100, 600),
                     close_every_flush=True)
    want = baseline.verify_ledger(db)
    env = _shim_env(tmp_path, allow)
    out = subprocess.run([sys.executable, "-c", _THREAD_SCRIPT, str(db)], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    verified, findings, grown = (int(x) for x in out)
    assert (verified, findings) == (want[0], len(want[1])) and verified == 240
    # 400 runs x (4 - allow) unstarted workers: a leaked cursor each would be well over 50 KB.
    assert grown < 50_000


def test_a_verify_whose_workers_all_fail_to_start_is_an_error_not_a_crash(tmp_path):
    db = make_ledger(tmp_path / "ledger", rows=20, seed=12, flush_every=5, close_every_flush=True)
    env = _shim_env(tmp_path, 0)
    run = subprocess.run([sys.executable, "-c", "import sys; from capsem_core import verify as _verify\n"
                          "try:\n    _verify.verify_ledger(sys.argv[1], threads=2)\n"
                          "except MemoryError as e:\n    print('MemoryError', e)\n", str(db)],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("MemoryError")
