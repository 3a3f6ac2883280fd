# Included by _pages.pyx (one extension module; the file split is by concept): what a records
# scan fills, texts' codes (text_codes.h) and the arrays lent to numpy, and how a column of a
# scan is given.

cdef class Codes:
    """Dense codes (1, 2, ...) of the distinct texts the scans that share it meet: equal codes
    are byte-equal texts. ``seed`` keys its hash (draw it at random). Scans sharing one run
    one after another (a second one at once is refused)."""

    cdef capsem_codes *t
    cdef int busy

    def __cinit__(self, uint64_t seed):
        self.t = capsem_codes_new(seed)
        if self.t == NULL:
            raise MemoryError()

    def __dealloc__(self):
        capsem_codes_free(self.t)

    def __len__(self):
        return capsem_codes_count(self.t)

    def find(self, text):
        """The code of ``text`` (str, UTF-8 encoded, or bytes), or 0 when no scan met it."""
        cdef bytes raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if len(raw) > 0xFFFFFFFF:
            return 0
        return capsem_codes_find(self.t, <const uint8_t *><const char *>raw, <uint32_t>len(raw))

    def adopt(self, Codes other):
        """The codes here of every text ``other`` coded, adding the ones not here yet: an int64
        array indexed by ``other``'s code (0, NULL, stays 0), so columns coded there read as
        if coded here (two scans that ran at once, each with its own codes, joined after).
        None when these codes gave up (their probe bound or their largest code reached).
        Refused while a scan sharing either runs."""
        if self.busy or other.busy:
            raise RuntimeError("a scan sharing these codes is running")
        cdef uint32_t n = capsem_codes_count(other.t), c, length = 0
        out = np.zeros(<size_t>n + 1, dtype=np.int64)
        cdef int64_t[::1] mapped = out
        cdef const uint8_t *p
        cdef int64_t code = 1
        cdef bint gave_up = False
        with nogil:
            for c in range(1, n + 1):
                p = capsem_codes_text(other.t, c, &length)
                code = capsem_codes_add_hashed(self.t, capsem_codes_hash(self.t, p, length), p, length)
                if code <= 0:
                    gave_up = code < 0
                    break
                mapped[c] = code
        if code == 0:
            raise MemoryError()
        return None if gave_up else out

    def text(self, code):
        """The bytes of the text coded ``code``, or None when no text has that code (0
        included). Refused while a scan sharing these codes runs (it may be adding texts)."""
        if self.busy:
            raise RuntimeError("a scan sharing these codes is running")
        if not 0 < code <= 0xFFFFFFFF:
            return None
        cdef uint32_t n = 0
        cdef const uint8_t *p = capsem_codes_text(self.t, <uint32_t>code, &n)
        if p == NULL:
            return None
        return (<const char *>p)[:n]


cdef class _Values:
    """An array a scan filled (big_alloc.h: ``alloc`` bytes at ``data``), lent to numpy without
    a copy: ``n`` items of ``itemsize`` bytes (int64 values, or the bytes of a text or digest
    column)."""

    cdef void *data
    cdef size_t alloc
    cdef Py_ssize_t n
    cdef Py_ssize_t itemsize
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef int views

    def __getbuffer__(self, Py_buffer *buf, int flags):
        self.shape[0] = self.n
        self.strides[0] = self.itemsize
        buf.buf = self.data
        buf.obj = self
        buf.len = self.n * self.itemsize
        buf.readonly = 0
        buf.itemsize = self.itemsize
        buf.format = "q" if self.itemsize == 8 else "B"
        buf.ndim = 1
        buf.shape = self.shape
        buf.strides = self.strides
        buf.suboffsets = NULL
        buf.internal = NULL
        self.views += 1

    def __releasebuffer__(self, Py_buffer *buf):
        self.views -= 1

    def __dealloc__(self):
        capsem_big_free(self.data, self.alloc)


cdef object _owned(void *data, size_t alloc, Py_ssize_t n, Py_ssize_t itemsize):
    cdef _Values v = _Values.__new__(_Values)
    v.data = data
    v.alloc = alloc
    v.n = n
    v.itemsize = itemsize
    return np.frombuffer(v, dtype=np.int64 if itemsize == 8 else np.uint8)


cdef object _lend(capsem_rec_column *column, uint64_t rows):
    """A numpy array over the column's values, which it then owns (``column`` lets go of them
    only once an owner exists, so an exception here never frees them twice)."""
    if not rows:
        return np.empty(0, dtype=np.int64)
    out = _owned(column.values, column.capacity * sizeof(int64_t), <Py_ssize_t>rows, sizeof(int64_t))
    column.values = NULL
    return out


cdef object _lend_bytes(capsem_rec_column *column, uint64_t rows):
    """A TEXT column's bytes (uint8), a DIGEST column's digests ((rows, 32) uint8), None for
    other kinds; owned as ``_lend``'s arrays are."""
    if column.kind == CAPSEM_REC_TEXT:
        n = <Py_ssize_t>column.nbytes
    elif column.kind == CAPSEM_REC_DIGEST:
        n = <Py_ssize_t>(32 * rows)
    else:
        return None
    if not n:
        out = np.empty(0, dtype=np.uint8)
    else:
        out = _owned(column.bytes, column.bytes_cap, n, 1)
        column.bytes = NULL
    return out.reshape(-1, 32) if column.kind == CAPSEM_REC_DIGEST else out


cdef bint codes_busy(list codes):
    cdef Codes c
    for c in codes:
        if c.busy:
            return True
    return False


cdef void _column_spec(capsem_rec_column *col, object column, object kind, dict keep) except *:
    """One column of a records scan, from its (record column number, kind) pair."""
    cdef Codes codes
    if column != ROWID and not 0 <= column < 0xFFFFFFFF:
        raise ValueError(f"column {column} is not a record column")
    if column == ROWID and kind is not None:
        raise ValueError("the rowid is an integer column")
    col.column = CAPSEM_REC_ROWID if column == ROWID else <uint32_t>column
    col.values = NULL
    col.capacity = 0
    col.bytes = NULL
    col.bytes_cap = 0
    col.codes = NULL
    if kind is None:
        col.kind = CAPSEM_REC_INTEGER
    elif isinstance(kind, str):
        if kind not in (TEXT, DIGEST, HEX):
            raise ValueError(f"no column kind {kind!r}")
        col.kind = {TEXT: CAPSEM_REC_TEXT, DIGEST: CAPSEM_REC_DIGEST, HEX: CAPSEM_REC_HEX}[kind]
    else:
        codes = <Codes?>kind
        keep[id(codes)] = codes
        col.codes = codes.t
        col.kind = CAPSEM_REC_CODE
