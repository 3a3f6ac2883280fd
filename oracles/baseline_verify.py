"""The pure-Python verify-bodies baseline: what the doctor's ``--verify-bodies`` does, done well.

One body at a time in archive order through one block cursor (sqlite3 module for the index,
``zlib.decompressobj`` / ``zstandard`` to inflate, the ``blake3`` package to hash), so each
segment is inflated once. It reports the same findings as the native kernel
(``capsem_core.verify.verify_ledger``): same kinds, offsets and words. It is the yardstick
the benchmarks divide by and the oracle ``tests/native/test_verify_kernel.py`` compares with; it is
not a runtime path (``blake3`` is a test dependency only).

    python3 oracles/baseline_verify.py path/to/session.db
"""

from __future__ import annotations

import os
import sqlite3
import struct
import sys
import zlib
from pathlib import Path

import blake3
import zstandard

MAX_RAW = 16 << 20
MAX_EXPANSION = 64 << 10
SEG = 52
TAIL = b"\x00\x00\xff\xff"
_SEGMENT = struct.Struct("<4sB3sIII32s")


class Fault(Exception):
    """One archive error: its kind, the offset it names, and Capsem's words for it."""

    def __init__(self, kind: str, at: int, text: str) -> None:
        super().__init__(text)
        self.kind, self.at, self.text = kind, at, text


def _integrity(at: int, detail: str, kind: str = "integrity") -> Fault:
    return Fault(kind, at, f"segment at offset {at} failed integrity check: {detail}")


def _bad_segment(at: int, detail: str) -> Fault:
    return Fault("bad_segment", at, f"bad segment at offset {at}: {detail}")


class Reader:
    """Capsem's reader cursor over session.bodies, in Python."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        head = os.pread(self.fd, 16, 0)
        if len(head) < 16 or head[:8] != b"CAPSEMBL" or head[8:10] != b"\x02\x00":
            raise ValueError(f"{path}: bad archive header")
        self.block: int | None = None
        self.zstd = zstandard.ZstdDecompressor(max_window_size=1 << 24)

    def close(self) -> None:
        os.close(self.fd)

    def _start(self, block: int) -> None:
        self.block = None
        head = os.pread(self.fd, 8, block)
        if len(head) < 8 or head[:4] != b"BLK2":
            raise Fault("bad_block_header", block, f"bad block header at offset {block}")
        codec = head[4]
        if codec not in (1, 2) or head[5:8] != b"\0\0\0":
            raise Fault("unsupported_codec", block, f"block at offset {block} uses unsupported codec {codec}")
        self.codec = codec
        self.inflater = zlib.decompressobj(-15) if codec == 1 else self.zstd.decompressobj()
        self.raw = bytearray()
        self.next = block + 8
        self.finished = False
        self.block = block

    def _segment(self) -> None:
        block, at = self.block, self.next
        head = os.pread(self.fd, SEG, at)
        if len(head) < SEG:
            raise Fault("truncated", block, f"block at offset {block} is truncated: the file ends inside its payload")
        magic, flags, reserved, raw_start, raw_len, comp_len, digest = _SEGMENT.unpack(head)
        final = bool(flags & 1)
        held = len(self.raw)
        if (magic != b"SGMT" or flags & ~1 or reserved != b"\0\0\0" or raw_start != held
                or raw_start + raw_len > MAX_RAW or comp_len > raw_len + MAX_EXPANSION
                or (raw_len == 0 and not final)):
            shown = hex(flags) if flags else "0"
            raise _bad_segment(at, f"flags={shown} raw_start={raw_start} raw_len={raw_len} comp_len={comp_len}, "
                                   f"expected raw_start {held}")
        payload = os.pread(self.fd, comp_len, at + SEG)
        if len(payload) < comp_len:
            raise Fault("truncated", block, f"block at offset {block} is truncated: the file ends inside its payload")
        if self.codec == 1 and not final and payload[-4:] != TAIL:
            raise _bad_segment(at, "the payload does not end on a sync flush")
        try:
            if self.codec == 1:
                out = self.inflater.decompress(payload, raw_len + 1)
                unconsumed = len(self.inflater.unconsumed_tail) + len(self.inflater.unused_data)
            else:
                out = self.inflater.decompress(payload)
                unconsumed = len(self.inflater.unused_data)
            ended = self.inflater.eof
        except (zlib.error, zstandard.ZstdError) as exc:
            raise Fault("inflate", at, f"segment at offset {at} did not inflate: {str(exc).split(': ', 1)[-1]}") from None
        if len(out) > raw_len:
            raise _integrity(at, f"the segment inflates to more than {raw_len} bytes, its header says {raw_len}")
        if len(out) < raw_len:
            raise _integrity(at, f"the segment inflates to {len(out)} bytes, its header says {raw_len}")
        if unconsumed:
            raise _integrity(at, f"{unconsumed} of its {comp_len} compressed bytes are left over")
        if ended != final:
            raise _integrity(at, "the FINAL segment does not end the stream" if final
                             else "the stream ends in a segment that is not FINAL")
        got = blake3.blake3(out).digest()
        if got != digest:
            raise _integrity(at, f"header says {digest.hex()}, bytes hash to {got.hex()}", kind="segment_hash")
        self.raw += out
        self.next = at + SEG + comp_len
        self.finished = final

    def hexdigest(self, block: int, offset: int, length: int) -> str:
        """BLAKE3 of a body span, hashed where it lies in the block's raw bytes (no copy)."""
        if offset < 0 or length < 0 or offset + length > MAX_RAW:
            raise Fault("out_of_range", block, "body reference out of range for its block")
        end = offset + length
        try:
            if self.block != block:
                self._start(block)
            while len(self.raw) < end:
                if self.finished:
                    raise Fault("out_of_range", block, "body reference out of range for its block")
                self._segment()
        except Fault:
            self.block = None  # the inflater's state is unknown: the next read restarts
            raise
        with memoryview(self.raw) as raw:
            return blake3.blake3(raw[offset:end]).hexdigest()


def verify_ledger(db_path: os.PathLike[str] | str, bodies_path: os.PathLike[str] | str | None = None
                  ) -> tuple[int, list[tuple]]:
    """(verified_count, findings) with findings as the kernel's Finding fields, archive order."""
    db_path = Path(db_path)
    bodies_path = Path(bodies_path) if bodies_path is not None else db_path.with_suffix(".bodies")
    con = sqlite3.connect(db_path.resolve().as_uri() + "?mode=ro", uri=True)
    findings: list[tuple] = []
    verified = 0
    reader: Reader | None = None
    try:
        rows = con.execute(
            "SELECT id, event_id, source_table, direction, block_offset, body_offset, body_len, body_hash "
            "FROM event_body_blobs ORDER BY block_offset, body_offset, id")
        for rid, event_id, table, direction, block, offset, length, body_hash in rows:
            if reader is None:
                reader = Reader(bodies_path)
            who = f"{event_id} {table}/{direction}"
            try:
                got = reader.hexdigest(block, offset, length)
            except Fault as f:
                segment = f.at if f.kind in ("bad_segment", "segment_hash", "integrity", "inflate") else None
                # A segment's fault names the segment, and the block that holds it.
                text = f.text if segment is None or segment == block else f"block at offset {block}: {f.text}"
                findings.append((rid, event_id, table, direction, block, offset, length, segment, f.kind,
                                 f"{who}: {text}"))
                continue
            hexed = body_hash[7:] if isinstance(body_hash, str) else ""
            if (not isinstance(body_hash, str) or len(body_hash) != 71 or not body_hash.startswith("blake3:")
                    or any(c not in "0123456789abcdef" for c in hexed)):
                findings.append((rid, event_id, table, direction, block, offset, length, None, "bad_body_hash_text",
                                 f"{who}: the row's body_hash is not blake3: followed by 64 lower-case hex digits"))
                continue
            if got != hexed:
                findings.append((rid, event_id, table, direction, block, offset, length, None, "body_hash",
                                 f"{who}: archived body does not match the row that named it: index says "
                                 f"{body_hash}, bytes hash to blake3:{got}"))
                continue
            verified += 1
    finally:
        con.close()
        if reader is not None:
            reader.close()
    return verified, findings


if __name__ == "__main__":
    ok, problems = verify_ledger(sys.argv[1])
    for p in problems[:20]:
        print(p[-1])
    print(f"{ok}/{ok + len(problems)} bodies read back and match their hashes")
    sys.exit(1 if problems else 0)
