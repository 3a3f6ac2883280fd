"""The doctor's --verify-bodies, as Capsem's Python tooling does it: the second baseline.

Capsem's ``check_session --verify-bodies`` lists every body's unique key in archive order,
then reads each one back through one shared ``SessionArchive``: a SQLite query per body by
``(event_id, source_table, direction)``, a pure-Python cursor over the block (one
``zlib.decompressobj(-15)`` per block, each segment inflated once while reads move forward),
BLAKE3 of every segment and of every body with the ``blake3`` package. This module does the
same, so ``bench/bench_check.py`` can put the native kernel side by side with it.

It is a benchmark baseline, not a reader of this project: deflate (codec 1) only, like the
doctor, and failures are collected as the doctor's ``"{event_id} {source_table}/{direction}:
{message}"`` lines.
"""

from __future__ import annotations

import sqlite3
import struct
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import blake3

FILE_MAGIC = b"CAPSEMBL"
BLOCK_MAGIC = b"BLK2"
SEGMENT_MAGIC = b"SGMT"
SEGMENT_HEADER = struct.Struct("<4sB3sIII32s")
BLOCK_HEADER = struct.Struct("<4sBBH")
MAX_BLOCK_RAW = 16 << 20
MAX_EXPANSION = 64 << 10
SYNC_TAIL = b"\x00\x00\xff\xff"


class DoctorError(AssertionError):
    """What the doctor's reader raises for anything wrong in the archive."""


@dataclass
class _Cursor:
    block_offset: int
    inflater: "zlib._Decompress"
    raw: bytearray = field(default_factory=bytearray)
    next_segment: int = 0
    finished: bool = False


class DoctorArchive:
    """The doctor's ``SessionArchive``: one query per body, the archive reopened to inflate.

    Like the doctor, it opens session.db read-only for every body (``reopen_db=True``, the
    default); ``reopen_db=False`` keeps one connection, a faster variant of the same approach.
    """

    def __init__(self, db_path: Path, *, reopen_db: bool = True) -> None:
        self.db_path = Path(db_path)
        self.archive = self.db_path.with_suffix(".bodies")
        with open(self.archive, "rb") as f:
            head = f.read(16)
        if len(head) != 16 or head[:8] != FILE_MAGIC or struct.unpack_from("<H", head, 8)[0] != 2:
            raise DoctorError(f"{self.archive} is not a capsem body archive")
        self._uri = "file:" + urllib.parse.quote(str(self.db_path.absolute())) + "?mode=ro"
        self._reopen_db = reopen_db
        self._db = None if reopen_db else sqlite3.connect(self._uri, uri=True)
        self._cursor: _Cursor | None = None
        self.segments_inflated = 0

    def close(self) -> None:
        if self._db is not None:
            self._db.close()

    def _row(self, key: tuple[str, str, str]) -> tuple | None:
        sql = ("SELECT block_offset, body_offset, body_len, body_hash FROM event_body_blobs "
               "WHERE event_id = ? AND source_table = ? AND direction = ?")
        if self._db is not None:
            return self._db.execute(sql, key).fetchone()
        conn = sqlite3.connect(self._uri, uri=True)
        try:
            return conn.execute(sql, key).fetchone()
        finally:
            conn.close()

    def read(self, event_id: str, source_table: str, direction: str) -> bytes | None:
        row = self._row((event_id, source_table, direction))
        if row is None:
            return None
        block_offset, offset, length, body_hash = row
        try:
            data = self._span(block_offset, offset, length)
        except DoctorError:
            self._cursor = None
            raise
        got = "blake3:" + blake3.blake3(data).hexdigest()
        if got != body_hash:
            raise DoctorError(f"archived body of {event_id} does not match the row that named it: "
                              f"index says {body_hash}, bytes hash to {got}")
        return data

    def _span(self, block_offset: int, offset: int, length: int) -> bytes:
        end = offset + length
        if end > MAX_BLOCK_RAW:
            raise DoctorError(f"a span ending at {end} is past any block's bounds")
        cursor = self._cursor
        if cursor is not None and cursor.block_offset == block_offset and len(cursor.raw) >= end:
            return bytes(cursor.raw[offset:end])
        with open(self.archive, "rb") as f:
            if cursor is None or cursor.block_offset != block_offset:
                f.seek(block_offset)
                head = f.read(8)
                if len(head) != 8 or head[:4] != BLOCK_MAGIC:
                    raise DoctorError(f"no block at offset {block_offset} of {self.archive}")
                _, codec, flags, reserved = BLOCK_HEADER.unpack(head)
                if codec != 1 or flags or reserved:
                    raise DoctorError(f"block at {block_offset} of {self.archive} uses codec {codec}, "
                                      "which this reader does not know")
                cursor = _Cursor(block_offset, zlib.decompressobj(-15), next_segment=block_offset + 8)
                self._cursor = cursor
            while len(cursor.raw) < end:
                if cursor.finished:
                    raise DoctorError(f"span ending at {end} runs past the end of block {block_offset}")
                self._inflate_segment(f, cursor)
        return bytes(cursor.raw[offset:end])

    def _inflate_segment(self, f, cursor: _Cursor) -> None:
        at = cursor.next_segment
        where = f"segment at {at} of {self.archive}"
        f.seek(at)
        head = f.read(SEGMENT_HEADER.size)
        if len(head) != SEGMENT_HEADER.size:
            raise DoctorError(f"{where} is truncated: the block was never written this far")
        magic, flags, reserved, raw_start, raw_len, comp_len, digest = SEGMENT_HEADER.unpack(head)
        final = bool(flags & 1)
        if (magic != SEGMENT_MAGIC or flags & ~1 or reserved != b"\0\0\0" or raw_start != len(cursor.raw)
                or raw_start + raw_len > MAX_BLOCK_RAW or comp_len > raw_len + MAX_EXPANSION
                or (raw_len == 0 and not final)):
            raise DoctorError(f"{where} declares flags={flags:#x} raw_start={raw_start} raw_len={raw_len} "
                              f"comp_len={comp_len}, outside the archive's bounds")
        payload = f.read(comp_len)
        if len(payload) != comp_len:
            raise DoctorError(f"{where} is truncated")
        if not final and not payload.endswith(SYNC_TAIL):
            raise DoctorError(f"{where} does not end on a sync flush")
        try:
            out = cursor.inflater.decompress(payload, raw_len + 1)
        except zlib.error as err:
            raise DoctorError(f"{where} did not inflate: {err}") from None
        inflater = cursor.inflater
        if (len(out) != raw_len or inflater.unconsumed_tail or inflater.eof != final
                or (final and inflater.unused_data)):
            raise DoctorError(f"{where} did not inflate to the {raw_len} bytes it declares")
        got = blake3.blake3(out).digest()
        if got != digest:
            raise DoctorError(f"{where} does not match its own hash: header says {digest.hex()}, "
                              f"bytes hash to {got.hex()}")
        self.segments_inflated += 1
        cursor.raw += out
        cursor.next_segment = at + SEGMENT_HEADER.size + comp_len
        cursor.finished = final


@dataclass
class DoctorVerifyResult:
    bodies: int
    verified: int
    failures: list[str]
    seconds: float


def doctor_verify_bodies(db_path: Path, limit: int | None = None, *, reopen_db: bool = True) -> DoctorVerifyResult:
    """Read every body (or the first ``limit`` in archive order) back the doctor's way."""
    db_path = Path(db_path)
    start = time.perf_counter()
    conn = sqlite3.connect("file:" + urllib.parse.quote(str(db_path.absolute())) + "?mode=ro", uri=True)
    try:
        sql = ("SELECT event_id, source_table, direction FROM event_body_blobs "
               "ORDER BY block_offset, body_offset")
        keys = conn.execute(sql + (" LIMIT ?" if limit is not None else ""),
                            (limit,) if limit is not None else ()).fetchall()
    finally:
        conn.close()
    archive = DoctorArchive(db_path, reopen_db=reopen_db)
    failures: list[str] = []
    try:
        for event_id, source_table, direction in keys:
            try:
                archive.read(event_id, source_table, direction)
            except DoctorError as err:
                failures.append(f"{event_id} {source_table}/{direction}: {err}")
    finally:
        archive.close()
    return DoctorVerifyResult(len(keys), len(keys) - len(failures), failures, time.perf_counter() - start)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="verify bodies the doctor's way (a benchmark baseline)")
    parser.add_argument("db", type=Path)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--one-connection", action="store_true", help="keep one session.db connection")
    args = parser.parse_args()
    result = doctor_verify_bodies(args.db, args.limit, reopen_db=not args.one_connection)
    print(f"{result.verified}/{result.bodies} bodies verified in {result.seconds:.3f} s "
          f"({result.bodies / max(result.seconds, 1e-9):,.0f} bodies/s); {len(result.failures)} failures")
    for line in result.failures[:5]:
        print("  " + line)
