"""Golden ledgers: small committed ledgers that pin the bytes this writer produces.

``tests/golden/ledger_*/`` hold three ledgers written with a fixed clock and fixed data
(``session.bodies`` as written; ``session.db`` gzipped, since an empty v2 schema alone is
~100 KiB of SQLite pages — ``golden_ledger(case, directory)`` unpacks a usable pair):
deflate (one closed block), zstd (codec 2), and a deflate ledger with several blocks whose
last block was left open, as a crashed writer leaves it. ``tests/golden/ledgers.json``
records their layout (every block and segment header) and the compression library
versions they were written with.

The tests regenerate each ledger and require identical archive bytes (with the recorded
zlib / libzstd; with another version only the compressed payloads may differ, so the raw
structure is compared instead), check header bytes and offsets literally, and read the
committed files back with the independent oracle. To rewrite them after an intended format
change: ``CAPSEM_REGENERATE_GOLDEN=1 python3 -m pytest tests/native/test_golden.py``.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import sqlite3
import struct
import zlib
from pathlib import Path

import pytest
import zstandard

from oracles import archive_reader as oracle
from capsem_core import schema
from capsem_core.writer import Body, LedgerWriter

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
MANIFEST = GOLDEN / "ledgers.json"
CASES = ("ledger_deflate", "ledger_zstd", "ledger_multiblock")
T0 = 1_750_000_000.0
REGENERATE = os.environ.get("CAPSEM_REGENERATE_GOLDEN") == "1"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _text(rng: random.Random, n: int) -> bytes:
    words = ("the", "model", "tool_use", "result", "content", "assistant", "ledger", "block", "segment", "{", "}")
    return " ".join(rng.choice(words) for _ in range(n)).encode()


def _bodies(case: str) -> list[tuple[str, dict[str, object], list[Body]]]:
    """The fixed inserts of one golden case: (table, row, bodies)."""
    rng = random.Random(f"golden:{case}")
    inserts: list[tuple[str, dict[str, object], list[Body]]] = []
    for i in range(6):
        event_id = f"{0xa0 + i:012x}"
        row = {"event_id": event_id, "timestamp": f"2025-06-15T15:06:{40 + i:02d}.000000Z", "domain": "api.anthropic.com",
               "decision": "allowed", "method": "POST", "path": "/v1/messages", "status_code": 200,
               "trace_id": "trace-golden", "turn_id": f"turn-{i // 3}"}
        request = json.dumps({"model": "claude", "messages": [_text(rng, 100 + 20 * i).decode()]}).encode()
        response = rng.randbytes(200) + _text(rng, 40)
        inserts.append(("net_events", row, [Body("request", request, "http.request", "application/json"),
                                            Body("response", response, "http.request", original_bytes=len(response) + 7)]))
    payload = json.dumps({"event": "http.request", "url": "https://api.anthropic.com/v1/messages",
                          "headers": _text(rng, 120).decode()}).encode()
    base = {"event_id": f"{0xb0:012x}", "event_type": "http.request", "timestamp_unix_ms": 1_750_000_000_000,
            "trace_id": "trace-golden"}
    inserts.append(("security_rule_events", {**base, "rule_id": "r-egress", "rule_action": "allow",
                                             "rule_json": '{"id":"r-egress"}'}, [Body("payload", payload, "security.rule")]))
    inserts.append(("security_decision_events", {**base, "stage": "rule", "actor": "policy",
                                                 "previous_decision": "allow", "requested_decision": "allow",
                                                 "effective_decision": "allow"},
                    [Body("payload", payload, "security.decision")]))
    inserts.append(("exec_events", {"event_id": f"{0xc0:012x}", "timestamp": "2025-06-15T15:07:00.000000Z",
                                    "exec_id": 1, "command": "ls -la", "exit_code": 0},
                    [Body("stdout", _text(rng, 80), "process.exec", "text/plain"), Body("stderr", b"", "process.exec")]))
    return inserts


def write_case(directory: Path, case: str) -> None:
    clock = Clock()
    codec = "zstd" if case == "ledger_zstd" else "deflate"
    w = LedgerWriter(directory, codec=codec, clock=clock)
    for n, (table, row, bodies) in enumerate(_bodies(case)):
        w.insert(table, row, bodies)
        clock.now += 0.25
        if n % 3 == 2:
            w.flush()
            if case == "ledger_multiblock":
                # An hour later the next body closes the block by age.
                clock.now += 3600
    if case == "ledger_multiblock":
        # The first request body again: a >= 512-byte body reused from an earlier block.
        table, row, bodies = _bodies(case)[0]
        w.insert("net_events", {**row, "event_id": f"{0xd0:012x}"},
                 [bodies[0], Body("response", b"left in a block that is never closed", "http.request")])
        w.flush()
        # Stop as a crash would: the last block stays open (no FINAL segment).
        w._release()
    else:
        w.close()


def layout(data: bytes, block_offsets: list[int]) -> list[list[object]]:
    """Every block's header and segment headers: [offset, codec, [[at, flags, raw_start, raw_len, comp_len]...]]."""
    out: list[list[object]] = []
    for block_offset in block_offsets:
        segments = oracle.walk_block(data, block_offset)
        out.append([block_offset, data[block_offset + 4],
                    [[s.at, int(s.final), s.raw_start, s.raw_len, s.comp_len] for s in segments]])
    return out


def raw_structure(entries: list[list[object]]) -> list[list[object]]:
    """The layout without what depends on the compressor's exact output (offsets, comp_len)."""
    return [[codec, [[flags, raw_start, raw_len] for _, flags, raw_start, raw_len, _ in segments]]
            for _, codec, segments in entries]


def index_rows(db: Path, *, with_extents: bool = True) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out = {}
        for table in schema.TABLES:
            rows = conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
            if not with_extents and table in ("body_blocks", "event_body_blobs"):
                # Offsets and disk lengths follow the compressor's output size.
                rows = [r[1:2] if table == "body_blocks" else r[:9] + r[10:] for r in rows]
            out[table] = rows
        return out
    finally:
        conn.close()


def block_offsets(db: Path) -> list[int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT block_offset FROM body_blocks ORDER BY block_offset")]
    finally:
        conn.close()


def pack(directory: Path) -> None:
    """Store a golden session.db gzipped with 512-byte pages and no WAL, to keep it small."""
    db = directory / "session.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA page_size = 512")
    conn.execute("VACUUM")
    conn.close()
    (directory / "session.db.gz").write_bytes(gzip.compress(db.read_bytes(), mtime=0))
    for name in ("session.db", "session.db-wal", "session.db-shm", "session.db-writer.lock"):
        (directory / name).unlink(missing_ok=True)


def golden_ledger(case: str, directory: Path) -> Path:
    """Unpack the committed golden ledger ``case`` into ``directory``; returns its session.db."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(GOLDEN / case / "session.bodies", directory / "session.bodies")
    (directory / "session.db").write_bytes(gzip.decompress((GOLDEN / case / "session.db.gz").read_bytes()))
    return directory / "session.db"


def libraries() -> dict[str, str]:
    return {"zlib": zlib.ZLIB_RUNTIME_VERSION, "zstd": ".".join(map(str, zstandard.ZSTD_VERSION))}


def regenerate() -> None:
    manifest: dict[str, object] = {"libraries": libraries(), "cases": {}}
    for case in CASES:
        directory = GOLDEN / case
        shutil.rmtree(directory, ignore_errors=True)
        write_case(directory, case)
        data = (directory / "session.bodies").read_bytes()
        manifest["cases"][case] = {  # type: ignore[index]
            "archive_bytes": len(data),
            "blake3": oracle.b3(data).hex(),
            "layout": layout(data, block_offsets(directory / "session.db")),
        }
        pack(directory)
    # One segment per line keeps diffs of this file readable.
    text = json.dumps(manifest, indent=1)
    MANIFEST.write_text(re.sub(r"\[\s+(\d+),\s+(\d+),\s+(\d+),\s+(\d+),\s+(\d+)\s+\]", r"[\1, \2, \3, \4, \5]", text)
                        + "\n")


if REGENERATE:
    regenerate()


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


@pytest.mark.parametrize("case", CASES)
def test_the_committed_golden_ledger_matches_its_recorded_layout(case, manifest, tmp_path):
    db = golden_ledger(case, tmp_path)
    data = (tmp_path / "session.bodies").read_bytes()
    recorded = manifest["cases"][case]
    assert len(data) == recorded["archive_bytes"] and oracle.b3(data).hex() == recorded["blake3"]
    assert layout(data, block_offsets(db)) == recorded["layout"]
    for name in ("session.bodies", "session.db.gz"):
        assert (GOLDEN / case / name).stat().st_size < 32 * 1024


@pytest.mark.parametrize("case", CASES)
def test_a_regenerated_golden_ledger_is_byte_identical(case, manifest, tmp_path):
    write_case(tmp_path, case)
    data = (tmp_path / "session.bodies").read_bytes()
    committed = GOLDEN / case
    recorded = manifest["cases"][case]
    regenerated_layout = layout(data, block_offsets(tmp_path / "session.db"))
    committed_db = golden_ledger(case, tmp_path / "committed")
    if manifest["libraries"] == libraries():
        assert data == (committed / "session.bodies").read_bytes()
        assert regenerated_layout == recorded["layout"]
        assert index_rows(tmp_path / "session.db") == index_rows(committed_db)
    else:
        # Another zlib / libzstd may emit other (equally valid) compressed bytes: the raw
        # structure and every index row other than extents must still be identical.
        assert raw_structure(regenerated_layout) == raw_structure(recorded["layout"])
        assert index_rows(tmp_path / "session.db", with_extents=False) == \
            index_rows(committed_db, with_extents=False)


def test_the_golden_headers_are_the_exact_v2_bytes(manifest):
    data = (GOLDEN / "ledger_deflate" / "session.bodies").read_bytes()
    assert data[:16] == bytes.fromhex("4341505345 4d424c 0200 0000 00000000".replace(" ", ""))
    assert data[16:24] == b"BLK2\x01\x00\x00\x00"
    magic, flags, reserved, raw_start, raw_len, comp_len = struct.unpack_from("<4sB3sIII", data, 24)
    first_three = sum(len(b.data) for _, _, bodies in _bodies("ledger_deflate")[:3] for b in bodies)
    assert (magic, flags, reserved, raw_start, raw_len) == (b"SGMT", 0, b"\0\0\0", 0, first_three)
    assert data[24 + 52 + comp_len - 4:24 + 52 + comp_len] == b"\x00\x00\xff\xff"
    assert data[-2:] == b"\x03\x00"  # FINAL after a sync flush: the empty final deflate block
    zstd = (GOLDEN / "ledger_zstd" / "session.bodies").read_bytes()
    assert zstd[16:24] == b"BLK2\x02\x00\x00\x00"
    assert zstd[24 + 52:24 + 52 + 4] == b"\x28\xb5\x2f\xfd"  # a zstd frame starts the block's stream
    multi = manifest["cases"]["ledger_multiblock"]["layout"]
    assert multi[0][0] == 16 and len(multi) >= 3
    for (offset, _, segments), (next_offset, _, _) in zip(multi, multi[1:]):
        assert next_offset == segments[-1][0] + 52 + segments[-1][4]  # blocks are contiguous
        assert segments[-1][1] == 1  # every block but the last is closed
    assert multi[-1][2][-1][1] == 0  # the last block is still open


@pytest.mark.parametrize("case", CASES)
def test_the_committed_golden_ledgers_read_back_with_the_oracle(case, tmp_path):
    db = golden_ledger(case, tmp_path)
    oracle.check_index_extents(db)
    got = {(b.source_table, b.event_id, b.direction): b.data for b in oracle.archived_bodies(db)}
    expected = {(table, row["event_id"], body.direction): body.data
                for table, row, bodies in _bodies(case) for body in bodies if body.data}
    if case == "ledger_multiblock":
        first = _bodies(case)[0][2][0]
        expected[("net_events", f"{0xd0:012x}", "request")] = first.data
        expected[("net_events", f"{0xd0:012x}", "response")] = b"left in a block that is never closed"
    assert got == expected
    if case == "ledger_multiblock":
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        spans = conn.execute("SELECT block_offset, body_offset FROM event_body_blobs WHERE direction = 'request' "
                             "AND event_id IN (?, ?)", (f"{0xa0:012x}", f"{0xd0:012x}")).fetchall()
        conn.close()
        assert spans[0] == spans[1]  # cross-block dedup reused the committed span
