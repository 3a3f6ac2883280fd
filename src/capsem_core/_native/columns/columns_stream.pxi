# Included by _columns.pyx: a stream of record batches, planned on a source and handed out
# once as an "arrow_array_stream" capsule.

cdef class Stream:
    """The record batches of one table's rows (scan_stream.h), planned by ``plan_pages`` or
    ``plan_rows``, then handed out once by ``export`` (the "arrow_array_stream" capsule)."""

    cdef cs_stream *st
    cdef Source source
    cdef readonly tuple names
    cdef int exported

    def __dealloc__(self):
        if self.st != NULL:
            cs_stream_unref(self.st)
            self.st = NULL

    def plan_pages(self, records, reals, empties, uint32_t root, after):
        """The first pass over the mapped pages of the tree at ``root``: ``records`` the
        record column of each column (ROWID for the rowid), ``reals`` its REAL affinity,
        ``empties`` the class an all-NULL column is typed as; rows with rowid past ``after``
        (None: all). "ok", or "unreadable" (read it with statements), "cancelled", "shrank"."""
        cdef size_t n = self.st.ncols, i
        cdef uint32_t *rec = <uint32_t *>malloc((n or 1) * sizeof(uint32_t))
        cdef uint8_t *rl = <uint8_t *>malloc(n or 1)
        cdef uint8_t *em = <uint8_t *>malloc(n or 1)
        cdef int rc
        cdef int has_after = after is not None
        cdef int64_t at = after if after is not None else 0
        try:
            if rec == NULL or rl == NULL or em == NULL:
                raise MemoryError()
            for i in range(n):
                rec[i] = CS_ROWID if records[i] == ROWID else <uint32_t>records[i]
                rl[i] = 1 if reals[i] else 0
                em[i] = <uint8_t>empties[i]
            with nogil:
                rc = cs_stream_plan_pages(self.st, rec, rl, em, root, has_after, at)
        finally:
            free(rec)
            free(rl)
            free(em)
        if rc == CS_NO_MEMORY:
            raise MemoryError()
        return {CS_OK: "ok", CS_CANCELLED: "cancelled", CS_SHRANK: "shrank"}.get(rc, "unreadable")

    def plan_rows(self, str sql, tuple params, bint utf8_db, empties):
        """The first pass by stepping ``sql`` (the chosen columns, then the rowid, in rowid
        order) in the source's transaction. LedgerError when SQLite cannot read it."""
        cdef size_t n = self.st.ncols, i
        cdef uint8_t *em = <uint8_t *>malloc(n or 1)
        cdef sqlite3_stmt *stmt = NULL
        cdef int rc
        if em == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                em[i] = <uint8_t>empties[i]
            rc = sqlite3_prepare_v2(self.source.src.db, sql.encode(), -1, &stmt, NULL)
            if rc != SQLITE_OK:
                raise _read_error(self.source.path, sqlite3_errmsg(self.source.src.db).decode("utf-8", "replace"))
            try:
                _bind(stmt, params)
            except BaseException:
                sqlite3_finalize(stmt)
                raise
            with nogil:
                rc = cs_stream_plan_rows(self.st, stmt, utf8_db, em)  # the stream owns stmt now
            if rc != SQLITE_OK:
                raise _read_error(self.source.path, self.st.message.decode("utf-8", "replace"))
        finally:
            free(em)

    @property
    def path(self):
        """"pages" or "rows" once planned, else None."""
        return {CS_PATH_PAGES: "pages", CS_PATH_ROWS: "rows"}.get(self.st.path)

    @property
    def masks(self):
        """Per column, the classes its values hold (bit k: class k of CLASSES)."""
        return [self.st.masks[i] for i in range(self.st.ncols)]

    @property
    def batches(self):
        """Batches the page path's first pass cut (0 for the statement path: it cuts as it goes)."""
        return self.st.nbatches

    def schema(self):
        """The stream's schema as an "arrow_schema" capsule (a struct of the columns)."""
        if not self.st.path:
            raise RuntimeError("the stream is not planned")
        cdef ArrowSchema *s = <ArrowSchema *>calloc(1, sizeof(ArrowSchema))
        if s == NULL:
            raise MemoryError()
        if cs_stream_schema(self.st, s) != 0:
            free(s)
            raise MemoryError()
        return _schema_capsule(s)

    def export(self):
        """The "arrow_array_stream" capsule, once: its workers start now."""
        if not self.st.path:
            raise RuntimeError("the stream is not planned")
        if self.exported:
            raise RuntimeError("this stream was handed out already: a scan is read once")
        cdef ArrowArrayStream *s = <ArrowArrayStream *>calloc(1, sizeof(ArrowArrayStream))
        if s == NULL:
            raise MemoryError()
        if cs_stream_export(self.st, s) != 0:
            free(s)
            raise MemoryError("could not start the stream's workers")
        self.exported = 1
        return _stream_capsule(s)

    def progress(self):
        """(rows, batches, last rowid handed out, exhausted, error message or None)."""
        return (self.st.out_rows, self.st.out_batches, self.st.out_last_rowid, bool(self.st.exhausted),
                self.st.message.decode("utf-8", "replace") if self.st.error else None)

