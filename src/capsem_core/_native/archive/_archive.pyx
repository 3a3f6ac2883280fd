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
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
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


def has_sync_tail(const uint8_t[::1] payload not None):
    return bool(capsem_has_sync_tail(&payload[0] if payload.shape[0] else NULL, payload.shape[0]))


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


# --- the reader ---------------------------------------------------------------------------

cdef class ArchiveReader:
    """A reader of one session.bodies file with Capsem's single block cursor.

    Not shareable between threads (like Capsem's reader): one reader per thread. The file
    is memory-mapped; the map is refreshed when a read needs bytes past it, so a reader
    follows a writer appending to the same open block.
    """
    cdef capsem_archive_file f
    cdef capsem_cursor *c
    cdef readonly object path
    cdef bytes cpath
    cdef bint busy

    def __cinit__(self, path):
        self.c = NULL
        self.f.fd = -1
        self.f.map = NULL
        self.f.size = 0
        self.busy = False
        self.path = Path(os.fspath(path))
        self.cpath = os.fsencode(self.path)
        _open_archive(&self.f, self.path, self.cpath)
        self.c = capsem_cursor_new()
        if self.c == NULL:
            capsem_file_close(&self.f)
            raise MemoryError()

    def __dealloc__(self):
        if self.c != NULL:
            capsem_cursor_free(self.c)
            self.c = NULL
        capsem_file_close(&self.f)

    def close(self):
        if self.c != NULL:
            capsem_cursor_free(self.c)
            self.c = NULL
        capsem_file_close(&self.f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    cdef _check_open(self):
        if self.c == NULL:
            raise ValueError("the archive reader is closed")
        if self.busy:
            raise RuntimeError("an ArchiveReader is used by one thread at a time")

    cdef bint _refresh(self) except -1:
        """Re-map after growth; True when the mapped size changed."""
        cdef uint64_t before = self.f.size
        cdef int e = capsem_file_refresh(&self.f)
        if e:
            raise _errors.error(CAPSEM_R_IO, self.path, detail=os.strerror(e))
        return self.f.size != before

    cdef _reach(self, uint64_t block_offset, uint64_t end):
        cdef capsem_error e
        cdef capsem_status st
        cdef int tries = 0
        self.busy = True
        try:
            while True:
                with nogil:
                    st = capsem_guarded_reach(self.c, self.f.map, self.f.size, block_offset, end, &e)
                if st == CAPSEM_OK:
                    return
                # The view may be stale: a writer appended since it was mapped.
                if (st == CAPSEM_E_TRUNCATED or st == CAPSEM_E_BLOCK_HEADER) and tries < 8 and self._refresh():
                    tries += 1
                    continue
                if st == CAPSEM_E_TRUNCATED:
                    capsem_cursor_discard(self.c)
                _raise_error(&e, self.path, block_offset)
        finally:
            self.busy = False

    def read(self, block_offset, offset, length):
        """The raw bytes [offset, offset + length) of the block at block_offset."""
        self._check_open()
        end = _span_end(offset, length)
        if end is None:
            raise _errors.error(CAPSEM_E_RANGE, self.path, at=block_offset)
        if block_offset < 0 or block_offset >= 1 << 64:
            raise _errors.error(CAPSEM_E_BLOCK_HEADER, self.path, at=block_offset)
        self._reach(block_offset, end)
        return PyBytes_FromStringAndSize(<const char *>capsem_cursor_raw(self.c) + <size_t>offset, <Py_ssize_t>length)

    def read_verified(self, block_offset, offset, length, expected, subject=None):
        """read(), checked: BodyHashMismatch unless BLAKE3 of the bytes is ``expected``.

        ``expected`` is the 32-byte digest, or the row's body_hash text ("blake3:" + 64
        lower-case hex digits), parsed here once; a text that does not parse matches no
        bytes (after the read, whose archive errors come first). ``subject`` (the body's
        event id) is named in the mismatch message when given."""
        cdef uint8_t want[32]
        cdef uint8_t got[32]
        cdef const uint8_t[::1] w
        cdef bytes text
        cdef bint parsed
        if isinstance(expected, str):
            text = expected.encode("utf-8", "surrogateescape")
            parsed = capsem_parse_body_hash(text, len(text), want) == 1
            want_text = expected
        else:
            w = expected
            if w.shape[0] != 32:
                raise ValueError("a body digest is 32 bytes")
            memcpy(want, &w[0], 32)
            parsed = True
            want_text = None
        data = self.read(block_offset, offset, length)
        cdef const uint8_t[::1] d = data
        with nogil:
            capsem_blake3_hash(&d[0] if d.shape[0] else NULL, d.shape[0], got)
        if not parsed or memcmp(got, want, 32) != 0:
            if want_text is None:
                want_text = BODY_HASH_PREFIX + bytes(want[:32]).hex()
            raise _errors.error(CAPSEM_V_BODY_HASH, self.path, detail=None if subject is None else str(subject),
                                want=want_text, got=BODY_HASH_PREFIX + bytes(got[:32]).hex())
        return data

    def walk_extent(self, block_offset, disk_len):
        """(codec, raw_len, segments, final) of the committed extent, headers only (no inflate).

        BadSegment when the extent does not end exactly on a segment boundary, a segment
        follows a FINAL one or the headers do not chain; TruncatedBlock when the file ends
        inside the extent; BadBlockHeader / UnsupportedCodec for the block header."""
        self._check_open()
        if block_offset < 0 or block_offset >= 1 << 64:
            raise _errors.error(CAPSEM_E_BLOCK_HEADER, self.path, at=block_offset)
        if disk_len < 0 or disk_len >= 1 << 64:
            raise _errors.error(CAPSEM_R_EXTENT_LENGTH, self.path, at=block_offset, size=disk_len)
        cdef capsem_extent ext
        cdef capsem_error e
        cdef capsem_status st
        cdef uint64_t b = block_offset, d = disk_len
        if b + d > self.f.size or b + d < b:
            self._refresh()
        with nogil:
            st = capsem_guarded_walk_extent(self.f.map, self.f.size, b, d, &ext, &e)
        if st != CAPSEM_OK:
            _raise_error(&e, self.path)
        return ext.codec, ext.raw_len, ext.segments, bool(ext.final)

    def file_was_replaced(self):
        """True when the path no longer names the file opened (renamed over, removed)."""
        return bool(capsem_file_replaced(&self.f, self.cpath))

    @property
    def size(self):
        """The file's current size (the map is refreshed to it)."""
        if self.c == NULL:
            raise ValueError("the archive reader is closed")
        self._refresh()
        return self.f.size

    @property
    def blocks_inflated(self):
        return capsem_cursor_blocks_inflated(self.c) if self.c != NULL else 0

    @property
    def segments_inflated(self):
        return capsem_cursor_segments_inflated(self.c) if self.c != NULL else 0

    @property
    def identity(self):
        """(st_dev, st_ino) recorded at open."""
        return self.f.dev, self.f.ino


# --- the verify kernel ----------------------------------------------------------------------

VerifyOutcome = collections.namedtuple("VerifyOutcome", "status err_index got errors")
VerifyOutcome.__doc__ = ("Raw kernel result: per-body status (0 = verified), index into errors (-1 none), "
                         "the digest the bytes hashed to (body-hash mismatches only), and the list of "
                         "ArchiveFault archive errors.")


cdef object _i64(a):
    return np.ascontiguousarray(a, dtype=np.int64)


def verify_bodies(bodies_path, blocks, bodies, int threads=0, progress=None, bint use_libdeflate=True):
    """Read every body of `bodies` (scan_bodies arrays, archive order) back through its segment
    hashes and its own hash. `blocks` are scan_blocks arrays (each block's committed extent is
    read ahead). use_libdeflate inflates each deflate segment with its own libdeflate call,
    falling back to the streaming reader on any failure; False streams every segment through
    zlib. Returns a VerifyOutcome; results are the same for any thread count.
    progress(bytes_done, bodies_done) is called from this thread a few times per second.
    Opens and maps `bodies_path` for the call; verify_bodies_with uses a reader's map."""
    path = Path(os.fspath(bodies_path))
    cdef bytes cpath = os.fsencode(path)
    cdef _VerifyArrays arrays = _VerifyArrays(blocks, bodies)
    if arrays.n == 0:
        return arrays.outcome([])
    cdef capsem_archive_file f
    f.fd = -1
    f.map = NULL
    f.size = 0
    _open_archive(&f, path, cpath)
    try:
        return _run_kernel(&f, arrays, threads, progress, use_libdeflate)
    finally:
        capsem_file_close(&f)


def verify_bodies_with(ArchiveReader reader not None, blocks, bodies, int threads=0, progress=None,
                       bint use_libdeflate=True):
    """verify_bodies over the map of an open ArchiveReader (its file header already checked
    at open): the archive is not opened again. The map is first refreshed to the file's
    size; the reader is busy meanwhile (any other use of it raises RuntimeError)."""
    cdef _VerifyArrays arrays = _VerifyArrays(blocks, bodies)
    reader._check_open()
    if arrays.n == 0:
        return arrays.outcome([])
    reader._refresh()
    reader.busy = True
    try:
        return _run_kernel(&reader.f, arrays, threads, progress, use_libdeflate)
    finally:
        reader.busy = False


cdef class _VerifyArrays:
    """The kernel's inputs as contiguous arrays (checked for equal lengths, blocks in offset
    order) and its output arrays."""
    cdef object b_blk, b_off, b_len, b_dig, b_ok, k_blk, k_disk
    cdef object status, err_index, got
    cdef size_t n

    def __cinit__(self, blocks, bodies):
        self.b_blk = _i64(bodies["block_offset"]); self.b_off = _i64(bodies["body_offset"])
        self.b_len = _i64(bodies["body_len"])
        self.b_dig = np.ascontiguousarray(bodies["digest"], dtype=np.uint8).reshape(-1, 32)
        self.b_ok = np.ascontiguousarray(bodies["hash_ok"], dtype=np.uint8)
        k_blk = _i64(blocks["block_offset"]); k_disk = _i64(blocks["disk_len"])
        self.n = self.b_blk.shape[0]
        if not (self.b_off.shape[0] == self.b_len.shape[0] == self.b_dig.shape[0] == self.b_ok.shape[0] == self.n):
            raise ValueError("body arrays differ in length")
        if k_blk.shape[0] != k_disk.shape[0]:
            raise ValueError("block arrays differ in length")
        if k_blk.shape[0] > 1 and np.any(k_blk[1:] < k_blk[:k_blk.shape[0] - 1]):
            order = np.argsort(k_blk, kind="stable")
            k_blk = k_blk[order]; k_disk = k_disk[order]
        self.k_blk = k_blk; self.k_disk = k_disk
        self.status = np.zeros(self.n, np.uint8)
        self.err_index = np.full(self.n, -1, np.int32)
        self.got = np.zeros((self.n, 32), np.uint8)

    cdef object outcome(self, list errors):
        return VerifyOutcome(self.status, self.err_index, self.got, errors)


cdef object _run_kernel(capsem_archive_file *f, _VerifyArrays a, int threads, progress, bint use_libdeflate):
    """The kernel over the map f (a fixed view: it never reads past f.size)."""
    cdef const int64_t[::1] vb = a.b_blk, vo = a.b_off, vl = a.b_len, kb = a.k_blk, kd = a.k_disk
    cdef const uint8_t[:, ::1] vd = a.b_dig
    cdef const uint8_t[::1] vk = a.b_ok
    cdef uint8_t[::1] vs = a.status
    cdef int32_t[::1] ve = a.err_index
    cdef uint8_t[:, ::1] vg = a.got
    cdef capsem_verify_spec spec
    spec.base = f.map
    spec.size = f.size
    spec.nblocks = kb.shape[0]
    spec.blk_offset = &kb[0] if kb.shape[0] else NULL
    spec.blk_disk_len = &kd[0] if kd.shape[0] else NULL
    spec.nbodies = a.n
    spec.block_offset = &vb[0]
    spec.body_offset = &vo[0]
    spec.body_len = &vl[0]
    spec.digest = &vd[0, 0]
    spec.hash_ok = &vk[0]
    spec.status = &vs[0]
    spec.err_index = &ve[0]
    spec.got = &vg[0, 0]
    spec.threads = threads
    spec.use_libdeflate = use_libdeflate
    cdef capsem_verify_job *job = NULL
    cdef int done = 0
    cdef int rc = 0
    cdef uint64_t bytes_done = 0, bodies_done = 0
    cdef size_t i
    errors = []
    try:
        with nogil:
            job = capsem_verify_start(&spec)
        if job == NULL:
            raise MemoryError("could not start the verify workers")
        try:
            while not done:
                with nogil:
                    done = capsem_verify_wait(job, 250, &bytes_done, &bodies_done)
                if progress is not None:
                    progress(bytes_done, bodies_done)
                PyErr_CheckSignals()
        except BaseException:
            capsem_verify_cancel(job)
            raise
        finally:
            with nogil:
                rc = capsem_verify_finish(job)
        if rc != 0:
            raise MemoryError("the verify workers ran out of memory")
        for i in range(capsem_verify_error_count(job)):
            errors.append(_fault(capsem_verify_error(job, i)))
    finally:
        if job != NULL:
            capsem_verify_free(job)
    return a.outcome(errors)
