# cython: language_level=3, boundscheck=False, wraparound=False
"""BLAKE3 entry points for Python: one-shot digests, extendable output, many bodies in one
call (hash_many), and the SIMD level (portable everywhere; sse41 / avx2 / avx512 on x86-64, neon on
arm64; chosen at run time)."""

import numpy as np

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from libc.stdint cimport uint8_t, uint64_t

cdef extern from "blake3.h" nogil:
    ctypedef struct capsem_blake3_hasher:
        pass
    int CAPSEM_BLAKE3_LEVELS
    void capsem_blake3_hasher_init(capsem_blake3_hasher *self)
    void capsem_blake3_hasher_init_keyed(capsem_blake3_hasher *self, const uint8_t *key)
    void capsem_blake3_hasher_update(capsem_blake3_hasher *self, const void *input, size_t input_len)
    void capsem_blake3_hasher_finalize(const capsem_blake3_hasher *self, uint8_t *out, size_t out_len)
    void capsem_blake3_hash(const void *input, size_t input_len, uint8_t *out)
    void capsem_blake3_hash_many(const uint8_t *base, const uint64_t *offsets, const uint64_t *lengths,
                                 size_t n, uint8_t *out)
    int capsem_blake3_level()
    int capsem_blake3_max_level()
    int capsem_blake3_level_supported(int level)
    int capsem_blake3_level_self_check(int level)
    int capsem_blake3_set_level(int level)
    const char *capsem_blake3_level_name(int level)

# Below this many bytes hashing is quicker than releasing and taking back the GIL.
cdef enum:
    NOGIL_MIN = 16384


def digest(data):
    """32-byte BLAKE3 digest of a bytes-like object."""
    cdef Py_buffer view
    cdef uint8_t out[32]
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len < NOGIL_MIN:
            capsem_blake3_hash(view.buf, <size_t>view.len, out)
        else:
            with nogil:
                capsem_blake3_hash(view.buf, <size_t>view.len, out)
    finally:
        PyBuffer_Release(&view)
    return out[:32]


def hexdigest(data):
    """Lower-case hex of the 32-byte digest, as session.db stores it after 'blake3:'."""
    return digest(data).hex()


def extended(data, Py_ssize_t length, key=None, Py_ssize_t piece=0):
    """length bytes of BLAKE3 output (hash mode, or keyed mode with a 32-byte key), through
    the incremental hasher. piece > 0 feeds it that many bytes per update (streaming)."""
    if length < 0 or length > (1 << 24):
        raise ValueError("output length must be between 0 and 16 MiB")
    if piece < 0:
        raise ValueError("piece must be 0 (one update) or a positive byte count")
    cdef capsem_blake3_hasher h
    cdef const uint8_t[::1] k
    if key is None:
        capsem_blake3_hasher_init(&h)
    else:
        k = key
        if k.shape[0] != 32:
            raise ValueError("a BLAKE3 key is 32 bytes")
        capsem_blake3_hasher_init_keyed(&h, &k[0])
    out = bytearray(length)
    cdef uint8_t[::1] o = out
    cdef Py_buffer view
    cdef size_t pos = 0, size, step
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        size = <size_t>view.len
        step = <size_t>piece if piece else size
        with nogil:
            while pos < size:
                if step > size - pos:
                    step = size - pos
                capsem_blake3_hasher_update(&h, <const uint8_t *>view.buf + pos, step)
                pos += step
            if length:
                capsem_blake3_hasher_finalize(&h, &o[0], <size_t>length)
    finally:
        PyBuffer_Release(&view)
    return bytes(out)


cdef object _as_u64(object a, str name):
    arr = np.asarray(a)
    if arr.ndim != 1 or arr.dtype.kind not in "ui":
        raise ValueError(f"{name} must be a one-dimensional integer array")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise ValueError(f"{name} must not be negative")
    return np.ascontiguousarray(arr, dtype=np.uint64)


def hash_many(buffer, offsets, lengths):
    """Digests of many slices of one buffer: row i of the (n, 32) uint8 result is the BLAKE3
    digest of buffer[offsets[i] : offsets[i] + lengths[i]]. Every slice is checked against
    the buffer before hashing starts (ValueError names the first that does not fit)."""
    offs = _as_u64(offsets, "offsets")
    lens = _as_u64(lengths, "lengths")
    if offs.shape[0] != lens.shape[0]:
        raise ValueError(f"offsets and lengths differ in length ({offs.shape[0]} != {lens.shape[0]})")
    cdef const uint64_t[::1] o = offs
    cdef const uint64_t[::1] l = lens
    cdef Py_ssize_t n = o.shape[0], i, bad = -1
    out = np.empty((n, 32), dtype=np.uint8)
    cdef uint8_t[:, ::1] res = out
    cdef Py_buffer view
    cdef uint64_t size
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        size = <uint64_t>view.len
        for i in range(n):
            if o[i] > size or l[i] > size - o[i]:
                bad = i
                break
        if bad >= 0:
            raise ValueError(f"slice {bad} (offset {o[bad]}, length {l[bad]}) runs past the end of "
                             f"the {size}-byte buffer")
        if n:
            with nogil:
                capsem_blake3_hash_many(<const uint8_t *>view.buf, &o[0], &l[0], <size_t>n, &res[0, 0])
    finally:
        PyBuffer_Release(&view)
    return out


def available_levels():
    """Names of the SIMD levels this CPU can run: portable first. On x86-64 then sse41 .. the best
    one, slowest first, and "avx512-on-avx2" (the avx512 level's code built for AVX2, for tests)
    where AVX2 runs; on arm64 then "neon"."""
    return [name for i, name in enumerate(_level_names()) if capsem_blake3_level_supported(i)]


def self_check(level):
    """True if the level (a name or number) runs here and gives the portable level's digests
    on the fixed probe the automatic choice checks it against; False where the CPU lacks it."""
    return bool(capsem_blake3_level_self_check(_level_number(level)))


def best_level():
    """Name of the level chosen on first use: the fastest this CPU runs that passes self_check."""
    return capsem_blake3_level_name(capsem_blake3_max_level()).decode()


def simd_level():
    """Name of the SIMD level in use."""
    return capsem_blake3_level_name(capsem_blake3_level()).decode()


def _level_names():
    return [capsem_blake3_level_name(i).decode() for i in range(CAPSEM_BLAKE3_LEVELS)]


def _level_number(level):
    """The number of a level given by name or number (ValueError if unknown)."""
    names = _level_names()
    if isinstance(level, str):
        if level not in names:
            raise ValueError(f"unknown BLAKE3 SIMD level {level!r} (known: {', '.join(names)})")
        return names.index(level)
    if isinstance(level, int) and not isinstance(level, bool):
        if not 0 <= level < CAPSEM_BLAKE3_LEVELS:
            raise ValueError(f"unknown BLAKE3 SIMD level {level} (0 to {CAPSEM_BLAKE3_LEVELS - 1})")
        return level
    raise TypeError("a SIMD level is a name or a number")


def set_simd_level(level):
    """Force a SIMD level by name ("portable", "sse41", "avx2", "avx512", "avx512-on-avx2", "neon")
    or number (0 to 5).
    Refuses (ValueError) a level this CPU lacks. Returns the name of the level now in use."""
    cdef int number = _level_number(level)
    if capsem_blake3_set_level(number) != 0:
        raise ValueError(f"this CPU cannot run BLAKE3 SIMD level {_level_names()[number]!r} "
                         f"(available: {', '.join(available_levels())})")
    return simd_level()
