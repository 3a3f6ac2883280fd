# The C API the columns module calls (status.h, map_guard.h, sqlite3.h, arrow_abi.h,
# arrow_export.h, utf8_check.h, column_build.h, page_map.h, archive_file.h, page_window.h, scan_leaves.h,
# scan_pages.h, scan_rows.h, scan_stream.h), declared once for _columns.pyx and its includes.
from libc.stdint cimport int8_t, int64_t, uint8_t, uint32_t, uint64_t

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
    void cs_stream_release(ArrowArrayStream *s)
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

cdef extern from "page_window.h" nogil:
    uint64_t CAPSEM_WINDOW_DEFAULT_BYTES
    ctypedef struct capsem_page_window:
        pass

cdef extern from "scan_leaves.h" nogil:
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
        uint64_t window
        capsem_page_window *shared
    int cs_pages_open(cs_pages *s)
    void cs_pages_close(cs_pages *s)

cdef extern from "scan_pages.h" nogil:
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
        uint64_t arena_len
        uint64_t max_value
        uint64_t max_bytes
    void cs_rows_free(cs_rows *r)
    int cs_pages_rows(const cs_pages *s, int64_t limit, cs_rows *out)

cdef extern from "scan_rows.h" nogil:
    int cs_rows_read(sqlite3_stmt *st, size_t ncols, int utf8_db, int64_t limit, cs_rows *out, char *err,
                     size_t errlen)

cdef extern from "scan_stream.h" nogil:
    ctypedef struct cs_map:
        uint64_t window
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
    capsem_page_window *cs_source_rows_window(cs_source *s)
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
