# cython: language_level=3, boundscheck=False, wraparound=False
"""Columns of session.db as Arrow data: a table's rows as a stream of record batches, and any
set of buffers (a BodyBatch's) as an Arrow struct array, through the Arrow C data interface
and its PyCapsule protocol ("arrow_schema", "arrow_array", "arrow_array_stream"), with no
Arrow library linked.

``Source`` is one read-only connection of its own to session.db (the URI and busy timeout the
Python layer chose) with its read transaction, the queries the Python layer asks of that
snapshot (``fetch``), and a map of the file for the page path. ``Source.stream`` plans a
stream of one table's rows (scan_stream.h: pages or statements, a first pass fixing each
column's Arrow type), whose ``export`` hands out the C stream; ``Source.rows`` reads a page of
rows into Python values (``Rows``, for ``Ledger.events``). ``export_arrays`` lends Python
buffers to Arrow, keeping their owner alive until Arrow releases them. This module runs only
the SQL its caller writes, and imports nothing from the Python layer.
"""

import errno
import os

import numpy as np

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.pycapsule cimport PyCapsule_Destructor, PyCapsule_GetPointer, PyCapsule_New
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject, PyTypeObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport INT64_MAX, INT64_MIN, int8_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memset, strlen

from capsem_core._native import _errors

cdef extern from "status.h":
    int CAPSEM_R_TABLE_OPEN
    int CAPSEM_R_TABLE_READ

cdef extern from "map_guard.h" nogil:
    int capsem_guard_install()

cdef extern from "sqlite3.h" nogil:
    ctypedef struct sqlite3:
        pass
    ctypedef struct sqlite3_stmt:
        pass
    int SQLITE_OK, SQLITE_ROW, SQLITE_DONE, SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL
    int SQLITE_TOOBIG
    int sqlite3_prepare_v2(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, const char **tail)
    int sqlite3_step(sqlite3_stmt *st)
    int sqlite3_reset(sqlite3_stmt *st)
    int sqlite3_finalize(sqlite3_stmt *st)
    int sqlite3_column_count(sqlite3_stmt *st)
    int sqlite3_column_type(sqlite3_stmt *st, int i)
    long long sqlite3_column_int64(sqlite3_stmt *st, int i)
    double sqlite3_column_double(sqlite3_stmt *st, int i)
    const unsigned char *sqlite3_column_text(sqlite3_stmt *st, int i)
    const void *sqlite3_column_blob(sqlite3_stmt *st, int i)
    int sqlite3_column_bytes(sqlite3_stmt *st, int i)
    int sqlite3_bind_int64(sqlite3_stmt *st, int i, long long v)
    int sqlite3_bind_double(sqlite3_stmt *st, int i, double v)
    int sqlite3_bind_null(sqlite3_stmt *st, int i)
    int sqlite3_bind_text(sqlite3_stmt *st, int i, const char *p, int n, void *destructor)
    int sqlite3_bind_blob(sqlite3_stmt *st, int i, const void *p, int n, void *destructor)
    const char *sqlite3_errmsg(sqlite3 *db)
    void *SQLITE_TRANSIENT

cdef extern from "arrow_abi.h":
    struct ArrowSchema:
        const char *format
        const char *name
        void (*release)(ArrowSchema *) noexcept nogil
    struct ArrowArray:
        int64_t length
        void (*release)(ArrowArray *) noexcept nogil
    struct ArrowArrayStream:
        void (*release)(ArrowArrayStream *) noexcept nogil

cdef extern from "arrow_export.h" nogil:
    ctypedef struct cs_mem:
        long refs
        void (*drop)(cs_mem *) noexcept nogil
        void *owner
    cs_mem *cs_mem_new()
    void cs_mem_unref(cs_mem *m)
    int cs_array_node(ArrowArray *out, cs_mem *m, int64_t length, int64_t null_count, int nbuf,
                      const void *b0, const void *b1, const void *b2, int nkids)
    ArrowArray *cs_array_child(ArrowArray *parent, int i)
    int cs_schema_node(ArrowSchema *out, const char *format, const char *name, int64_t flags, int nkids)
    ArrowSchema *cs_schema_child(ArrowSchema *parent, int i)
    void cs_array_release(ArrowArray *a)
    void cs_schema_release(ArrowSchema *s)
    int cs_stream_of_one(ArrowSchema *schema, ArrowArray *array, ArrowArrayStream *out)

cdef extern from "utf8_check.h" nogil:
    int cs_utf8_check(const uint8_t *p, size_t n)

cdef extern from "column_build.h" nogil:
    int CS_NULL, CS_INTEGER, CS_REAL, CS_TEXT, CS_TEXT_BYTES, CS_BLOB, CS_CLASSES
    const char *const CS_CLASS_NAMES[6]

cdef extern from "page_map.h" nogil:
    ctypedef struct capsem_page_header:
        uint32_t page_size
        uint32_t usable
        uint32_t page_count
        uint32_t freelist_count
        uint32_t schema_cookie
    ctypedef struct capsem_page_finding:
        pass
    int capsem_page_header_parse(const uint8_t *map, uint64_t size, capsem_page_header *h, capsem_page_finding *bad)

cdef extern from "archive_file.h" nogil:
    ctypedef struct capsem_archive_file:
        int fd
        const uint8_t *map
        uint64_t size

cdef extern from "scan_pages.h" nogil:
    uint32_t CS_ROWID
    int CS_OK, CS_CANCELLED, CS_NO_MEMORY, CS_UNREADABLE, CS_SHRANK, CS_TOO_LARGE
    ctypedef struct cs_leaf:
        pass
    ctypedef struct cs_pages:
        const uint8_t *map
        uint64_t size
        capsem_page_header h
        uint32_t root
        int has_after
        int64_t after
        size_t ncols
        const uint32_t *record
        const uint8_t *real
        volatile const int *cancel
        int64_t max_rows
    int cs_pages_open(cs_pages *s)
    void cs_pages_close(cs_pages *s)
    ctypedef union cs_item_value:
        int64_t i
        double d
        uint64_t at
    ctypedef struct cs_item:
        uint8_t cls
        uint32_t len
        cs_item_value v
    ctypedef struct cs_rows:
        int64_t n
        int64_t *rowid
        cs_item *items
        uint8_t *arena
        uint64_t max_value
    void cs_rows_free(cs_rows *r)
    int cs_pages_rows(const cs_pages *s, int64_t limit, cs_rows *out)

cdef extern from "scan_rows.h" nogil:
    int cs_rows_read(sqlite3_stmt *st, size_t ncols, int utf8_db, int64_t limit, cs_rows *out, char *err,
                     size_t errlen)

cdef extern from "scan_stream.h" nogil:
    ctypedef struct cs_map:
        capsem_archive_file file
    cs_map *cs_map_open(const char *path, int *status, int *err)
    void cs_map_unref(cs_map *m)
    ctypedef struct cs_source:
        sqlite3 *db
        int in_txn
        cs_map *map
    int cs_source_open(const char *uri, int busy_ms, cs_source **out, char *err, size_t errlen)
    void cs_source_unref(cs_source *s)
    int cs_source_begin(cs_source *s, char *err, size_t errlen)
    void cs_source_end(cs_source *s)
    void cs_source_use_map(cs_source *s, cs_map *m)
    int CS_PATH_PAGES, CS_PATH_ROWS
    ctypedef struct cs_stream:
        int path
        size_t ncols
        uint8_t *masks
        int64_t batch_rows, batch_bytes
        int threads
        int end_txn
        int error
        char message[512]
        int64_t out_rows, out_batches, out_last_rowid
        int exhausted
        int started
        size_t nbatches
    cs_stream *cs_stream_new(cs_source *src, size_t ncols, const char *const *names)
    void cs_stream_unref(cs_stream *st)
    int cs_stream_plan_pages(cs_stream *st, const uint32_t *record, const uint8_t *real, const uint8_t *empty,
                             uint32_t root, int has_after, int64_t after)
    int cs_stream_plan_rows(cs_stream *st, sqlite3_stmt *stmt, int utf8_db, const uint8_t *empty)
    int cs_stream_export(cs_stream *st, ArrowArrayStream *out)
    int cs_stream_schema(cs_stream *st, ArrowSchema *out)

cdef extern from "pthread.h" nogil:
    ctypedef struct pthread_mutex_t:
        pass

if capsem_guard_install() != 0:
    raise ImportError("capsem_core._native._columns could not install its SIGBUS guard")

ROWID = -1
# The storage classes, by number (a union column's type ids) and name (its children's names).
CLASSES = tuple(CS_CLASS_NAMES[k].decode() for k in range(6))
CLASS_NULL, CLASS_INTEGER, CLASS_REAL, CLASS_TEXT, CLASS_TEXT_BYTES, CLASS_BLOB = range(6)

SCHEMA_CAPSULE = b"arrow_schema"
ARRAY_CAPSULE = b"arrow_array"
STREAM_CAPSULE = b"arrow_array_stream"


cdef object _read_error(path, detail):
    return _errors.error(CAPSEM_R_TABLE_READ, path, detail=detail)


# ---- capsules -------------------------------------------------------------------------------

cdef void _free_schema_capsule(object capsule) noexcept:
    cdef ArrowSchema *s = <ArrowSchema *>PyCapsule_GetPointer(capsule, b"arrow_schema")
    if s != NULL:
        if s.release != NULL:
            s.release(s)
        free(s)


cdef void _free_array_capsule(object capsule) noexcept:
    cdef ArrowArray *a = <ArrowArray *>PyCapsule_GetPointer(capsule, b"arrow_array")
    if a != NULL:
        if a.release != NULL:
            a.release(a)
        free(a)


cdef void _free_stream_capsule(object capsule) noexcept:
    cdef ArrowArrayStream *s = <ArrowArrayStream *>PyCapsule_GetPointer(capsule, b"arrow_array_stream")
    if s != NULL:
        if s.release != NULL:
            with nogil:  # joining the workers may wait for a batch in progress
                s.release(s)
        free(s)


cdef object _schema_capsule(ArrowSchema *s):
    return PyCapsule_New(s, b"arrow_schema", <PyCapsule_Destructor>_free_schema_capsule)


cdef object _array_capsule(ArrowArray *a):
    return PyCapsule_New(a, b"arrow_array", <PyCapsule_Destructor>_free_array_capsule)


# ---- the source ------------------------------------------------------------------------------

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


cdef class FileMap:
    """session.db mapped read-only (no symbolic link, a regular file), to be read by sources
    whose snapshot it is; kept across reads so its pages stay in the process's page tables.
    OSError naming the file when it cannot be opened or mapped."""

    cdef cs_map *m
    cdef readonly object path

    def __cinit__(self, path):
        self.m = NULL
        self.path = os.fspath(path)
        cdef bytes cpath = os.fsencode(self.path)
        cdef const char *p = cpath
        cdef int status = 0, err = 0
        with nogil:
            self.m = cs_map_open(p, &status, &err)
        if self.m == NULL:
            raise OSError(err or errno.EINVAL, "a symbolic link or not a regular file" if not err else os.strerror(err),
                          self.path)

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
        cdef bytes curi = uri.encode()
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

    def rows(self, int64_t limit, *, int64_t max_value, sql=None, tuple params=(), bint utf8_db=True,
             records=None, reals=None, int64_t root=0, after=None, int ncols=0):
        """Up to ``limit`` rows as ``Rows``: from the mapped pages (``records``, ``reals``,
        ``root``, ``after``: as ``Stream.plan_pages``; None when the pages are not as SQLite
        writes them) or, with ``sql``, by stepping the statement (its result columns the
        chosen ones and, last, the rowid). A TEXT or BLOB longer than ``max_value`` bytes
        raises ValueError."""
        self._usable()
        cdef Rows out = Rows.__new__(Rows)
        out.rows.max_value = max_value
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
                raise ValueError(err.decode("utf-8", "replace"))
            if rc != SQLITE_OK:
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
            with nogil:
                rc = cs_pages_open(&pages)
                if rc == CS_OK:
                    rc = cs_pages_rows(&pages, limit, &out.rows)
            if rc == CS_TOO_LARGE:
                raise ValueError(f"a value longer than {max_value} bytes")
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


# ---- a stream of record batches ----------------------------------------------------------------

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
        return PyCapsule_New(s, b"arrow_array_stream", <PyCapsule_Destructor>_free_stream_capsule)

    def progress(self):
        """(rows, batches, last rowid handed out, exhausted, error message or None)."""
        return (self.st.out_rows, self.st.out_batches, self.st.out_last_rowid, bool(self.st.exhausted),
                self.st.message.decode("utf-8", "replace") if self.st.error else None)


# ---- rows of a page of events ---------------------------------------------------------------------

cdef class Rows:
    """Rows read by ``Source.rows``: ``rowid`` (int64 array) and each row's values as Python
    objects on demand (text as str, text that is not UTF-8 with surrogate escapes)."""

    cdef cs_rows rows
    cdef readonly int ncols

    def __dealloc__(self):
        cs_rows_free(&self.rows)

    def __len__(self):
        return self.rows.n

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


cdef extern from *:
    """
    /* Set a slot of a new object through its member descriptor (a slotted class's field),
     * as attribute assignment would, without the class's own __setattr__. */
    static int cs_set_slot(PyObject *descr, PyObject *obj, PyObject *value) {
        descrsetfunc set = Py_TYPE(descr)->tp_descr_set;
        if (!set) {
            PyErr_SetString(PyExc_TypeError, "not a slot descriptor");
            return -1;
        }
        return set(descr, obj, value);
    }
    """
    int cs_set_slot(object descr, object obj, object value) except -1

cdef extern from "math.h" nogil:
    double nearbyint(double x)

# The last millisecond a ledger timestamp renders (9999-12-31T23:59:59.999Z).
cdef int64_t _MAX_MS = 253402300799999


cdef str _ledger_time(int64_t ms):
    """``ledger_timestamp(ms / 1000)`` of the writer: the same double arithmetic (division,
    then times 10^6 rounded half to even), then the proleptic Gregorian date of the second."""
    cdef double now = <double>ms / 1000.0
    cdef int64_t micros = <int64_t>nearbyint(now * 1000000.0)
    cdef int64_t second = micros // 1000000, fraction = micros - second * 1000000
    cdef int64_t days = second // 86400, rest = second - days * 86400
    cdef int64_t z = days + 719468, era, doe, yoe, y, doy, mp, d, m
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    if m <= 2:
        y += 1
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (y, m, d, rest // 3600, rest // 60 % 60, rest % 60, fraction)


def ledger_time(int64_t ms):
    """A millisecond time as the writer stamps text times (0 <= ms <= 9999-12-31)."""
    if not 0 <= ms <= _MAX_MS:
        raise ValueError("outside the years a ledger timestamp renders")
    return _ledger_time(ms)


def build_events(cls, tuple slots, list tables, list time_ms, list time_columns, list rows, list ids, which,
                 positions, dict bodies, shown):
    """The events of a page, in merge order, as instances of the slotted class ``cls`` whose
    fields' descriptors are ``slots`` (table, id, event_id, timestamp, row, bodies): event k
    is row ``positions[k]`` of taken table ``which[k]`` (its dict in ``rows``, its id in
    ``ids``). A millisecond time is rendered here; any time other than that or a text is
    ``shown(table index, value)``."""
    cdef Py_ssize_t n = len(which), j
    cdef list out = [None] * n
    cdef int k
    cdef int64_t i
    cdef dict row
    cdef PyTypeObject *tp = <PyTypeObject *>cls
    cdef object event_id, when, stamp, obj
    for j in range(n):
        k = which[j]
        i = positions[j]
        row = <dict>(<list>rows[k])[i]
        event_id = row["event_id"]
        when = row[time_columns[k]]
        if time_ms[k] and type(when) is int and 0 <= when <= _MAX_MS:
            stamp = _ledger_time(when)
        elif type(when) is str:
            stamp = when
        else:
            stamp = shown(k, when)
        obj = cls.__new__(cls)
        cs_set_slot(slots[0], obj, tables[k])
        cs_set_slot(slots[1], obj, (<list>ids[k])[i])
        cs_set_slot(slots[2], obj, event_id if type(event_id) is str else str(event_id))
        cs_set_slot(slots[3], obj, stamp)
        cs_set_slot(slots[4], obj, row)
        cs_set_slot(slots[5], obj, bodies.get((tables[k], event_id), ()))
        out[j] = obj
    return out


def merge_heads(list keys, list ids, list sizes, list numbers, int64_t limit, int64_t budget, list more):
    """Rows of several tables in the order a k-way merge of their heads gives (each table's
    rows stay in their order; the next row is the smallest head by (key, number, id)), until
    ``limit`` rows or until the sizes taken reach ``budget``. A table whose ``more`` is true
    has rows past those given: the merge stops when it runs out of them, since its next row
    might come next. Returns (table, row) positions as two int64 arrays and the table that
    ran out (-1 for none)."""
    cdef int k = len(keys), t, best, starved = -1
    cdef int64_t n = 0, spent = 0
    out_t = np.zeros(max(limit, 0), np.int64)
    out_r = np.zeros(max(limit, 0), np.int64)
    cdef int64_t[::1] ot = out_t, orow = out_r
    cdef list kv = [np.ascontiguousarray(x, np.int64) for x in keys]
    cdef list iv = [np.ascontiguousarray(x, np.int64) for x in ids]
    cdef list sv = [np.ascontiguousarray(x, np.int64) for x in sizes]
    cdef int64_t[:, ::1] heads = np.zeros((max(k, 1), 4), np.int64)  # at, length, number, -
    cdef const int64_t *kp[64]
    cdef const int64_t *ip[64]
    cdef const int64_t *sp[64]
    cdef const int64_t[::1] view
    if k > 64:
        raise ValueError("at most 64 tables")
    for t in range(k):
        view = kv[t]
        kp[t] = &view[0] if view.shape[0] else NULL
        heads[t, 1] = view.shape[0]
        view = iv[t]
        ip[t] = &view[0] if view.shape[0] else NULL
        view = sv[t]
        sp[t] = &view[0] if view.shape[0] else NULL
        heads[t, 2] = numbers[t]
        heads[t, 3] = 1 if more[t] else 0
    with nogil:
        while n < limit and starved < 0:
            best = -1
            for t in range(k):
                if heads[t, 0] >= heads[t, 1]:
                    if heads[t, 3]:
                        starved = t
                        break
                    continue
                if best < 0:
                    best = t
                    continue
                if (kp[t][heads[t, 0]] < kp[best][heads[best, 0]] or
                        (kp[t][heads[t, 0]] == kp[best][heads[best, 0]] and
                         (heads[t, 2] < heads[best, 2] or
                          (heads[t, 2] == heads[best, 2] and ip[t][heads[t, 0]] < ip[best][heads[best, 0]])))):
                    best = t
            if best < 0 or starved >= 0:
                break
            ot[n] = best
            orow[n] = heads[best, 0]
            spent += sp[best][heads[best, 0]]
            heads[best, 0] += 1
            n += 1
            if spent >= budget:
                break
    return out_t[:n], out_r[:n], starved


# ---- buffers lent to Arrow ---------------------------------------------------------------------

cdef void _drop_owner(cs_mem *m) noexcept nogil:
    with gil:
        Py_XDECREF(<PyObject *>m.owner)
    free(m)


def utf8_valid(data, offsets):
    """Whether every value of a text column (``data`` uint8, ``offsets`` int64, n + 1) is
    valid UTF-8."""
    cdef const uint8_t[::1] d = data
    cdef const int64_t[::1] o = offsets
    cdef Py_ssize_t i, n = o.shape[0] - 1
    cdef int ok = 1
    cdef const uint8_t *base = &d[0] if d.shape[0] else NULL
    for i in range(n):
        if o[i] < 0 or o[i + 1] < o[i] or o[i + 1] > d.shape[0]:
            raise ValueError("offsets outside the data")
    with nogil:
        for i in range(n):
            if o[i + 1] > o[i] and not cs_utf8_check(base + o[i], <size_t>(o[i + 1] - o[i])):
                ok = 0
                break
    return bool(ok)


cdef int64_t _EMPTY[2]


cdef const void *_address(object buf, list views) except? NULL:
    if buf is None:
        return NULL
    cdef const uint8_t[::1] view = memoryview(buf).cast("B")
    views.append(view)
    if view.shape[0] == 0:
        return <const void *>&_EMPTY[0]
    return <const void *>&view[0]


def stream_of(schema, array):
    """An "arrow_array_stream" capsule of the one batch in an ("arrow_schema", "arrow_array")
    pair of capsules, which it takes over (they are left released)."""
    cdef ArrowSchema *s = <ArrowSchema *>PyCapsule_GetPointer(schema, b"arrow_schema")
    cdef ArrowArray *a = <ArrowArray *>PyCapsule_GetPointer(array, b"arrow_array")
    if s.release == NULL or a.release == NULL:
        raise ValueError("the capsules were consumed already")
    cdef ArrowArrayStream *out = <ArrowArrayStream *>calloc(1, sizeof(ArrowArrayStream))
    if out == NULL or cs_stream_of_one(s, a, out) != 0:
        free(out)
        raise MemoryError()
    return PyCapsule_New(out, b"arrow_array_stream", <PyCapsule_Destructor>_free_stream_capsule)


def export_arrays(fields, int64_t length, keep):
    """An Arrow struct array of ``length`` rows lent from Python buffers, as
    ("arrow_schema", "arrow_array") capsules. ``fields``: (name, format, null_count, buffers)
    per column, buffers a tuple of objects with the buffer protocol (C-contiguous) or None,
    laid out as the format requires; ``keep`` holds them: it stays referenced until Arrow has
    released every array (the last release drops it, under the GIL, from whatever thread)."""
    cdef list views = []
    cdef list specs = list(fields)
    cdef int n = len(specs), i, k
    cdef const void *b[3]
    cdef cs_mem *m = cs_mem_new()
    if m == NULL:
        raise MemoryError()
    m.drop = _drop_owner
    m.owner = <void *>keep
    Py_INCREF(keep)
    cdef ArrowArray *array = <ArrowArray *>calloc(1, sizeof(ArrowArray))
    cdef ArrowSchema *schema = <ArrowSchema *>calloc(1, sizeof(ArrowSchema))
    try:
        if array == NULL or schema == NULL:
            raise MemoryError()
        if cs_schema_node(schema, b"+s", b"", 0, n) != 0 or cs_array_node(array, m, length, 0, 1, NULL, NULL, NULL, n) != 0:
            raise MemoryError()
        for i in range(n):
            name, fmt, nulls, bufs = specs[i]
            if len(bufs) > 3:
                raise ValueError("at most three buffers")
            for k in range(3):
                b[k] = _address(bufs[k], views) if k < len(bufs) else NULL
            if cs_schema_node(cs_schema_child(schema, i), fmt.encode(), str(name).encode("utf-8", "surrogateescape"),
                              2, 0) != 0:
                raise MemoryError()
            if cs_array_node(cs_array_child(array, i), m, length, nulls, len(bufs), b[0], b[1], b[2], 0) != 0:
                raise MemoryError()
    except BaseException:
        cs_schema_release(schema)
        cs_array_release(array)
        free(schema)
        free(array)
        cs_mem_unref(m)
        raise
    cs_mem_unref(m)  # the array nodes hold it
    return _schema_capsule(schema), _array_capsule(array)
