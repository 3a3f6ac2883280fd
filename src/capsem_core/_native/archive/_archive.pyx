# cython: language_level=3, boundscheck=False, wraparound=False
"""Native session.bodies access: header parsing with every length bounded, the block-cursor
reader (ArchiveReader), extent walking, and the verify-bodies kernel.

The reader follows Capsem's read protocol (one cursor: one block, one inflate stream, the
inflated prefix in a reusable buffer of at most 16 MiB), so a forward walk through a block
inflates each segment once. Errors are worded, classified and raised through the status
table (capsem_core._native._errors), with the archive's path. The format constants are
module attributes, defined from archive_format.h. This module runs no SQL and imports
nothing from the Python layer: what to verify, and how to label it, is the caller's.
"""

import collections
import os
from pathlib import Path

import numpy as np
cimport numpy as cnp
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy

from archive_c cimport *
from archive_format cimport *
from status cimport *

from capsem_core._native import _errors

cnp.import_array()

# Reads of the session.bodies map are guarded against SIGBUS (a file cut short underneath;
# macOS may raise SIGSEGV inside the map for it, which the guard takes too).
if capsem_guard_install() != 0:
    raise ImportError("capsem_core._native._archive could not install its SIGBUS/SIGSEGV guard")

# The format, as the C headers define it (the Python format module reads these).
# (The casts keep clang from reading the generated `"..." + 0` as a string concatenation.)
FILE_MAGIC = (<const char *>CAPSEM_FILE_MAGIC)[:8]
BLOCK_MAGIC = (<const char *>CAPSEM_BLOCK_MAGIC)[:4]
SEGMENT_MAGIC = (<const char *>CAPSEM_SEGMENT_MAGIC)[:4]
SYNC_FLUSH_TAIL = (<const char *>CAPSEM_SYNC_FLUSH_TAIL)[:4]
FORMAT_VERSION = CAPSEM_FORMAT_VERSION
FILE_HEADER_BYTES = CAPSEM_FILE_HEADER_BYTES
BLOCK_HEADER_BYTES = CAPSEM_BLOCK_HEADER_BYTES
SEGMENT_HEADER_BYTES = CAPSEM_SEGMENT_HEADER_BYTES
SEGMENT_FINAL = CAPSEM_SEGMENT_FINAL
MAX_BLOCK_RAW_BYTES = CAPSEM_MAX_BLOCK_RAW_BYTES
MAX_SEGMENT_EXPANSION = CAPSEM_MAX_SEGMENT_EXPANSION
CODEC_DEFLATE = CAPSEM_CODEC_DEFLATE
CODEC_ZSTD = CAPSEM_CODEC_ZSTD
BODY_HASH_PREFIX = CAPSEM_BODY_HASH_PREFIX.decode()

LIMITS = {
    "file_header_bytes": CAPSEM_FILE_HEADER_BYTES,
    "block_header_bytes": CAPSEM_BLOCK_HEADER_BYTES,
    "segment_header_bytes": CAPSEM_SEGMENT_HEADER_BYTES,
    "max_block_raw_bytes": CAPSEM_MAX_BLOCK_RAW_BYTES,
    "max_segment_expansion": CAPSEM_MAX_SEGMENT_EXPANSION,
}

cdef extern from "blake3.h" nogil:
    void capsem_blake3_hash(const void *input, size_t input_len, uint8_t *out)

cdef extern from "body_hash.h" nogil:
    const char *CAPSEM_BODY_HASH_PREFIX
    int capsem_parse_body_hash(const unsigned char *text, int len, uint8_t *out)

cdef uint64_t MAX_RAW = CAPSEM_MAX_BLOCK_RAW_BYTES


def check_file_header(const uint8_t[::1] head not None, path=None):
    """Raise BadFileHeader unless head begins with a CAPSEMBL version-2 header."""
    if capsem_parse_file_header(&head[0] if head.shape[0] else NULL, head.shape[0]) != CAPSEM_OK:
        raise _errors.error(CAPSEM_E_FILE_HEADER, path)


def parse_block_header(const uint8_t[::1] head not None, unsigned long long block_offset, path=None):
    """The codec byte of a valid block header, else BadBlockHeader / UnsupportedCodec."""
    cdef uint8_t codec = 0
    cdef capsem_status st = capsem_parse_block_header(&head[0] if head.shape[0] else NULL, head.shape[0], &codec)
    if st != CAPSEM_OK:
        raise _errors.error(st, path, at=block_offset, codec=codec)
    return codec


def parse_segment_header(const uint8_t[::1] head not None, unsigned long long at,
                         uint32_t expected_raw_start, path=None):
    """(flags, raw_start, raw_len, comp_len, digest) of a bounded segment header."""
    cdef capsem_segment_header h
    cdef capsem_status st = capsem_parse_segment_header(&head[0] if head.shape[0] else NULL, head.shape[0],
                                                        expected_raw_start, &h)
    if st == CAPSEM_E_TRUNCATED:
        raise _errors.error(CAPSEM_R_SEGMENT_HEADER_SHORT, path, at=at)
    if st != CAPSEM_OK:
        raise _errors.error(st, path, at=at)
    return h.flags, h.raw_start, h.raw_len, h.comp_len, bytes(h.hash[:32])


# --- errors -----------------------------------------------------------------------------

ArchiveFault = collections.namedtuple("ArchiveFault", "code kind at text")
ArchiveFault.__doc__ = ("One archive error of the verify kernel: its status-table code and kind, the offset "
                        "it names (a segment's where the table says so, else a block's) and its text.")


cdef object _detail(const capsem_error *e):
    """The C detail text, or None when there is none."""
    return (<const char *>e.detail).decode("utf-8", "replace") if e.detail[0] else None


cdef object _fault(const capsem_error *e):
    code = capsem_report_code(e.status, e.hash_mismatch)
    return ArchiveFault(code, _errors.kind(code), e.at, _errors.message(code, at=e.at, codec=e.codec, detail=_detail(e)))


cdef object _raise_error(const capsem_error *e, path, block=None):
    raise _errors.error(capsem_report_code(e.status, e.hash_mismatch), path, at=e.at, codec=e.codec,
                        detail=_detail(e), block=block)


cdef _open_archive(capsem_archive_file *f, path, bytes cpath):
    cdef int err = 0
    cdef capsem_open_status st
    cdef const char *p = cpath
    with nogil:
        st = capsem_file_open(f, p, &err)
    if st == CAPSEM_OPEN_SYMLINK:
        raise _errors.error(CAPSEM_R_SYMLINK, path)
    if st == CAPSEM_OPEN_NOT_REGULAR:
        raise _errors.error(CAPSEM_R_NOT_REGULAR, path)
    if st != CAPSEM_OPEN_OK:
        raise _errors.error(CAPSEM_R_IO, path, detail=os.strerror(err))
    if capsem_parse_file_header(f.map, f.size) != CAPSEM_OK:
        size = f.size
        capsem_file_close(f)
        if size < CAPSEM_FILE_HEADER_BYTES:
            raise _errors.error(CAPSEM_R_FILE_HEADER_SHORT, path, size=size)
        raise _errors.error(CAPSEM_E_FILE_HEADER, path)


def _span_end(offset, length):
    """end of a (u32, u32) span, or RefOutOfRange (before any I/O, as Capsem does)."""
    if offset < 0 or length < 0 or offset + length > MAX_RAW:
        return None
    return offset + length


# The rest of the module, one file per concept.
include "archive_reader.pxi"
include "archive_walk.pxi"
include "archive_batch.pxi"
include "archive_extents.pxi"
include "archive_kernel.pxi"
include "archive_ahead.pxi"
