"""The verify-bodies kernel: same findings as the pure-Python baseline, for any thread count."""

from __future__ import annotations

import importlib.util
import random
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from capsem_core import _archive, _index
from capsem_core import format as fmt
from capsem_core.writer import Body, LedgerWriter

_spec = importlib.util.spec_from_file_location(
    "baseline_verify", Path(__file__).resolve().parents[1] / "bench" / "baseline_verify.py")
baseline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(baseline)


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
    verified, findings = _archive.verify_ledger(db, **kw)
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
    verified, _ = _archive.verify_ledger(ledger, progress=lambda b, n: seen.append((b, n, threading.get_ident())))
    assert seen and seen[-1][1] == verified == 600
    assert seen[-1][0] == int(_index.scan_bodies(ledger)["body_len"].sum())
    assert {t for _, _, t in seen} == {main}


def test_a_missing_archive_with_indexed_bodies_is_a_ledger_error(tmp_path):
    db = make_ledger(tmp_path, rows=3, seed=1)
    db.with_suffix(".bodies").unlink()
    with pytest.raises(fmt.ArchiveError, match="io: No such file"):
        _archive.verify_ledger(db)


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
