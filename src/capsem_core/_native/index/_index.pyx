# cython: language_level=3, boundscheck=False, wraparound=False
"""Scans of the body index (event_body_blobs, body_blocks) through the SQLite C API.

Rows go from sqlite3_step straight into numpy arrays (no Python object per row, the GIL
released while stepping), inside one read transaction on a read-only connection. The
module links the same libsqlite3 as the interpreter's sqlite3 module. It opens what it is
given: the URI and busy timeout (the Python layer's connection policy chooses them), and
imports nothing from the Python layer.
"""

import os
import sys

# The interpreter's SQLite extension itself (sqlite3 re-exports it): its Connection type is
# the one whose C layout _shareable_handle reads, and its file tells which libsqlite3 made
# the handle. No SQL runs through it here.
import _sqlite3

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from capsem_core._native import _errors

cnp.import_array()

cdef extern from "sqlite3.h" nogil:
    const char *sqlite3_libversion()
    const char *sqlite3_sourceid()
    int SQLITE_OK

cdef extern from "sqlite3.h":
    ctypedef struct sqlite3_db "sqlite3":
        pass
    const char *sqlite3_db_filename(sqlite3_db *db, const char *name)

cdef extern from *:
    """
    #include <dlfcn.h>
    #include <sqlite3.h>
    /* The head of CPython's pysqlite_Connection (Modules/_sqlite/connection.h, the same in
     * 3.10 to 3.13): PyObject_HEAD, then the sqlite3 handle, NULL once the connection is
     * closed. Read only for an object whose type is exactly sqlite3.Connection. */
    typedef struct { PyObject_HEAD sqlite3 *db; } capsem_pysqlite_head;
    static sqlite3 *capsem_pysqlite_db(PyObject *conn) { return ((capsem_pysqlite_head *)conn)->db; }
    /* 1 when the shared object at module_path (already loaded: the interpreter's _sqlite3)
     * resolves sqlite3_libversion to the very function this module calls, so a handle it
     * made is one this module's libsqlite3 may use. 0 otherwise (another copy, a static
     * build, a module that is not a shared object). */
    static int capsem_same_libsqlite3(const char *module_path) {
        void *h = dlopen(module_path, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) return 0;
        void *theirs = dlsym(h, "sqlite3_libversion");
        dlclose(h);
        return theirs != NULL && theirs == (void *)&sqlite3_libversion;
    }
    """
    sqlite3_db *capsem_pysqlite_db(object conn)
    int capsem_same_libsqlite3(const char *module_path)

cdef extern from "body_hash.h" nogil:
    int capsem_parse_body_hash(const unsigned char *text, int len, uint8_t *out)

cdef extern from "status.h" nogil:
    int CAPSEM_R_INDEX_OPEN
    int CAPSEM_R_INDEX_READ

cdef extern from "index_scan.h" nogil:
    ctypedef struct capsem_index:
        pass
    ctypedef struct capsem_body_rows:
        int64_t *id
        int64_t *block_offset
        int64_t *body_offset
        int64_t *body_len
        uint8_t *digest
        uint8_t *hash_ok
    ctypedef struct capsem_block_rows:
        int64_t *block_offset
        int64_t *raw_len
        int64_t *disk_len
    int capsem_index_open(const char *uri, int busy_ms, capsem_index **out, char *err, size_t errlen)
    int capsem_index_borrow(sqlite3_db *db, int busy_ms, capsem_index **out, char *err, size_t errlen)
    void capsem_index_close(capsem_index *ix)
    int capsem_index_count(capsem_index *ix, const char *table, int64_t *n, char *err, size_t errlen)
    int capsem_index_fill_bodies(capsem_index *ix, capsem_body_rows *rows, size_t start, size_t cap,
                                 size_t *filled, int *done, char *err, size_t errlen)
    int capsem_index_fill_blocks(capsem_index *ix, capsem_block_rows *rows, size_t start, size_t cap,
                                 size_t *filled, int *done, char *err, size_t errlen)
    int CAPSEM_KEY_TEXTS
    ctypedef struct capsem_text_column:
        uint8_t *data
        size_t len
        size_t cap
        int64_t *offsets
        uint8_t *null
    ctypedef struct capsem_key_rows:
        int64_t *id
        int64_t *original_bytes
        uint8_t *truncated
        uint8_t *row_ok
        capsem_text_column text[4]
    int capsem_index_fill_keys(capsem_index *ix, capsem_key_rows *rows, size_t start, size_t cap,
                               size_t *filled, int *done, char *err, size_t errlen)
    int capsem_index_rowid_shadowed(capsem_index *ix, const char *table, int *shadowed, char *err, size_t errlen)
    int capsem_index_rowid_bounds(capsem_index *ix, const char *table, int64_t *lo, int64_t *hi, int *empty,
                                  char *err, size_t errlen)
    int CAPSEM_INDEX_MAX_THREADS
    ctypedef struct capsem_body_range:
        int64_t lo
        int64_t hi
        size_t start
        size_t cap
        size_t filled
        int rc
        char err[256]
    int capsem_index_scan_body_ranges(capsem_index *ix, const char *uri, capsem_body_rows *rows,
                                      capsem_body_range *ranges, int n, int threads)


def sqlite_version():
    """Version of the SQLite library this module is linked against."""
    return sqlite3_libversion().decode()


def sqlite_source_id():
    return sqlite3_sourceid().decode()


# The CPython versions whose pysqlite_Connection layout capsem_pysqlite_db reads.
_LAYOUT_VERSIONS = ((3, 10), (3, 13))
cdef int _one_libsqlite3 = -1  # unknown, then 0 or 1 (the process's libraries do not change)


cdef bint _same_libsqlite3():
    global _one_libsqlite3
    if _one_libsqlite3 < 0:
        try:
            where = os.fsencode(_sqlite3.__file__)
        except (ImportError, AttributeError, TypeError):
            _one_libsqlite3 = 0
        else:
            _one_libsqlite3 = capsem_same_libsqlite3(where)
    return _one_libsqlite3 == 1


cdef sqlite3_db *_shareable_handle(conn, path) except? NULL:
    """The sqlite3 handle of ``conn`` when a scan may run on it, else NULL: conn is exactly a
    sqlite3.Connection of a CPython whose layout is known, open, made by the libsqlite3 this
    module links, and connected to the file at ``path`` (its "main" database, compared
    after resolving both paths)."""
    if conn is None or type(conn) is not _sqlite3.Connection or path is None:
        return NULL
    if not (_LAYOUT_VERSIONS[0] <= sys.version_info[:2] <= _LAYOUT_VERSIONS[1]):
        return NULL
    if sys.implementation.name != "cpython" or not _same_libsqlite3():
        return NULL
    try:
        conn.total_changes  # ProgrammingError once closed
    except _sqlite3.ProgrammingError:
        return NULL
    cdef sqlite3_db *db = capsem_pysqlite_db(conn)
    if db == NULL:
        return NULL
    cdef const char *name = sqlite3_db_filename(db, b"main")
    if name == NULL or name[0] == 0:
        return NULL
    try:
        same = os.path.realpath(os.fsdecode(<bytes>name)) == os.path.realpath(os.fsdecode(os.fspath(path)))
    except (OSError, ValueError):
        return NULL
    return db if same else NULL


def connection_shareable(conn, path):
    """True when a scan given ``conn`` for the database at ``path`` runs on conn itself
    (inside its read transaction) rather than on a connection of its own."""
    return _shareable_handle(conn, path) != NULL


cdef object _index_error(path, int code, char *err):
    return _errors.error(code, path, detail=err.decode("utf-8", "replace"))


cdef class _Scan:
    """One read transaction on session.db (closed on exit), opened with the URI and busy
    timeout the caller chose (the same read-only decision as every Python connection), or
    on the caller's connection ``conn`` when it is shareable (see _shareable_handle): then
    inside conn's read transaction, and conn stays open. The caller uses conn from no other
    thread until the scan returns (the GIL is released while stepping). ``path`` names the
    database in errors; the URI still opens the extra readers of a parallel body scan."""
    cdef capsem_index *ix
    cdef object path
    cdef object conn  # held so the connection outlives the scan
    cdef readonly bint borrowed
    cdef bytes curi
    cdef char err[256]

    def __cinit__(self, str uri, int busy_ms, path, conn=None):
        self.ix = NULL
        self.path = path
        self.conn = None
        self.borrowed = False
        self.err[0] = 0
        cdef int rc
        self.curi = os.fsencode(uri)   # a path is bytes: one not UTF-8 comes back as it was
        cdef const char *p = self.curi
        cdef sqlite3_db *db = _shareable_handle(conn, path)
        if db != NULL:
            self.conn = conn
            self.borrowed = True
            with nogil:
                rc = capsem_index_borrow(db, busy_ms, &self.ix, self.err, sizeof(self.err))
        else:
            with nogil:
                rc = capsem_index_open(p, busy_ms, &self.ix, self.err, sizeof(self.err))
        if rc != SQLITE_OK:
            raise _index_error(self.path, CAPSEM_R_INDEX_OPEN, self.err)

    def __dealloc__(self):
        if self.ix != NULL:
            capsem_index_close(self.ix)
            self.ix = NULL

    cdef int64_t count(self, const char *table) except -1:
        cdef int64_t n = 0
        cdef int rc
        with nogil:
            rc = capsem_index_count(self.ix, table, &n, self.err, sizeof(self.err))
        if rc != SQLITE_OK:
            raise _index_error(self.path, CAPSEM_R_INDEX_READ, self.err)
        return n if n > 0 else 0


cdef dict _grow(dict arrays, size_t cap):
    return {k: np.concatenate([v, np.zeros((cap - v.shape[0],) + v.shape[1:], v.dtype)]) for k, v in arrays.items()}


# Fewer rows than this per reader are not worth a thread and a connection of its own.
PARALLEL_MIN_ROWS = 1 << 15
# Ranges per reader: readers take ranges in turn, so one the scheduler holds back (the
# machine is busy) leaves its share to the others instead of delaying the whole scan.
RANGES_PER_READER = 8


def _cores():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


cdef dict _body_arrays(size_t cap):
    # np.empty: every slot that is kept is written by the scan.
    return {"id": np.empty(cap, np.int64), "block_offset": np.empty(cap, np.int64),
            "body_offset": np.empty(cap, np.int64), "body_len": np.empty(cap, np.int64),
            "digest": np.empty((cap, 32), np.uint8), "hash_ok": np.empty(cap, np.uint8)}


cdef void _point(capsem_body_rows *rows, dict arrays):
    cdef int64_t[::1] a_id = arrays["id"], a_blk = arrays["block_offset"]
    cdef int64_t[::1] a_off = arrays["body_offset"], a_len = arrays["body_len"]
    cdef uint8_t[:, ::1] a_dig = arrays["digest"]
    cdef uint8_t[::1] a_ok = arrays["hash_ok"]
    if a_id.shape[0] == 0:
        return
    rows.id = &a_id[0]; rows.block_offset = &a_blk[0]; rows.body_offset = &a_off[0]
    rows.body_len = &a_len[0]; rows.digest = &a_dig[0, 0]; rows.hash_ok = &a_ok[0]


cdef dict _scan_sequential(_Scan scan, size_t count):
    """Every row on the scan's own connection, in rowid order."""
    # One slot more than COUNT(*) so the step that reports the end fits in the first pass.
    cdef size_t cap = count + 1
    cdef size_t filled = 0
    cdef int done = 0
    cdef int rc = 0
    cdef capsem_body_rows rows
    arrays = _body_arrays(cap)
    while True:
        _point(&rows, arrays)
        with nogil:
            rc = capsem_index_fill_bodies(scan.ix, &rows, filled, cap, &filled, &done, scan.err, sizeof(scan.err))
        if rc != SQLITE_OK:
            raise _index_error(scan.path, CAPSEM_R_INDEX_READ, scan.err)
        if done:
            break
        # Only if the snapshot held more rows than COUNT(*) said (it cannot, in one
        # transaction); grow geometrically rather than trust that.
        arrays = _grow(arrays, max(cap * 2, <size_t>1024))
        cap = arrays["id"].shape[0]
    return {k: v[:filled] for k, v in arrays.items()}


cdef object _scan_parallel(_Scan scan, size_t count, int64_t lo, int64_t hi, int readers):
    """Every row, by rowid ranges that `readers` readers take in turn (see
    capsem_index_scan_body_ranges), in rowid order."""
    cdef int n = min(readers * RANGES_PER_READER, max(readers, <int>(count // (PARALLEL_MIN_ROWS // 4 or 1))))
    cdef capsem_body_range *ranges = <capsem_body_range *>malloc(n * sizeof(capsem_body_range))
    cdef capsem_body_rows rows
    cdef int rc = 0
    cdef int k
    cdef size_t total = 0
    cdef bytes curi = scan.curi
    cdef const char *p = curi
    if ranges == NULL:
        raise MemoryError()
    try:
        span = int(hi) - int(lo) + 1
        for k in range(n):
            a = int(lo) + span * k // n
            b = int(lo) + span * (k + 1) // n - 1
            ranges[k].lo = a
            ranges[k].hi = b
            ranges[k].start = total
            # At most one row per rowid, in any snapshot (the caller splits only when rowids
            # are dense, so these caps add up to at most twice the row count).
            ranges[k].cap = <size_t>(b - a + 1)
            total += ranges[k].cap
        arrays = _body_arrays(total)
        _point(&rows, arrays)
        with nogil:
            rc = capsem_index_scan_body_ranges(scan.ix, p, &rows, ranges, n, readers)
        if rc != SQLITE_OK:
            for k in range(n):
                if ranges[k].rc != SQLITE_OK:
                    raise _index_error(scan.path, CAPSEM_R_INDEX_READ, ranges[k].err)
        if all(ranges[k].filled == ranges[k].cap for k in range(n)):
            return arrays
        keep = np.concatenate([np.arange(ranges[k].start, ranges[k].start + ranges[k].filled, dtype=np.intp)
                               for k in range(n)])
        return {key: np.take(v, keep, axis=0) for key, v in arrays.items()}
    finally:
        free(ranges)


def scan_bodies(str uri, *, int busy_ms, path=None, int threads=0, conn=None):
    """Every event_body_blobs row of the database at ``uri`` (an SQLite URI) in archive order
    as arrays: id, block_offset, body_offset, body_len (int64), digest ((n, 32) uint8,
    decoded from body_hash) and hash_ok (bool: False where body_hash is not "blake3:" + 64
    lower-case hex digits). ``busy_ms`` is the busy timeout of every connection; ``path``
    names the database in errors.

    threads: how many readers scan rowid ranges at once, each on its own thread and
    read-only connection (0: one per core; at least PARALLEL_MIN_ROWS rows per reader).
    The first connection's read transaction fixes the row count and the rowid bounds and
    stays open throughout; the others read rows with rowids within those bounds. A ledger's
    body index is append-only (new rows take larger rowids), so every range reads the
    first snapshot's rows (an index rewritten in place while it is scanned could mix
    snapshots; a ledger's never is). Rowids spread over more than twice the row count
    (hand-edited or hostile indexes), or a column declared under a rowid alias, are scanned
    on one connection, so the arrays are never sized by the rowid span.

    conn: the caller's open sqlite3.Connection to the database at ``path``; when it is
    shareable (connection_shareable) the first reader scans on it, inside its read
    transaction, and the bounds above are taken in that transaction, so the extra readers
    (each on a connection of its own) read no row newer than the caller's snapshot.
    Otherwise the first reader opens ``uri`` as well."""
    cdef _Scan scan = _Scan(uri, busy_ms, path, conn)
    cdef size_t count = <size_t>scan.count(b"event_body_blobs")
    cdef int64_t lo = 0, hi = 0
    cdef int empty = 0
    cdef int shadowed = 0
    cdef int rc = 0
    cdef int n = threads if threads > 0 else _cores()
    n = min(n, CAPSEM_INDEX_MAX_THREADS, max(1, <int>(count // (PARALLEL_MIN_ROWS or 1))))
    out = None
    if n > 1:
        with nogil:
            rc = capsem_index_rowid_bounds(scan.ix, b"event_body_blobs", &lo, &hi, &empty, scan.err, sizeof(scan.err))
        if rc != SQLITE_OK:
            raise _index_error(scan.path, CAPSEM_R_INDEX_READ, scan.err)
        if not empty and int(hi) - int(lo) + 1 <= 2 * count:
            with nogil:
                rc = capsem_index_rowid_shadowed(scan.ix, b"event_body_blobs", &shadowed, scan.err, sizeof(scan.err))
            if rc != SQLITE_OK:
                raise _index_error(scan.path, CAPSEM_R_INDEX_READ, scan.err)
            if not shadowed:
                out = _scan_parallel(scan, count, lo, hi, n)
    if out is None:
        out = _scan_sequential(scan, count)
    out["hash_ok"] = out["hash_ok"].view(np.bool_)
    return archive_order(out)


def archive_order(dict rows):
    """Rows sorted by (block_offset, body_offset, id). They arrive in rowid order, which for a
    ledger written append-only is close to archive order (rows that reuse an earlier span,
    and rows written in another order than their bodies were staged, are not); a stable sort
    on one packed key is then close to a linear pass.

    ``rows`` is consumed: a column that is C-contiguous and writeable is sorted in place
    (``permute_in_place``: any other reference to it sees it sorted), any other leaves ``rows``
    as its sorted copy is made. The index's peak is then the index and the order, not the
    index and its widest column twice."""
    blk, off, ids = rows["block_offset"], rows["body_offset"], rows["id"]
    n = blk.shape[0]
    if n < 2:
        return rows
    if (blk.min() >= 0 and blk.max() < (1 << 38) and off.min() >= 0 and off.max() <= (1 << 24)
            and np.all(ids[1:] > ids[:n - 1])):
        key = (blk << 25) | off
        if np.all(key[1:] >= key[:n - 1]):
            return rows
        order = np.argsort(key, kind="stable")
        del key
    else:
        order = np.lexsort((ids, off, blk))
    del blk, off, ids
    names = list(rows)
    out = {}
    # Each column in place where it can be (no sorted copy beside it), else copied: narrow
    # columns first and the digests last, so the widest copy is made when the rest are done.
    for name in sorted(names, key=lambda k: rows[k].nbytes):
        column = rows.pop(name)
        if column.flags.c_contiguous and column.flags.writeable:
            permute_in_place(column, order)
            out[name] = column
        else:
            out[name] = np.take(column, order, axis=0)
        del column
    return {name: out[name] for name in names}


def scan_blocks(str uri, *, int busy_ms, path=None, conn=None):
    """Every body_blocks row ordered by block_offset: block_offset, raw_len, disk_len (int64).
    uri, busy_ms, path, conn: as for scan_bodies."""
    cdef _Scan scan = _Scan(uri, busy_ms, path, conn)
    cdef size_t cap = <size_t>scan.count(b"body_blocks") + 1
    cdef size_t filled = 0
    cdef int done = 0
    cdef int rc = 0
    cdef capsem_block_rows rows
    cdef int64_t[::1] a_blk, a_raw, a_disk
    arrays = {"block_offset": np.zeros(cap, np.int64), "raw_len": np.zeros(cap, np.int64),
              "disk_len": np.zeros(cap, np.int64)}
    while True:
        a_blk = arrays["block_offset"]; a_raw = arrays["raw_len"]; a_disk = arrays["disk_len"]
        if cap:
            rows.block_offset = &a_blk[0]; rows.raw_len = &a_raw[0]; rows.disk_len = &a_disk[0]
        with nogil:
            rc = capsem_index_fill_blocks(scan.ix, &rows, filled, cap, &filled, &done, scan.err, sizeof(scan.err))
        if rc != SQLITE_OK:
            raise _index_error(scan.path, CAPSEM_R_INDEX_READ, scan.err)
        if done:
            break
        arrays = _grow(arrays, max(cap * 2, <size_t>1024))
        cap = arrays["block_offset"].shape[0]
    return {k: v[:filled] for k, v in arrays.items()}


def parse_body_hash(text):
    """32-byte digest of a body_hash text, or None when it is malformed."""
    cdef bytes b = text.encode() if isinstance(text, str) else bytes(text)
    cdef uint8_t out[32]
    if capsem_parse_body_hash(b, len(b), out):
        return bytes(out[:32])
    return None


include "index_keys.pxi"
include "index_spans.pxi"
include "index_order.pxi"
