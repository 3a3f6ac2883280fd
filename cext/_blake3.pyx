# cython: language_level=3, boundscheck=False, wraparound=False
"""BLAKE3 entry points for Python: one-shot digests and extendable output."""

from libc.stdint cimport uint8_t

cdef extern from "blake3.h" nogil:
    ctypedef struct capsem_blake3_hasher:
        pass
    void capsem_blake3_hasher_init(capsem_blake3_hasher *self)
    void capsem_blake3_hasher_init_keyed(capsem_blake3_hasher *self, const uint8_t *key)
    void capsem_blake3_hasher_update(capsem_blake3_hasher *self, const void *input, size_t input_len)
    void capsem_blake3_hasher_finalize(const capsem_blake3_hasher *self, uint8_t *out, size_t out_len)
    void capsem_blake3_hash(const void *input, size_t input_len, uint8_t *out)


def digest(const uint8_t[::1] data not None):
    """32-byte BLAKE3 digest of a bytes-like object."""
    cdef uint8_t out[32]
    with nogil:
        capsem_blake3_hash(&data[0] if data.shape[0] else NULL, data.shape[0], out)
    return bytes(out[:32])


def hexdigest(const uint8_t[::1] data not None):
    """Lower-case hex of the 32-byte digest, as session.db stores it after 'blake3:'."""
    return digest(data).hex()


def extended(const uint8_t[::1] data not None, Py_ssize_t length, key=None):
    """length bytes of BLAKE3 output (hash mode, or keyed mode with a 32-byte key)."""
    if length < 0 or length > (1 << 24):
        raise ValueError("output length must be between 0 and 16 MiB")
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
    with nogil:
        capsem_blake3_hasher_update(&h, &data[0] if data.shape[0] else NULL, data.shape[0])
        if length:
            capsem_blake3_hasher_finalize(&h, &o[0], length)
    return bytes(out)
