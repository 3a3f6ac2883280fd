# Included by _columns.pyx: a page of rows as Python values (Ledger.events), and the writer's
# text times read natively.

cdef class Rows:
    """Rows read by ``Source.rows``: ``rowid`` (int64 array) and each row's values as Python
    objects on demand (text as str, text that is not UTF-8 with surrogate escapes).
    ``too_large``: the read stopped before a row holding a value past its ``max_value``."""

    cdef cs_rows rows
    cdef readonly int ncols
    cdef readonly bint too_large

    def __dealloc__(self):
        cs_rows_free(&self.rows)

    def __len__(self):
        return self.rows.n

    @property
    def nbytes(self):
        """The bytes of text and blob values read (what ``max_bytes`` bounds)."""
        return self.rows.arena_len

    @property
    def rowid(self):
        if self.rows.n == 0:
            return np.zeros(0, np.int64)
        return np.asarray(<int64_t[:self.rows.n]>self.rows.rowid).copy()

    cdef object value(self, int64_t row, int col):
        cdef cs_item *it = &self.rows.items[row * self.ncols + col]
        if it.cls == CS_INTEGER:
            return it.v.i
        if it.cls == CS_REAL:
            return it.v.d
        if it.cls == CS_TEXT:
            return PyUnicode_DecodeUTF8(<const char *>self.rows.arena + it.v.at, it.len, "surrogateescape")
        if it.cls == CS_BLOB:
            return PyBytes_FromStringAndSize(<const char *>self.rows.arena + it.v.at, it.len)
        return None

    def value_at(self, int64_t row, int col):
        """One value."""
        if not 0 <= row < self.rows.n or not 0 <= col < self.ncols:
            raise IndexError((row, col))
        return self.value(row, col)

    def time_keys(self, int col, bint ms):
        """Each row's time in microseconds since the epoch, and whether it was read: ``ms``, an
        INTEGER milliseconds (times 1000, clamped to int64); else a TEXT in the writer's form
        ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (a valid date and time; any other text is left
        unread here, for the caller to parse). Returns (keys int64, read bool)."""
        if not 0 <= col < self.ncols:
            raise IndexError(col)
        keys = np.zeros(self.rows.n, np.int64)
        read = np.zeros(self.rows.n, np.bool_)
        cdef int64_t[::1] k = keys
        cdef uint8_t[::1] ok = read.view(np.uint8)
        cdef int64_t r, v
        cdef cs_item *it
        with nogil:
            for r in range(self.rows.n):
                it = &self.rows.items[r * self.ncols + col]
                if ms:
                    if it.cls == CS_INTEGER:
                        v = it.v.i
                        if v > INT64_MAX // 1000:
                            k[r] = INT64_MAX
                        elif v < INT64_MIN // 1000:
                            k[r] = INT64_MIN
                        else:
                            k[r] = v * 1000
                        ok[r] = 1
                elif it.cls == CS_TEXT and it.len == 27:
                    ok[r] = _writer_time(self.rows.arena + it.v.at, &k[r])
        return keys, read

    def values(self, int64_t row):
        """Row ``row``'s values, a tuple in column order."""
        if not 0 <= row < self.rows.n:
            raise IndexError(row)
        return tuple([self.value(row, c) for c in range(self.ncols)])

    def column(self, int col):
        """One column's values, a list."""
        if not 0 <= col < self.ncols:
            raise IndexError(col)
        return [self.value(r, col) for r in range(self.rows.n)]

    def dicts(self, names, rows):
        """``{name: value}`` of each row in ``rows`` (positions), built here."""
        cdef tuple keys = tuple(names)
        cdef int c, n = len(keys)
        cdef int64_t r
        cdef list out = []
        cdef dict d
        if n != self.ncols:
            raise ValueError("one name per column")
        for r in rows:
            if not 0 <= r < self.rows.n:
                raise IndexError(r)
            d = {}
            for c in range(n):
                d[keys[c]] = self.value(r, c)
            out.append(d)
        return out

    def sizes(self):
        """Each row's value bytes (text and blob lengths, 8 per number): its share of a page."""
        out = np.zeros(self.rows.n, np.int64)
        cdef int64_t[::1] o = out
        cdef int64_t r
        cdef int c
        cdef cs_item *it
        for r in range(self.rows.n):
            for c in range(self.ncols):
                it = &self.rows.items[r * self.ncols + c]
                o[r] += it.len if (it.cls == CS_TEXT or it.cls == CS_BLOB) else (8 if it.cls != CS_NULL else 0)
        return out


cdef inline int _digits(const uint8_t *p, int n, int *out) noexcept nogil:
    cdef int v = 0, i
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return 0
        v = v * 10 + (p[i] - 48)
    out[0] = v
    return 1


cdef int _writer_time(const uint8_t *p, int64_t *out) noexcept nogil:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (27 bytes) as microseconds since the epoch: 1, or 0
    for any other text or an impossible date (which Python's fromisoformat then judges)."""
    cdef int y, mo, d, h, mi, s, f, dim, era, yoe, doy, doe
    if (p[4] != 45 or p[7] != 45 or p[10] != 84 or p[13] != 58 or p[16] != 58 or p[19] != 46 or p[26] != 90):
        return 0
    if not (_digits(p, 4, &y) and _digits(p + 5, 2, &mo) and _digits(p + 8, 2, &d) and _digits(p + 11, 2, &h)
            and _digits(p + 14, 2, &mi) and _digits(p + 17, 2, &s) and _digits(p + 20, 6, &f)):
        return 0
    if y < 1 or mo < 1 or mo > 12 or d < 1 or h > 23 or mi > 59 or s > 59:
        return 0
    dim = 31
    if mo == 4 or mo == 6 or mo == 9 or mo == 11:
        dim = 30
    elif mo == 2:
        dim = 29 if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) else 28
    if d > dim:
        return 0
    # Days since 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse).
    if mo <= 2:
        y -= 1
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (mo + (-3 if mo > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    out[0] = ((<int64_t>era * 146097 + doe - 719468) * 86400 + h * 3600 + mi * 60 + s) * 1000000 + f
    return 1

