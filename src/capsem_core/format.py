"""The on-disk format of ``session.bodies`` (archive format version 2).

This module gives the constants, the byte layout of the file, block and segment headers
(packing for the writer, bounds for everyone). The format constants are defined once, in
the native headers (``_native/archive/archive_format.h``), and read here from the native
archive module; tests/native/test_module_attributes.py checks them against the format's
reference facts. The exceptions live in ``capsem_core.errors``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from capsem_core._native._archive import (
    BLOCK_HEADER_BYTES,
    BLOCK_MAGIC,
    BODY_HASH_PREFIX,
    CODEC_DEFLATE,
    # Codec 2 is this project's extension: one zstd stream per block, flushed (ZSTD_e_flush)
    # at each segment end and ended (ZSTD_e_end) by the FINAL segment. Capsem itself reads
    # only codec 1, so zstd ledgers are opt-in.
    CODEC_ZSTD,
    FILE_HEADER_BYTES,
    FILE_MAGIC,
    FORMAT_VERSION,
    MAX_BLOCK_RAW_BYTES,
    MAX_SEGMENT_EXPANSION,
    SEGMENT_FINAL,
    SEGMENT_HEADER_BYTES,
    SEGMENT_MAGIC,
    SYNC_FLUSH_TAIL,
)
from capsem_core.errors import BadBlockHeader, BadFileHeader, BadSegment, TruncatedBlock, UnsupportedCodec

CODEC_NAMES = {CODEC_DEFLATE: "deflate", CODEC_ZSTD: "zstd"}

TARGET_BLOCK_BYTES = 1 << 20
DEFLATE_LEVEL = 6
ZSTD_LEVEL = 3
MAX_BODY_BLOB_BYTES = 10 << 20
MIN_ARCHIVE_DEDUP_BYTES = 512
MAX_BLOCK_AGE_SECONDS = 3600

_FILE_HEADER = struct.Struct("<8sHHI")
_BLOCK_HEADER = struct.Struct("<4sBBH")
_SEGMENT_HEADER = struct.Struct("<4sB3sIII32s")


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    flags: int
    raw_start: int
    raw_len: int
    comp_len: int
    digest: bytes

    @property
    def final(self) -> bool:
        return bool(self.flags & SEGMENT_FINAL)


def pack_file_header() -> bytes:
    return _FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, 0, 0)


def pack_block_header(codec: int) -> bytes:
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown codec {codec}")
    return _BLOCK_HEADER.pack(BLOCK_MAGIC, codec, 0, 0)


def pack_segment_header(final: bool, raw_start: int, raw_len: int, comp_len: int, digest: bytes) -> bytes:
    if len(digest) != 32:
        raise ValueError("a segment digest is 32 bytes")
    flags = SEGMENT_FINAL if final else 0
    return _SEGMENT_HEADER.pack(SEGMENT_MAGIC, flags, b"\0\0\0", raw_start, raw_len, comp_len, digest)


def check_file_header(head: bytes, path: os.PathLike[str] | str | None = None) -> None:
    """Raise BadFileHeader unless ``head`` starts with a version-2 archive header."""
    if len(head) < FILE_HEADER_BYTES:
        raise BadFileHeader(f"bad archive header: {len(head)} bytes, shorter than the 16-byte file header", path)
    magic, version, _, _ = _FILE_HEADER.unpack_from(head)
    if magic != FILE_MAGIC:
        raise BadFileHeader(f"bad archive header: magic {magic!r} is not {FILE_MAGIC!r}", path)
    if version != FORMAT_VERSION:
        raise BadFileHeader(f"bad archive header: version {version}, this reader knows version {FORMAT_VERSION}", path)


def unpack_block_header(head: bytes, block_offset: int, path: os.PathLike[str] | str | None = None) -> int:
    """The codec of the block whose 8 header bytes are ``head``."""
    if len(head) < BLOCK_HEADER_BYTES or head[:4] != BLOCK_MAGIC:
        raise BadBlockHeader(f"bad block header at offset {block_offset}", path)
    _, codec, flags, reserved = _BLOCK_HEADER.unpack_from(head)
    if codec not in CODEC_NAMES or flags or reserved:
        raise UnsupportedCodec(f"block at offset {block_offset} uses unsupported codec {codec}", path)
    return int(codec)


def unpack_segment_header(head: bytes, at: int, expected_raw_start: int,
                          path: os.PathLike[str] | str | None = None) -> SegmentHeader:
    """Parse and bound one 52-byte segment header found at file offset ``at``."""
    if len(head) < SEGMENT_HEADER_BYTES:
        raise TruncatedBlock(f"segment at offset {at} is truncated: the file ends inside its header", path)
    magic, flags, reserved, raw_start, raw_len, comp_len, digest = _SEGMENT_HEADER.unpack_from(head)
    final = bool(flags & SEGMENT_FINAL)
    if (magic != SEGMENT_MAGIC or flags & ~SEGMENT_FINAL or reserved != b"\0\0\0"
            or raw_start != expected_raw_start
            or raw_start + raw_len > MAX_BLOCK_RAW_BYTES
            or comp_len > raw_len + MAX_SEGMENT_EXPANSION
            or (raw_len == 0 and not final)):
        raise BadSegment(
            f"bad segment at offset {at}: flags={flags:#x} raw_start={raw_start} raw_len={raw_len} "
            f"comp_len={comp_len} (expected raw_start {expected_raw_start})", path)
    return SegmentHeader(flags, raw_start, raw_len, comp_len, digest)


def body_hash_text(digest: bytes) -> str:
    return BODY_HASH_PREFIX + digest.hex()


def archive_path_for(db_path: os.PathLike[str] | str) -> Path:
    """``session.bodies`` beside ``session.db`` (the database path with suffix .bodies)."""
    return Path(db_path).with_suffix(".bodies")


__all__ = [
    "BLOCK_HEADER_BYTES",
    "BLOCK_MAGIC",
    "BODY_HASH_PREFIX",
    "CODEC_DEFLATE",
    "CODEC_NAMES",
    "CODEC_ZSTD",
    "DEFLATE_LEVEL",
    "FILE_HEADER_BYTES",
    "FILE_MAGIC",
    "FORMAT_VERSION",
    "MAX_BLOCK_AGE_SECONDS",
    "MAX_BLOCK_RAW_BYTES",
    "MAX_BODY_BLOB_BYTES",
    "MAX_SEGMENT_EXPANSION",
    "MIN_ARCHIVE_DEDUP_BYTES",
    "SEGMENT_FINAL",
    "SEGMENT_HEADER_BYTES",
    "SEGMENT_MAGIC",
    "SYNC_FLUSH_TAIL",
    "SegmentHeader",
    "TARGET_BLOCK_BYTES",
    "ZSTD_LEVEL",
    "archive_path_for",
    "body_hash_text",
    "check_file_header",
    "pack_block_header",
    "pack_file_header",
    "pack_segment_header",
    "unpack_block_header",
    "unpack_segment_header",
]
