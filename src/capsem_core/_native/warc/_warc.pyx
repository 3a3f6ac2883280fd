# cython: language_level=3, boundscheck=False, wraparound=False
"""WARC records into gzip members: many records per call, one member each, compressed by
libdeflate across a pthread pool with the GIL released, the members returned end to end in
input order.

A record is its header bytes (every header of a call end to end, cut by offsets), its body
(a span of one caller's buffer, read in place) and a trailer shared by every record, so a
batch of records costs one call and no Python object per record. This module knows nothing
of WARC fields, ledgers or the Python layer: what a record says is the caller's.
"""

import numpy as np
cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int64_t, uint8_t, uint64_t

cnp.import_array()

cdef extern from "warc_gzip.h" nogil:
    ctypedef struct capsem_gzip_pool:
        pass
    ctypedef struct capsem_gzip_job:
        pass
    ctypedef struct capsem_gzip_spec:
        size_t n
        const uint8_t *heads
        uint64_t heads_len
        const int64_t *head_offsets
        const uint8_t *bodies
        uint64_t bodies_len
        const int64_t *body_offsets
        const int64_t *body_lengths
        const uint8_t *trailer
        uint64_t trailer_len
        uint8_t *out
        uint64_t out_len
        int64_t *sizes
    uint64_t CAPSEM_GZIP_MAX_RECORD_BYTES
    int CAPSEM_GZIP_MAX_LEVEL, CAPSEM_GZIP_MAX_THREADS
    int CAPSEM_GZIP_OK, CAPSEM_GZIP_E_HEADS, CAPSEM_GZIP_E_BODY, CAPSEM_GZIP_E_RECORD, CAPSEM_GZIP_E_OUT
    int CAPSEM_GZIP_E_NOMEM, CAPSEM_GZIP_E_BOUND, CAPSEM_GZIP_E_CANCELLED
    capsem_gzip_pool *capsem_gzip_pool_new(int level, int threads)
    void capsem_gzip_pool_free(capsem_gzip_pool *pool)
    int capsem_gzip_check(const capsem_gzip_spec *spec, uint64_t *need, size_t *at)
    capsem_gzip_job *capsem_gzip_start(capsem_gzip_pool *pool, const capsem_gzip_spec *spec)
    int capsem_gzip_wait(capsem_gzip_job *job, int timeout_ms)
    void capsem_gzip_cancel(capsem_gzip_job *job)
    int capsem_gzip_finish(capsem_gzip_job *job, uint64_t *total, size_t *at)

MAX_LEVEL = CAPSEM_GZIP_MAX_LEVEL
MAX_THREADS = CAPSEM_GZIP_MAX_THREADS
MAX_RECORD_BYTES = CAPSEM_GZIP_MAX_RECORD_BYTES


cdef object _i64(object values, str what):
    a = np.ascontiguousarray(values, dtype=np.int64)
    if a.ndim != 1:
        raise ValueError(f"{what} is one-dimensional")
    return a


cdef object _refusal(int rc, size_t at):
    if rc == CAPSEM_GZIP_E_HEADS:
        return ValueError(f"record {at}: its header span is not inside the header bytes")
    if rc == CAPSEM_GZIP_E_BODY:
        return ValueError(f"record {at}: its body span is not inside the body buffer")
    if rc == CAPSEM_GZIP_E_RECORD:
        return ValueError(f"record {at}: header, body and trailer exceed {MAX_RECORD_BYTES} bytes")
    if rc == CAPSEM_GZIP_E_NOMEM:
        return MemoryError(f"record {at}: no memory to assemble it for compression")
    if rc == CAPSEM_GZIP_E_BOUND:
        return RuntimeError(f"record {at}: libdeflate did not fit it in its gzip bound")
    return RuntimeError(f"record {at}: compression stopped before it (status {rc})")


cdef class GzipMembers:
    """A pool of ``threads`` workers (1..MAX_THREADS), each with one libdeflate compressor at
    ``level`` (0..12: 0 stores, 6 is zlib's default, 12 the slowest and smallest) and one
    buffer a record is assembled in, kept from call to call. One call at a time."""

    cdef capsem_gzip_pool *pool
    cdef readonly int level
    cdef readonly int threads
    cdef bint busy

    def __cinit__(self, int level=6, int threads=1):
        if not 0 <= level <= CAPSEM_GZIP_MAX_LEVEL:
            raise ValueError(f"a libdeflate level is 0..{CAPSEM_GZIP_MAX_LEVEL}, not {level}")
        if not 1 <= threads <= CAPSEM_GZIP_MAX_THREADS:
            raise ValueError(f"threads is 1..{CAPSEM_GZIP_MAX_THREADS}, not {threads}")
        self.level = level
        self.threads = threads
        self.pool = capsem_gzip_pool_new(level, threads)
        if self.pool == NULL:
            raise MemoryError("no memory for the gzip compressors")

    def __dealloc__(self):
        capsem_gzip_pool_free(self.pool)

    def compress(self, heads, head_offsets, bodies, body_offsets, body_lengths, trailer=b"", out=None):
        """Each record i (``heads[head_offsets[i]:head_offsets[i + 1]]``, then
        ``bodies[body_offsets[i]:body_offsets[i] + body_lengths[i]]``, then ``trailer``) as one
        gzip member, on the pool's workers with the GIL released.

        ``out``: a writable uint8 array to put the members in, used when it is large enough
        for their gzip bounds (else a new one is made). Returns ``(out, total, sizes)``: the
        array used, the members' bytes (end to end in input order at ``out[:total]``) and
        each member's size. ValueError for a span outside its buffer, mismatched arrays or a
        record over MAX_RECORD_BYTES (checked before anything is compressed), MemoryError
        when memory runs out. Interruptible: a signal stops the workers after their current
        record and raises."""
        if self.busy:
            raise RuntimeError("this GzipMembers is compressing already: one call at a time")
        cdef object ho = _i64(head_offsets, "head_offsets")
        cdef object bo = _i64(body_offsets, "body_offsets")
        cdef object bl = _i64(body_lengths, "body_lengths")
        cdef Py_ssize_t n = bo.shape[0]
        if bl.shape[0] != n or ho.shape[0] != n + 1:
            raise ValueError("head_offsets has one entry more than body_offsets and body_lengths, "
                             f"which match (got {ho.shape[0]}, {n}, {bl.shape[0]})")
        sizes = np.zeros(n, np.int64)
        cdef Py_buffer hv, bv, tv, ov
        cdef bint held_h = False, held_b = False, held_t = False, held_o = False
        cdef capsem_gzip_spec spec
        cdef const int64_t[::1] vho = ho
        cdef const int64_t[::1] vbo, vbl
        cdef int64_t[::1] vs = sizes
        cdef uint64_t need = 0, total = 0
        cdef size_t at = 0
        cdef int rc
        cdef int done = 0
        cdef capsem_gzip_job *job = NULL
        self.busy = True
        try:
            PyObject_GetBuffer(heads, &hv, PyBUF_SIMPLE)
            held_h = True
            PyObject_GetBuffer(bodies, &bv, PyBUF_SIMPLE)
            held_b = True
            PyObject_GetBuffer(trailer, &tv, PyBUF_SIMPLE)
            held_t = True
            spec.n = <size_t>n
            spec.heads = <const uint8_t *>hv.buf
            spec.heads_len = <uint64_t>hv.len
            spec.head_offsets = &vho[0]
            spec.bodies = <const uint8_t *>bv.buf
            spec.bodies_len = <uint64_t>bv.len
            spec.body_offsets = NULL
            spec.body_lengths = NULL
            if n:
                vbo = bo
                vbl = bl
                spec.body_offsets = &vbo[0]
                spec.body_lengths = &vbl[0]
            spec.trailer = <const uint8_t *>tv.buf
            spec.trailer_len = <uint64_t>tv.len
            spec.out = NULL
            spec.out_len = 0
            spec.sizes = &vs[0] if n else NULL
            rc = capsem_gzip_check(&spec, &need, &at)
            if rc != CAPSEM_GZIP_OK and rc != CAPSEM_GZIP_E_OUT:
                raise _refusal(rc, at)
            if out is None or not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim != 1 \
                    or not out.flags.c_contiguous or not out.flags.writeable or <uint64_t>out.shape[0] < need:
                out = np.empty(max(<Py_ssize_t>need, 1), np.uint8)
            PyObject_GetBuffer(out, &ov, PyBUF_WRITABLE)
            held_o = True
            spec.out = <uint8_t *>ov.buf
            spec.out_len = <uint64_t>ov.len
            if n == 0:
                return out, 0, sizes
            with nogil:
                job = capsem_gzip_start(self.pool, &spec)
            if job == NULL:
                raise MemoryError("could not start the gzip workers")
            try:
                while not done:
                    with nogil:
                        done = capsem_gzip_wait(job, 250)
                    PyErr_CheckSignals()
            except BaseException:
                capsem_gzip_cancel(job)
                raise
            finally:
                with nogil:
                    rc = capsem_gzip_finish(job, &total, &at)
            if rc != CAPSEM_GZIP_OK:
                raise _refusal(rc, at)
            return out, int(total), sizes
        finally:
            if held_o:
                PyBuffer_Release(&ov)
            if held_t:
                PyBuffer_Release(&tv)
            if held_b:
                PyBuffer_Release(&bv)
            if held_h:
                PyBuffer_Release(&hv)
            self.busy = False
