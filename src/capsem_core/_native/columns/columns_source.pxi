# Included by _columns.pyx: the source (a connection of its own, its read transaction, the
# queries the Python layer asks of its snapshot) and the map of session.db it may read.

cdef object _value(sqlite3_stmt *st, int i):
    cdef int kind = sqlite3_column_type(st, i)
    cdef const char *p
    cdef int n
    if kind == SQLITE_INTEGER:
        return sqlite3_column_int64(st, i)
    if kind == SQLITE_FLOAT:
        return sqlite3_column_double(st, i)
    if kind == SQLITE_TEXT:
        p = <const char *>sqlite3_column_text(st, i)
        n = sqlite3_column_bytes(st, i)
        return PyUnicode_DecodeUTF8(p, n, "surrogateescape")
    if kind == SQLITE_BLOB:
        p = <const char *>sqlite3_column_blob(st, i)
        n = sqlite3_column_bytes(st, i)
        return PyBytes_FromStringAndSize(p, n) if n else b""
    return None


cdef int _bind(sqlite3_stmt *st, tuple params) except -1:
    cdef int i
    cdef bytes raw
    for i, value in enumerate(params, 1):
        if value is None:
            sqlite3_bind_null(st, i)
        elif isinstance(value, bool) or isinstance(value, int):
            sqlite3_bind_int64(st, i, value)
        elif isinstance(value, float):
            sqlite3_bind_double(st, i, value)
        elif isinstance(value, str):
            raw = value.encode("utf-8", "surrogateescape")
            sqlite3_bind_text(st, i, raw, len(raw), SQLITE_TRANSIENT)
        elif isinstance(value, bytes):
            sqlite3_bind_blob(st, i, <const char *>value, len(value), SQLITE_TRANSIENT)
        else:
            raise TypeError(f"cannot bind {type(value).__name__}")
    return 0


# The bytes of session.db each scan (its threads together) or page of rows keeps resident.
WINDOW_BYTES = CAPSEM_WINDOW_DEFAULT_BYTES


cdef class FileMap:
    """session.db mapped read-only (no symbolic link, a regular file), to be read by sources
    whose snapshot it is; kept across reads, sparing each its open and map. ``window``: the
    bytes of it each scan or page of rows keeps resident (the pages behind it are dropped from
    the process; the page cache keeps them), ``WINDOW_BYTES`` by default, 0 for no bound.
    OSError naming the file when it cannot be opened or mapped, ValueError for a negative
    window."""

    cdef cs_map *m
    cdef readonly object path
    cdef readonly uint64_t window

    def __cinit__(self, path, window=None):
        self.m = NULL
        if window is not None and window < 0:
            raise ValueError("window must not be negative")
        self.window = CAPSEM_WINDOW_DEFAULT_BYTES if window is None else window
        self.path = os.fspath(path)
        cdef bytes cpath = os.fsencode(self.path)
        cdef const char *p = cpath
        cdef int status = 0, err = 0
        with nogil:
            self.m = cs_map_open(p, &status, &err)
        if self.m == NULL:
            raise OSError(err or errno.EINVAL, "a symbolic link or not a regular file" if not err else os.strerror(err),
                          self.path)
        self.m.window = self.window

    def __dealloc__(self):
        cs_map_unref(self.m)
        self.m = NULL

    def close(self):
        """Drop this object's reference (sources reading it keep theirs)."""
        cs_map_unref(self.m)
        self.m = NULL

    @property
    def size(self):
        return self.m.file.size if self.m != NULL else 0

    def header(self):
        """The header fields the snapshot check compares (page_size, page_count,
        freelist_count, schema_cookie), or None when SQLite would not open the file."""
        if self.m == NULL:
            return None
        return _header(self.m)


cdef object _header(cs_map *m):
    cdef capsem_page_header h
    cdef uint8_t bad[64]
    if capsem_page_header_parse(m.file.map, m.file.size, &h, <capsem_page_finding *>bad) != 0:
        return None
    return {"page_size": h.page_size, "page_count": h.page_count, "freelist_count": h.freelist_count,
            "schema_cookie": h.schema_cookie}


cdef class Source:
    """One read-only connection to session.db and its read transaction (scan_stream.h).

    ``begin()`` starts a read transaction and fixes its snapshot; ``fetch`` runs the
    caller's queries in it; ``map()`` maps the database file (for a page path, valid only
    where the caller has found the file to be the snapshot); ``end()`` ends the transaction.
    Not shared between threads. LedgerError naming ``path`` when the file cannot be opened or
    read."""

    cdef cs_source *src
    cdef readonly object path
    cdef int lent  # a stream took the connection: no more queries through this object

    def __cinit__(self, str uri, int busy_ms, path):
        self.src = NULL
        self.path = path
        cdef char err[256]
        err[0] = 0
        cdef bytes curi = os.fsencode(uri)   # a path is bytes: one not UTF-8 comes back as it was
        cdef const char *u = curi
        cdef int rc
        with nogil:
            rc = cs_source_open(u, busy_ms, &self.src, err, sizeof(err))
        if rc != SQLITE_OK:
            raise _errors.error(CAPSEM_R_TABLE_OPEN, path, detail=err.decode("utf-8", "replace"))

    def __dealloc__(self):
        if self.src != NULL:
            cs_source_unref(self.src)
            self.src = NULL

    cdef int _usable(self) except -1:
        if self.src == NULL:
            raise _errors.LedgerError("the column reader is closed", self.path)
        if self.lent:
            raise RuntimeError("this source's connection belongs to a stream now")
        return 0

    def begin(self):
        """Start a read transaction (ending one in progress) and fix its snapshot."""
        self._usable()
        cdef char err[256]
        err[0] = 0
        cdef int rc
        with nogil:
            rc = cs_source_begin(self.src, err, sizeof(err))
        if rc != SQLITE_OK:
            raise _read_error(self.path, err.decode("utf-8", "replace"))

    def end(self):
        """End the read transaction (and stop reading the map, which was only its snapshot)."""
        if self.src != NULL and not self.lent:
            cs_source_end(self.src)
            cs_source_use_map(self.src, NULL)

    @property
    def in_transaction(self):
        return self.src != NULL and self.src.in_txn != 0

    def close(self):
        """Release the connection (a stream made from it keeps its own reference)."""
        if self.src != NULL:
            if not self.lent:
                cs_source_end(self.src)
            cs_source_unref(self.src)
            self.src = NULL

    def fetch(self, str sql, tuple params=()):
        """Every row of one query in the transaction, as tuples (int, float, str - text that
        is not UTF-8 with surrogate escapes -, bytes or None)."""
        self._usable()
        cdef bytes csql = sql.encode()
        cdef sqlite3_stmt *st = NULL
        cdef int rc = sqlite3_prepare_v2(self.src.db, csql, -1, &st, NULL)
        if rc != SQLITE_OK:
            raise _read_error(self.path, sqlite3_errmsg(self.src.db).decode("utf-8", "replace"))
        cdef list out = []
        cdef int n, i
        try:
            _bind(st, params)
            n = sqlite3_column_count(st)
            while True:
                with nogil:
                    rc = sqlite3_step(st)
                if rc != SQLITE_ROW:
                    break
                out.append(tuple([_value(st, i) for i in range(n)]))
            if rc != SQLITE_DONE:
                raise _read_error(self.path, sqlite3_errmsg(self.src.db).decode("utf-8", "replace"))
            return out
        finally:
            sqlite3_finalize(st)

    def use_map(self, FileMap file):
        """Read ``file`` as this transaction's snapshot (the caller has found it is), or no
        map (None)."""
        if self.src != NULL:
            cs_source_use_map(self.src, file.m if file is not None else NULL)

    def header(self):
        """The header of the map this source reads (see FileMap.header), or None."""
        self._usable()
        return _header(self.src.map) if self.src.map != NULL else None

    def stream(self, names, *, int threads, int64_t batch_rows, int64_t batch_bytes, bint end_txn):
        """A stream of a table's columns ``names`` on this source's transaction, to plan with
        ``plan_pages`` or ``plan_rows``. With ``end_txn`` the stream ends the transaction once
        it is done, and this source lends it its connection for good."""
        self._usable()
        cdef list encoded = [str(name).encode("utf-8", "surrogateescape") for name in names]
        cdef size_t n = len(encoded), i
        cdef const char **cnames = <const char **>malloc((n if n else 1) * sizeof(char *))
        if cnames == NULL:
            raise MemoryError()
        for i in range(n):
            cnames[i] = encoded[i]
        cdef cs_stream *st = cs_stream_new(self.src, n, cnames)
        free(cnames)
        if st == NULL:
            raise MemoryError()
        st.threads = max(1, threads)
        st.batch_rows = max(1, batch_rows)
        st.batch_bytes = max(1, batch_bytes)
        st.end_txn = end_txn
        cdef Stream out = Stream.__new__(Stream)
        out.st = st
        out.source = self
        out.names = tuple(names)
        if end_txn:
            self.lent = 1
        return out

    def rows(self, int64_t limit, *, int64_t max_value, int64_t max_bytes=0, sql=None, tuple params=(),
             bint utf8_db=True, records=None, reals=None, int64_t root=0, after=None, int ncols=0):
        """Up to ``limit`` rows as ``Rows``: from the mapped pages (``records``, ``reals``,
        ``root``, ``after``: as ``Stream.plan_pages``; None when the pages are not as SQLite
        writes them) or, with ``sql``, by stepping the statement (its result columns the
        chosen ones and, last, the rowid). With ``max_bytes`` no row is read once the values
        read hold that many bytes (the first always is). The read stops before a row with a
        TEXT or BLOB longer than ``max_value`` bytes: the rows before it, ``too_large`` set."""
        self._usable()
        cdef Rows out = Rows.__new__(Rows)
        out.rows.max_value = max_value
        out.rows.max_bytes = max_bytes if max_bytes > 0 else 0
        cdef char err[256]
        err[0] = 0
        cdef int rc
        cdef sqlite3_stmt *st = NULL
        cdef cs_pages pages
        cdef uint32_t *rec = NULL
        cdef uint8_t *rl = NULL
        cdef size_t i
        cdef capsem_page_finding *bad
        if sql is not None:
            out.ncols = ncols
            rc = sqlite3_prepare_v2(self.src.db, sql.encode(), -1, &st, NULL)
            if rc != SQLITE_OK:
                raise _read_error(self.path, sqlite3_errmsg(self.src.db).decode("utf-8", "replace"))
            try:
                _bind(st, params)
                with nogil:
                    rc = cs_rows_read(st, <size_t>ncols, utf8_db, limit, &out.rows, err, sizeof(err))
            finally:
                sqlite3_finalize(st)
            if rc == SQLITE_TOOBIG:
                out.too_large = True
            elif rc != SQLITE_OK:
                raise _read_error(self.path, err.decode("utf-8", "replace"))
            return out
        if self.src.map == NULL:
            return None
        out.ncols = len(records)
        memset(&pages, 0, sizeof(pages))
        rec = <uint32_t *>malloc((out.ncols or 1) * sizeof(uint32_t))
        rl = <uint8_t *>malloc(out.ncols or 1)
        bad = <capsem_page_finding *>malloc(256)
        try:
            if rec == NULL or rl == NULL or bad == NULL:
                raise MemoryError()
            for i in range(<size_t>out.ncols):
                rec[i] = CS_ROWID if records[i] == ROWID else <uint32_t>records[i]
                rl[i] = 1 if reals[i] else 0
            if capsem_page_header_parse(self.src.map.file.map, self.src.map.file.size, &pages.h, bad) != 0:
                return None
            pages.map = self.src.map.file.map
            pages.size = self.src.map.file.size
            pages.root = <uint32_t>root
            pages.has_after = after is not None
            pages.after = after if after is not None else 0
            pages.ncols = out.ncols
            pages.record = rec
            pages.real = rl
            pages.max_rows = limit
            pages.shared = cs_source_rows_window(self.src)
            with nogil:
                rc = cs_pages_open(&pages)
                if rc == CS_OK:
                    rc = cs_pages_rows(&pages, limit, &out.rows)
            if rc == CS_TOO_LARGE:
                out.too_large = True
                return out
            if rc == CS_NO_MEMORY:
                raise MemoryError()
            if rc != CS_OK:
                return None
            return out
        finally:
            cs_pages_close(&pages)
            free(rec)
            free(rl)
            free(bad)

