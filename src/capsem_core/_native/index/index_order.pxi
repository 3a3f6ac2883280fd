# Archive order applied in place (included by _index.pyx).

cdef inline void _row_copy(uint8_t *to, const uint8_t *src, size_t row) noexcept nogil:
    # The widths the index has (a flag, an int64, a digest) as fixed-size copies.
    if row == 8:
        memcpy(to, src, 8)
    elif row == 32:
        memcpy(to, src, 32)
    elif row == 1:
        to[0] = src[0]
    else:
        memcpy(to, src, row)


def permute_in_place(array, order):
    """``array[i] = array[order[i]]`` for every row ``i`` at once, in place: the rows of a
    C-contiguous writeable array (its first axis, any dtype), ``order`` a permutation of
    ``range(len(array))``. Where ``numpy.take`` makes a sorted copy beside the column (at four
    million bodies, 128 MB for the digests), this holds aside only the rows that move toward
    the front (in archive order, the few rows reusing an earlier span: about 1%) and fills the
    rest from the back, each row from one at or before it. ValueError, before any row moves,
    when the array is not C-contiguous and writeable or ``order`` is not such a permutation.
    The GIL is released."""
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError("permute_in_place needs a C-contiguous writeable numpy array")
    cdef const int64_t[::1] o = np.ascontiguousarray(order, np.int64)
    cdef Py_ssize_t n = array.shape[0] if array.ndim else 0
    if o.shape[0] != n:
        raise ValueError("the order must name every row once")
    if n == 0:
        return
    cdef size_t row = <size_t>(array.nbytes // n)
    cdef uint8_t[::1] data = array.reshape(-1).view(np.uint8)
    cdef uint8_t *base = &data[0]
    cdef uint8_t *seen = <uint8_t *>calloc(<size_t>(n + 7) // 8, 1)
    cdef uint8_t *held = NULL
    cdef Py_ssize_t i, m = 0, ahead = 0
    cdef int64_t v
    cdef bint bad = False
    if seen == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                v = o[i]
                if v < 0 or v >= n or seen[v >> 3] & (1 << (v & 7)):
                    bad = True
                    break
                seen[v >> 3] |= <uint8_t>(1 << (v & 7))
                ahead += v > i
        if bad:
            raise ValueError("the order must name every row once")
        held = <uint8_t *>malloc(<size_t>ahead * row if ahead else 1)
        if held == NULL:
            raise MemoryError()
        with nogil:
            # Rows coming from behind their place are held first: the pass from the back
            # overwrites them before it reaches their place. Every other row comes from at or
            # before its place, which the pass has not reached yet.
            for i in range(n):
                if o[i] > i:
                    _row_copy(held + <size_t>m * row, base + <size_t>o[i] * row, row)
                    m += 1
            for i in range(n - 1, -1, -1):
                if o[i] > i:
                    m -= 1
                    _row_copy(base + <size_t>i * row, held + <size_t>m * row, row)
                elif o[i] != i:
                    _row_copy(base + <size_t>i * row, base + <size_t>o[i] * row, row)
    finally:
        free(seen)
        free(held)
