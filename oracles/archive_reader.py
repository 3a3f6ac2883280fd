"""A deliberately simple, independent reader of ``session.bodies`` for tests to check against.

It shares no code with ``capsem_core``: it parses the bytes with ``struct`` itself, inflates
with ``zlib.decompressobj(-15)`` (codec 1) or ``zstandard`` (codec 2) and hashes with the
``blake3`` package, following Capsem's reader protocol: one cursor per block, segments
chained by ``raw_start``, the sync tail of non-final deflate payloads, ``raw_len + 1`` bytes
of inflate slack, stream end iff FINAL, each segment's BLAKE3, then the body hash of the
index row. Every failure is an ``OracleError`` (an AssertionError) naming what is wrong.
Speed is not a goal; obviousness is.
"""

from __future__ import annotations

import sqlite3
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import zstandard
from blake3 import blake3

FILE_HEADER = b"CAPSEMBL\x02\x00"
BLOCK_MAGIC = b"BLK2"
SEGMENT_MAGIC = b"SGMT"
MAX_BLOCK_RAW = 16 * 1024 * 1024
MAX_EXPANSION = 64 * 1024
SYNC_TAIL = b"\x00\x00\xff\xff"
SEGMENT = struct.Struct("<4sB3sIII32s")
# zstd input is fed in slices this small so one call can never produce more than a few MiB
# (a zstd block holds at most 128 KiB and takes at least 4 bytes), whatever the payload says.
ZSTD_FEED = 256


class OracleError(AssertionError):
    pass


def b3(data: bytes) -> bytes:
    return blake3(data).digest()


@dataclass
class Segment:
    at: int
    final: bool
    raw_start: int
    raw_len: int
    comp_len: int
    digest: bytes

    @property
    def end(self) -> int:
        return self.at + 52 + self.comp_len


def parse_segment(head: bytes, at: int, expected_start: int) -> Segment:
    if len(head) < 52:
        raise OracleError(f"segment at {at} is truncated: the block was never written this far")
    magic, flags, reserved, raw_start, raw_len, comp_len, digest = SEGMENT.unpack(head[:52])
    final = flags == 1
    if (magic != SEGMENT_MAGIC or flags not in (0, 1) or reserved != b"\0\0\0" or raw_start != expected_start
            or raw_start + raw_len > MAX_BLOCK_RAW or comp_len > raw_len + MAX_EXPANSION
            or (raw_len == 0 and not final)):
        raise OracleError(f"segment at {at} declares flags={flags:#x} raw_start={raw_start} raw_len={raw_len} "
                          f"comp_len={comp_len}, outside the archive's bounds")
    return Segment(at, final, raw_start, raw_len, comp_len, digest)


class _Inflater:
    """One decompression stream per block, fed segment by segment."""

    def __init__(self, codec: int):
        self.codec = codec
        if codec == 1:
            self.z = zlib.decompressobj(-15)
        else:
            self.z = zstandard.ZstdDecompressor(max_window_size=1 << 24).decompressobj()
        self.ended = False

    def inflate(self, payload: bytes, raw_len: int, where: str) -> tuple[bytes, bool]:
        """(bytes produced, whether the stream ended) with at most raw_len + 1 produced."""
        if self.codec == 1:
            try:
                out = self.z.decompress(payload, raw_len + 1)
            except zlib.error as e:
                raise OracleError(f"{where} did not inflate: {e}") from e
            if self.z.unconsumed_tail:
                raise OracleError(f"{where} did not inflate to the {raw_len} bytes it declares")
            ended = self.z.eof
            if ended and self.z.unused_data:
                raise OracleError(f"{where} has bytes after its stream end")
            return out, ended
        out = bytearray()
        for i in range(0, len(payload), ZSTD_FEED):
            if self.ended:
                raise OracleError(f"{where} has bytes after its stream end")
            try:
                out += self.z.decompress(payload[i:i + ZSTD_FEED])
            except zstandard.ZstdError as e:
                raise OracleError(f"{where} did not inflate: {e}") from e
            if len(out) > raw_len:
                raise OracleError(f"{where} did not inflate to the {raw_len} bytes it declares")
            self.ended = self.z.eof
        if self.ended and self.z.unused_data:
            raise OracleError(f"{where} has bytes after its stream end")
        return bytes(out), self.ended


@dataclass
class _Cursor:
    block_offset: int
    inflater: _Inflater
    raw: bytearray = field(default_factory=bytearray)
    next_at: int = 0
    finished: bool = False


class ArchiveOracle:
    """Reads spans ``(block_offset, offset, len)`` of one archive file, Capsem's way."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.data = self.path.read_bytes()
        if len(self.data) < 16 or self.data[:10] != FILE_HEADER:
            raise OracleError(f"{self.path} is not a capsem body archive")
        self.cursor: _Cursor | None = None
        self.blocks_started = 0
        self.segments_inflated = 0

    def _block_codec(self, block_offset: int) -> int:
        head = self.data[block_offset:block_offset + 8]
        if len(head) != 8 or head[:4] != BLOCK_MAGIC:
            raise OracleError(f"no block at offset {block_offset} of {self.path}")
        codec, flags, reserved = head[4], head[5], head[6:8]
        if codec not in (1, 2) or flags or reserved != b"\0\0":
            raise OracleError(f"block at {block_offset} of {self.path} uses codec {codec}, "
                              "which this reader does not know")
        return codec

    def read(self, block_offset: int, offset: int, length: int) -> bytes:
        end = offset + length
        if offset < 0 or length < 0 or end > MAX_BLOCK_RAW:
            raise OracleError(f"a span ending at {end} is past any block's bounds")
        try:
            return self._read(block_offset, offset, end)
        except OracleError:
            self.cursor = None
            raise

    def _read(self, block_offset: int, offset: int, end: int) -> bytes:
        c = self.cursor
        if c is None or c.block_offset != block_offset:
            codec = self._block_codec(block_offset)
            c = self.cursor = _Cursor(block_offset, _Inflater(codec), next_at=block_offset + 8)
            self.blocks_started += 1
        while len(c.raw) < end:
            if c.finished:
                raise OracleError(f"span ending at {end} runs past the end of block {block_offset}")
            at = c.next_at
            where = f"segment at {at} of {self.path}"
            seg = parse_segment(self.data[at:at + 52], at, len(c.raw))
            payload = self.data[at + 52:at + 52 + seg.comp_len]
            if len(payload) != seg.comp_len:
                raise OracleError(f"{where} is truncated")
            if c.inflater.codec == 1 and not seg.final and not payload.endswith(SYNC_TAIL):
                raise OracleError(f"{where} does not end on a sync flush")
            out, ended = c.inflater.inflate(payload, seg.raw_len, where)
            if len(out) != seg.raw_len or ended != seg.final:
                raise OracleError(f"{where} did not inflate to the {seg.raw_len} bytes it declares")
            got = b3(out)
            if got != seg.digest:
                raise OracleError(f"{where} does not match its own hash: header says {seg.digest.hex()}, "
                                  f"bytes hash to {got.hex()}")
            c.raw += out
            c.next_at = seg.end
            c.finished = seg.final
            self.segments_inflated += 1
        return bytes(c.raw[offset:end])


def walk_block(data: bytes, block_offset: int) -> list[Segment]:
    """Every complete segment of the block at ``block_offset`` in ``data`` (headers only)."""
    head = data[block_offset:block_offset + 8]
    if len(head) != 8 or head[:4] != BLOCK_MAGIC:
        raise OracleError(f"no block at offset {block_offset}")
    segments: list[Segment] = []
    at, raw = block_offset + 8, 0
    while at + 52 <= len(data):
        try:
            seg = parse_segment(data[at:at + 52], at, raw)
        except OracleError:
            break
        if seg.end > len(data):
            break
        segments.append(seg)
        raw += seg.raw_len
        at = seg.end
        if seg.final:
            break
    return segments


def segment_boundaries(data: bytes, block_offset: int) -> set[int]:
    """Extents (from the block offset) a committed ``disk_len`` may take: each segment end."""
    return {seg.end - block_offset for seg in walk_block(data, block_offset)}


@dataclass
class IndexedBody:
    event_id: str
    source_table: str
    direction: str
    body_hash: str
    block_offset: int
    body_offset: int
    body_len: int
    data: bytes


def archived_bodies(db_path: str | Path, where: str = "", args: tuple = ()) -> list[IndexedBody]:
    """Every body the index names (or those matching the SQL ``where``), in archive order, hash-checked."""
    db_path = Path(db_path)
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT event_id, source_table, direction, body_hash, block_offset, body_offset, body_len "
            f"FROM event_body_blobs {'WHERE ' + where if where else ''} ORDER BY block_offset, body_offset",
            args).fetchall()
    finally:
        conn.close()
    if not rows:
        return []
    oracle = ArchiveOracle(db_path.with_suffix(".bodies"))
    out = []
    for event_id, table, direction, body_hash, block_offset, body_offset, body_len in rows:
        data = oracle.read(block_offset, body_offset, body_len)
        got = "blake3:" + b3(data).hex()
        if got != body_hash:
            raise OracleError(f"archived body of {event_id} does not match the row that named it: "
                              f"index says {body_hash}, bytes hash to {got}")
        out.append(IndexedBody(event_id, table, direction, body_hash, block_offset, body_offset, body_len, data))
    return out


def check_index_extents(db_path: str | Path) -> None:
    """Every ``body_blocks`` extent lies in the file and ends exactly on a segment boundary."""
    db_path = Path(db_path)
    data = db_path.with_suffix(".bodies").read_bytes() if db_path.with_suffix(".bodies").exists() else b""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        blocks = conn.execute("SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset").fetchall()
        overruns = conn.execute(
            "SELECT COUNT(*) FROM event_body_blobs b JOIN body_blocks k USING (block_offset) "
            "WHERE b.body_offset + b.body_len > k.raw_len").fetchone()[0]
        dangling = conn.execute(
            "SELECT COUNT(*) FROM event_body_blobs WHERE block_offset NOT IN (SELECT block_offset FROM body_blocks)"
        ).fetchone()[0]
    finally:
        conn.close()
    if overruns or dangling:
        raise OracleError(f"{overruns} rows run past their block, {dangling} name no block")
    for block_offset, raw_len, disk_len in blocks:
        if block_offset < 16 or block_offset + disk_len > len(data):
            raise OracleError(f"block {block_offset}+{disk_len} is not inside the {len(data)}-byte archive")
        segments = walk_block(data, block_offset)
        ends = {seg.end - block_offset: sum(s.raw_len for s in segments[:i + 1])
                for i, seg in enumerate(segments)}
        if disk_len not in ends:
            raise OracleError(f"block {block_offset} extent {disk_len} does not end on a segment boundary")
        if ends[disk_len] != raw_len:
            raise OracleError(f"block {block_offset} records raw_len {raw_len}, its segments hold {ends[disk_len]}")


def read_body(db_path: str | Path, event_id: str, source_table: str, direction: str) -> bytes | None:
    """One body by its index key, checked against its hash; None if no row names it."""
    db_path = Path(db_path)
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT block_offset, body_offset, body_len, body_hash FROM event_body_blobs "
            "WHERE event_id = ? AND source_table = ? AND direction = ?", (event_id, source_table, direction)).fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    block_offset, body_offset, body_len, body_hash = row
    data = ArchiveOracle(db_path.with_suffix(".bodies")).read(block_offset, body_offset, body_len)
    got = "blake3:" + b3(data).hex()
    if got != body_hash:
        raise OracleError(f"archived body of {event_id} does not match the row that named it: "
                          f"index says {body_hash}, bytes hash to {got}")
    return data
