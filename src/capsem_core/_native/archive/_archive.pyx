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
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from archive_c cimport *
from archive_format cimport *
from status cimport *

from capsem_core._native import _errors

cnp.import_array()

# Reads of the session.bodies map are guarded against SIGBUS (a file cut short underneath).
if capsem_guard_install() != 0:
    raise ImportError("capsem_core._native._archive could not install its SIGBUS guard")

# The format, as the C headers define it (the Python format module reads these).
FILE_MAGIC = CAPSEM_FILE_MAGIC[:8]
BLOCK_MAGIC = CAPSEM_BLOCK_MAGIC[:4]
SEGMENT_MAGIC = CAPSEM_SEGMENT_MAGIC[:4]
SYNC_FLUSH_TAIL = CAPSEM_SYNC_FLUSH_TAIL[:4]
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
    return e.detail.decode("utf-8", "replace") if e.detail[0] else None


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

# Cursors a reader's block cache may hold, whatever its byte budget: the lookup is a linear
# scan, and 64 blocks of the smallest size a writer seals already make a generous cache.
MAX_CACHED_BLOCKS = 64
cdef enum:
    MAX_POOL = 64
# What a cursor costs beyond its raw buffer (its inflate state and window), counted against
# the cache's budget so many tiny blocks cannot hold more memory than the budget says.
cdef size_t CURSOR_OVERHEAD = 48 << 10


cdef class ArchiveReader:
    """A reader of one session.bodies file with Capsem's block cursor, or a cache of them.

    Not shareable between threads (like Capsem's reader): one reader per thread, or a lock
    around it. The file is memory-mapped; the map is refreshed when a read needs bytes past
    it, so a reader follows a writer appending to the same open block.

    ``cache_bytes`` bounds a cache of inflated blocks: each cached block keeps its cursor
    (its inflated prefix and its inflate stream), so a read that lands in a cached block
    inflates nothing when its span is already held, and only the segments past the held
    prefix otherwise. Least recently used blocks are dropped once the cursors' buffers (plus
    a fixed 48 KiB each for the inflate state) exceed the budget, and at most
    MAX_CACHED_BLOCKS are kept; 0 (the default) keeps one cursor, Capsem's protocol.
    """
    cdef capsem_archive_file f
    cdef capsem_cursor *c  # the cursor of the last read (one of pool)
    cdef capsem_cursor *pool[MAX_POOL]
    cdef uint64_t last_use[MAX_POOL]
    cdef int npool
    cdef uint64_t tick
    cdef size_t budget
    # Counters of cursors the cache dropped, so blocks_inflated counts every inflate.
    cdef uint64_t dropped_blocks, dropped_segments
    cdef readonly object path
    cdef bytes cpath
    cdef bint busy

    def __cinit__(self, path, cache_bytes=0):
        self.c = NULL
        self.npool = 0
        self.tick = 0
        self.dropped_blocks = 0
        self.dropped_segments = 0
        self.f.fd = -1
        self.f.map = NULL
        self.f.size = 0
        self.busy = False
        if cache_bytes < 0:
            raise ValueError("cache_bytes is a byte count (0 or more)")
        self.budget = <size_t>min(cache_bytes, 1 << 62)
        self.path = Path(os.fspath(path))
        self.cpath = os.fsencode(self.path)
        _open_archive(&self.f, self.path, self.cpath)
        self.c = capsem_cursor_new()
        if self.c == NULL:
            capsem_file_close(&self.f)
            raise MemoryError()
        self.pool[0] = self.c
        self.last_use[0] = 0
        self.npool = 1

    cdef void _free_cursors(self):
        cdef int k
        for k in range(self.npool):
            capsem_cursor_free(self.pool[k])
            self.pool[k] = NULL
        self.npool = 0
        self.c = NULL

    def __dealloc__(self):
        self._free_cursors()
        capsem_file_close(&self.f)

    def close(self):
        self._free_cursors()
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

    cdef size_t _cache_used(self):
        cdef size_t used = 0
        cdef int k
        for k in range(self.npool):
            used += capsem_cursor_capacity(self.pool[k]) + CURSOR_OVERHEAD
        return used

    cdef void _drop(self, int k):
        """Free cached cursor k (never the current one)."""
        self.dropped_blocks += capsem_cursor_blocks_inflated(self.pool[k])
        self.dropped_segments += capsem_cursor_segments_inflated(self.pool[k])
        capsem_cursor_free(self.pool[k])
        self.npool -= 1
        self.pool[k] = self.pool[self.npool]
        self.last_use[k] = self.last_use[self.npool]
        self.pool[self.npool] = NULL

    cdef int _oldest(self, bint spare_current):
        cdef int k, best = -1
        for k in range(self.npool):
            if spare_current and self.pool[k] == self.c:
                continue
            if best < 0 or self.last_use[k] < self.last_use[best]:
                best = k
        return best

    cdef int _choose(self, uint64_t block_offset) except -1:
        """Make self.c the cursor for block_offset: the cached one holding that block, else a
        new cursor while the budget allows, else the least recently used one (restarted)."""
        cdef int k, at = -1
        cdef capsem_cursor *fresh
        self.tick += 1
        for k in range(self.npool):
            if capsem_cursor_active(self.pool[k]) and capsem_cursor_block(self.pool[k]) == block_offset:
                at = k
                break
        if at < 0:
            for k in range(self.npool):
                if not capsem_cursor_active(self.pool[k]):
                    at = k  # an idle cursor (discarded after an error): reuse its buffer
                    break
        if at < 0 and self.budget and self.npool < MAX_POOL and self._cache_used() < self.budget:
            fresh = capsem_cursor_new()
            if fresh == NULL:
                raise MemoryError()
            at = self.npool
            self.pool[at] = fresh
            self.npool += 1
        if at < 0:
            at = self._oldest(False)
        self.c = self.pool[at]
        self.last_use[at] = self.tick
        return 0

    cdef void _trim(self):
        """Drop least recently used blocks until the cache is within its budget."""
        cdef int k
        while self.npool > 1 and self._cache_used() > self.budget:
            k = self._oldest(True)
            if k < 0:
                return
            self._drop(k)

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
            self._choose(block_offset)
            while True:
                with nogil:
                    st = capsem_guarded_reach(self.c, self.f.map, self.f.size, block_offset, end, &e)
                if st == CAPSEM_OK:
                    if self.npool > 1:
                        self._trim()
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
            st = capsem_guarded_walk_extent(self.f.map, self.f.size, b, d, &ext, &e, NULL)
        if st != CAPSEM_OK:
            _raise_error(&e, self.path)
        return ext.codec, ext.raw_len, ext.segments, bool(ext.final)

    def walk_extents(self, block_offsets, disk_lens):
        """walk_extent over many extents in one native pass, keeping the segment headers it
        parsed (an ExtentWalk, which verify_bodies_with takes so the kernel need not parse
        them again). An extent that fails is a (position, ArchiveError) in ``failures``; its
        raw_len and segments are 0 and none of its segments is kept."""
        self._check_open()
        offs = _i64(block_offsets)
        lens = _i64(disk_lens)
        if offs.shape[0] != lens.shape[0]:
            raise ValueError("block arrays differ in length")
        cdef Py_ssize_t n = offs.shape[0], i
        cdef ExtentWalk walk = ExtentWalk.__new__(ExtentWalk)
        walk.block_offset = offs
        walk.raw_len = np.zeros(n, np.int64)
        walk.segments = np.zeros(n, np.int64)
        walk.seg_first = np.zeros(n + 1, np.int64)
        walk.failures = []
        cdef const int64_t[::1] vo = offs, vl = lens
        cdef int64_t[::1] vr = walk.raw_len, vs = walk.segments, vf = walk.seg_first
        cdef capsem_extent ext
        cdef capsem_error e
        cdef capsem_status st
        cdef uint64_t b, d
        cdef size_t kept
        cdef int refreshed = 0
        for i in range(n):
            vf[i] = <int64_t>walk.table.n
            if vo[i] < 0:
                walk.failures.append((i, _errors.error(CAPSEM_E_BLOCK_HEADER, self.path, at=vo[i])))
                continue
            if vl[i] < 0:
                walk.failures.append((i, _errors.error(CAPSEM_R_EXTENT_LENGTH, self.path, at=vo[i], size=vl[i])))
                continue
            b = <uint64_t>vo[i]
            d = <uint64_t>vl[i]
            if (b + d > self.f.size or b + d < b) and not refreshed:
                self._refresh()  # once: the file may have grown since it was mapped
                refreshed = 1
            kept = walk.table.n
            with nogil:
                st = capsem_guarded_walk_extent(self.f.map, self.f.size, b, d, &ext, &e, &walk.table)
            if st == CAPSEM_E_NOMEM:
                raise MemoryError("no memory for the segment table")
            if st != CAPSEM_OK:
                capsem_segment_table_truncate(&walk.table, kept)
                walk.failures.append((i, _errors.error(capsem_report_code(e.status, e.hash_mismatch), self.path,
                                                       at=e.at, codec=e.codec, detail=_detail(&e))))
                continue
            vr[i] = <int64_t>ext.raw_len
            vs[i] = <int64_t>ext.segments
        vf[n] = <int64_t>walk.table.n
        return walk

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
        """Blocks whose inflating was started (from their first segment), over the reader's life."""
        cdef uint64_t n = self.dropped_blocks
        cdef int k
        for k in range(self.npool):
            n += capsem_cursor_blocks_inflated(self.pool[k])
        return n

    @property
    def segments_inflated(self):
        """Segments inflated over the reader's life."""
        cdef uint64_t n = self.dropped_segments
        cdef int k
        for k in range(self.npool):
            n += capsem_cursor_segments_inflated(self.pool[k])
        return n

    @property
    def cached_blocks(self):
        """Blocks the cache holds inflated now (a prefix of each)."""
        cdef int k, n = 0
        for k in range(self.npool):
            n += capsem_cursor_active(self.pool[k]) != 0
        return n

    @property
    def cache_bytes(self):
        """The cache's byte budget (0: one cursor, no cache)."""
        return self.budget

    @property
    def identity(self):
        """(st_dev, st_ino) recorded at open."""
        return self.f.dev, self.f.ino


cdef class ExtentWalk:
    """What ArchiveReader.walk_extents found: per extent (in the order given) its raw_len and
    segment count (0 for a failed one), the failures as (position, ArchiveError), and the
    parsed segment headers, kept natively for the verify kernel."""
    cdef capsem_segment_table table
    cdef readonly object block_offset, raw_len, segments, seg_first
    cdef readonly list failures

    def __dealloc__(self):
        capsem_segment_table_free(&self.table)

    @property
    def segment_count(self):
        """Segment headers kept (every segment of every sound extent)."""
        return self.table.n


# --- the bulk read's buffer -----------------------------------------------------------------

cdef class ReadOnlyBytes:
    """The read-only buffer protocol over a contiguous uint8 array it holds.

    The base of the bulk read's batch: ``memoryview(batch)`` and ``bytes(batch)`` see the one
    buffer the kernel copied the verified bodies into, with no copy; no view of it is
    writable, so the bytes stay the verified ones."""
    cdef object _array
    cdef const uint8_t[::1] _view
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]

    def __init__(self, array):
        self._array = np.ascontiguousarray(array, dtype=np.uint8).reshape(-1)
        self._view = self._array
        self._shape[0] = self._view.shape[0]
        self._strides[0] = 1

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("the bodies' buffer is read-only")
        if self._shape[0]:
            view.buf = <void *>&self._view[0]
        else:
            view.buf = <void *>self._shape  # any valid address: no byte is read
        view.obj = self
        view.len = self._shape[0]
        view.readonly = 1
        view.itemsize = 1
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        else:
            view.format = NULL
        view.ndim = 1
        view.shape = self._shape
        view.strides = self._strides
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass


# --- extent fingerprints (the verification record) ---------------------------------------

cdef extern from "archive_extents.h" nogil:
    ctypedef struct capsem_extents_job:
        pass
    ctypedef struct capsem_extents_spec:
        const uint8_t *base
        uint64_t size
        size_t n
        const int64_t *offset
        const int64_t *length
        uint8_t *disk_hash
        uint8_t *segments
        uint8_t *status
        int threads
    capsem_extents_job *capsem_extents_start(const capsem_extents_spec *spec)
    int capsem_extents_wait(capsem_extents_job *job, int timeout_ms, uint64_t *bytes_done)
    void capsem_extents_cancel(capsem_extents_job *job)
    void capsem_extents_free(capsem_extents_job *job)
    uint8_t CAPSEM_EXTENT_HASHED, CAPSEM_EXTENT_PAST_END, CAPSEM_EXTENT_SHRANK, CAPSEM_EXTENT_UNCHAINED
    uint8_t CAPSEM_EXTENT_SKIPPED

EXTENT_HASHED = CAPSEM_EXTENT_HASHED
EXTENT_PAST_END = CAPSEM_EXTENT_PAST_END
EXTENT_SHRANK = CAPSEM_EXTENT_SHRANK
EXTENT_UNCHAINED = CAPSEM_EXTENT_UNCHAINED

ExtentPrints = collections.namedtuple("ExtentPrints", "disk_hash segments status")
ExtentPrints.__doc__ = ("Fingerprints of extents: (n, 32) BLAKE3 digests of each extent's on-disk bytes, (n, 32) "
                        "digests of its segment headers' hashes in order, and the per-extent outcome "
                        "(EXTENT_HASHED, EXTENT_PAST_END, EXTENT_SHRANK, EXTENT_UNCHAINED).")


def hash_extents(ArchiveReader reader not None, offsets, lengths, int threads=0):
    """Fingerprint the extents [offsets[i], offsets[i] + lengths[i]) of the reader's map, on
    ``threads`` workers (0: one per core) with the GIL released: an ExtentPrints. Nothing is
    inflated. The map is first refreshed to the file's size; an extent outside it is
    EXTENT_PAST_END, one the file shrank under EXTENT_SHRANK (its digests are then zero).
    Interruptible: a signal stops the workers after their current extent and raises."""
    cdef object offs = _i64(offsets), lens = _i64(lengths)
    if offs.shape[0] != lens.shape[0]:
        raise ValueError("offsets and lengths differ in length")
    cdef Py_ssize_t n = offs.shape[0]
    disk_hash = np.zeros((n, 32), np.uint8)
    segments = np.zeros((n, 32), np.uint8)
    status = np.zeros(n, np.uint8)
    reader._check_open()
    if n == 0:
        return ExtentPrints(disk_hash, segments, status)
    reader._refresh()
    cdef const int64_t[::1] vo = offs, vl = lens
    cdef uint8_t[:, ::1] vh = disk_hash, vs = segments
    cdef uint8_t[::1] vt = status
    cdef capsem_extents_spec spec
    spec.base = reader.f.map
    spec.size = reader.f.size
    spec.n = n
    spec.offset = &vo[0]
    spec.length = &vl[0]
    spec.disk_hash = &vh[0, 0]
    spec.segments = &vs[0, 0]
    spec.status = &vt[0]
    spec.threads = threads
    cdef capsem_extents_job *job = NULL
    cdef int done = 0
    reader.busy = True
    try:
        with nogil:
            job = capsem_extents_start(&spec)
        if job == NULL:
            raise MemoryError("could not start the extent hashing workers")
        try:
            while not done:
                with nogil:
                    done = capsem_extents_wait(job, 250, NULL)
                PyErr_CheckSignals()
        except BaseException:
            capsem_extents_cancel(job)
            raise
        finally:
            with nogil:
                capsem_extents_free(job)
    finally:
        reader.busy = False
    return ExtentPrints(disk_hash, segments, status)


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
                       bint use_libdeflate=True, ExtentWalk walk=None, out=None, out_offset=None):
    """verify_bodies over the map of an open ArchiveReader (its file header already checked
    at open): the archive is not opened again. The map is first refreshed to the file's
    size; the reader is busy meanwhile (any other use of it raises RuntimeError). ``walk``:
    this reader's walk_extents over exactly these blocks with no failures; the kernel then
    takes every segment header from it instead of parsing it again (a walk of other blocks
    is not used).

    With ``out`` (a writable contiguous uint8 buffer) and ``out_offset`` (one int64 per
    body), the same pass also hands the bytes out: every body that verifies is copied to
    out[out_offset[i] : out_offset[i] + body_len[i]], by the worker that hashed it, with the
    GIL released; a body that fails leaves its slot as it was. ValueError before any work
    when a slot of a body whose span is in bounds does not fit in ``out``."""
    cdef _VerifyArrays arrays = _VerifyArrays(blocks, bodies)
    cdef uint8_t[::1] vout
    reader._check_open()
    if walk is not None and not walk.failures and np.array_equal(walk.block_offset, arrays.k_blk):
        arrays.walk = walk
    if (out is None) != (out_offset is None):
        raise ValueError("out and out_offset go together")
    if out is not None:
        vout = out
        arrays.set_output(vout, out_offset)
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
    cdef object out_offset
    cdef uint8_t[::1] out
    cdef bint has_out
    cdef ExtentWalk walk
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
        if k_blk.shape[0] > 1 and np.any(k_blk[1:] < k_blk[:-1]):
            order = np.argsort(k_blk, kind="stable")
            k_blk = k_blk[order]; k_disk = k_disk[order]
        self.k_blk = k_blk; self.k_disk = k_disk
        self.status = np.zeros(self.n, np.uint8)
        self.err_index = np.full(self.n, -1, np.int32)
        self.got = np.zeros((self.n, 32), np.uint8)

    cdef set_output(self, uint8_t[::1] out, out_offset):
        offsets = _i64(out_offset)
        if offsets.shape[0] != self.n:
            raise ValueError("out_offset differs in length from the body arrays")
        # A length out of a block's bounds is refused by the kernel and never copied: it
        # needs no slot (and no sum below can overflow).
        lens = np.where((self.b_len < 0) | (self.b_len > CAPSEM_MAX_BLOCK_RAW_BYTES), 0, self.b_len)
        if self.n and (np.any(offsets < 0) or np.any(offsets > out.shape[0] - lens)):
            raise ValueError("a body's slot does not fit in the output buffer")
        self.out = out
        self.out_offset = offsets
        self.has_out = True

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
    cdef const int64_t[::1] voo
    spec.out = NULL
    spec.out_offset = NULL
    if a.has_out:
        voo = a.out_offset
        spec.out = &a.out[0] if a.out.shape[0] else NULL
        spec.out_offset = &voo[0]
    spec.threads = threads
    spec.use_libdeflate = use_libdeflate
    spec.segs = NULL
    spec.seg_first = NULL
    cdef const int64_t[::1] vf
    if a.walk is not None and a.walk.table.n > 0:
        vf = a.walk.seg_first
        spec.segs = a.walk.table.refs
        spec.seg_first = &vf[0]
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
