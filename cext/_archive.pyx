# cython: language_level=3, boundscheck=False, wraparound=False
"""Native session.bodies access: header parsing with every length bounded."""

from libc.stdint cimport uint8_t, uint32_t

from archive_format cimport *

from capsem_core import format as _fmt

LIMITS = {
    "file_header_bytes": CAPSEM_FILE_HEADER_BYTES,
    "block_header_bytes": CAPSEM_BLOCK_HEADER_BYTES,
    "segment_header_bytes": CAPSEM_SEGMENT_HEADER_BYTES,
    "max_block_raw_bytes": CAPSEM_MAX_BLOCK_RAW_BYTES,
    "max_segment_expansion": CAPSEM_MAX_SEGMENT_EXPANSION,
}


def check_file_header(const uint8_t[::1] head not None, path=None):
    """Raise BadFileHeader unless head begins with a CAPSEMBL version-2 header."""
    if capsem_parse_file_header(&head[0] if head.shape[0] else NULL, head.shape[0]) != CAPSEM_OK:
        raise _fmt.BadFileHeader("bad archive header: not a CAPSEMBL version 2 file", path)


def parse_block_header(const uint8_t[::1] head not None, unsigned long long block_offset, path=None):
    """The codec byte of a valid block header, else BadBlockHeader / UnsupportedCodec."""
    cdef uint8_t codec = 0
    cdef capsem_status st = capsem_parse_block_header(&head[0] if head.shape[0] else NULL, head.shape[0], &codec)
    if st == CAPSEM_E_BLOCK_HEADER:
        raise _fmt.BadBlockHeader(f"bad block header at offset {block_offset}", path)
    if st == CAPSEM_E_CODEC:
        raise _fmt.UnsupportedCodec(f"block at offset {block_offset} uses unsupported codec {codec}", path)
    return codec


def parse_segment_header(const uint8_t[::1] head not None, unsigned long long at,
                         uint32_t expected_raw_start, path=None):
    """(flags, raw_start, raw_len, comp_len, digest) of a bounded segment header."""
    cdef capsem_segment_header h
    cdef capsem_status st = capsem_parse_segment_header(&head[0] if head.shape[0] else NULL, head.shape[0],
                                                        expected_raw_start, &h)
    if st == CAPSEM_E_TRUNCATED:
        raise _fmt.TruncatedBlock(f"segment at offset {at} is truncated: the file ends inside its header", path)
    if st != CAPSEM_OK:
        raise _fmt.BadSegment(f"bad segment at offset {at}", path)
    return h.flags, h.raw_start, h.raw_len, h.comp_len, bytes(h.hash[:32])


def has_sync_tail(const uint8_t[::1] payload not None):
    return bool(capsem_has_sync_tail(&payload[0] if payload.shape[0] else NULL, payload.shape[0]))
