"""The on-disk format of ``session.bodies`` (archive format version 2).

This module gives the constants, the byte layout of the file, block and segment headers
(packing for the writer; parsing and bounds are the native reader's alone). The format constants are defined once, in
the native headers (``_native/archive/archive_format.h``), and read here from the native
archive module; tests/native/test_module_attributes.py checks them against the format's
reference facts. The exceptions live in ``capsem_core.errors``.
"""

from __future__ import annotations

import struct

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


def body_hash_text(digest: bytes) -> str:
    return BODY_HASH_PREFIX + digest.hex()


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
    "TARGET_BLOCK_BYTES",
    "ZSTD_LEVEL",
    "body_hash_text",
    "pack_block_header",
    "pack_file_header",
    "pack_segment_header",
]
