/* Scans of the body index in session.db through the SQLite C API: rows go straight into
 * caller arrays, no per-row objects. The whole scan runs in one read transaction, so the
 * row count taken first is exact for the snapshot that is then read. */
#ifndef CAPSEM_INDEX_SCAN_H
#define CAPSEM_INDEX_SCAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct capsem_index capsem_index;

/* Opens the SQLite URI `uri` read-only (the caller's connection policy chooses its
 * parameters: mode=ro, immutable=1 on read-only media) with a busy timeout of busy_ms and begins a read
 * transaction. Returns an SQLite result code; the message (when not SQLITE_OK) is copied
 * to err. *out is set either way (close it). */
int capsem_index_open(const char *uri, int busy_ms, capsem_index **out, char *err, size_t errlen);
/* A scan on the caller's open connection `db` (the caller vouches that it is a connection
 * of this process's libsqlite3 to session.db, used by no other thread until the scan is
 * closed). Inside db's read transaction when one is open, else in one the scan begins and
 * ends. busy_ms is the busy timeout of the extra readers' connections. Closing the scan
 * finalizes its statements and leaves db open. */
int capsem_index_borrow(struct sqlite3 *db, int busy_ms, capsem_index **out, char *err, size_t errlen);
void capsem_index_close(capsem_index *ix);

/* COUNT(*) of a table named by a fixed string (not user input). */
int capsem_index_count(capsem_index *ix, const char *table, int64_t *n, char *err, size_t errlen);

/* Arrays for event_body_blobs rows, in rowid order: the caller sorts them into archive order
 * (sorting a nearly sorted array costs less than SQLite's index walk plus temp b-tree). */
typedef struct {
    int64_t *id, *block_offset, *body_offset, *body_len;
    uint8_t *digest;  /* 32 per row, zero when the row's body_hash is malformed */
    uint8_t *hash_ok; /* 1 when body_hash is "blake3:" + 64 lower-case hex digits */
} capsem_body_rows;

/* Arrays for body_blocks rows ordered by block_offset. */
typedef struct {
    int64_t *block_offset, *raw_len, *disk_len;
} capsem_block_rows;

/* Fill rows [start, cap) (resuming where the previous call stopped). *filled is the row
 * count reached, *done 1 when the statement has no more rows. */
int capsem_index_fill_bodies(capsem_index *ix, capsem_body_rows *rows, size_t start, size_t cap, size_t *filled,
                             int *done, char *err, size_t errlen);
/* Smallest and largest rowid of a table named by a fixed string; *empty when it has no rows. */
int capsem_index_rowid_bounds(capsem_index *ix, const char *table, int64_t *lo, int64_t *hi, int *empty, char *err,
                              size_t errlen);
/* *shadowed when the table declares a column named rowid, _rowid_ or oid (any case): those
 * names then no longer mean the rowid, so a scan must not cut rowid ranges by them. */
int capsem_index_rowid_shadowed(capsem_index *ix, const char *table, int *shadowed, char *err, size_t errlen);

/* One slice of a parallel body scan: rows with rowid in [lo, hi] go to array slots
 * [start, start + cap), cap = hi - lo + 1 (rowids are unique, so they always fit); filled
 * is how many there were. */
#define CAPSEM_INDEX_MAX_THREADS 16
typedef struct {
    int64_t lo, hi;
    size_t start, cap;
    size_t filled;
    int rc;
    char err[256];
} capsem_body_range;

/* Scans n ranges with `threads` readers taking them in turn: the calling thread on ix
 * (inside ix's read transaction, which stays open throughout), each other reader on its
 * own thread and read-only connection to uri, with ix's busy timeout (a reader that cannot open one takes no
 * range). Returns SQLITE_OK or the first failed range's code, its message in that range's
 * err. */
int capsem_index_scan_body_ranges(capsem_index *ix, const char *uri, capsem_body_rows *rows,
                                  capsem_body_range *ranges, int n, int threads);

/* A text column: row i's bytes are data[offsets[i] .. offsets[i + 1]); null[i] is 1 for
 * SQL NULL (then no bytes). A value that is not TEXT is taken as SQLite converts it to text
 * (a BLOB's bytes as they are). data grows with realloc; the caller frees it. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
    int64_t *offsets; /* rows + 1 */
    uint8_t *null;
} capsem_text_column;
/* The key columns of event_body_blobs in rowid order: id, original_bytes, truncated and the
 * text of event_id, source_table, direction, content_type, and whether the row's span and
 * hash columns hold the types the body scan reads them as. */
#define CAPSEM_KEY_TEXTS 4
typedef struct {
    int64_t *id, *original_bytes;
    uint8_t *truncated;
    /* 1 when body_hash is TEXT and block_offset, body_offset, body_len are INTEGER. */
    uint8_t *row_ok;
    capsem_text_column text[CAPSEM_KEY_TEXTS];
} capsem_key_rows;
/* Fill key rows [start, cap), as capsem_index_fill_bodies fills body rows. SQLITE_NOMEM
 * when a text column cannot grow. */
int capsem_index_fill_keys(capsem_index *ix, capsem_key_rows *rows, size_t start, size_t cap, size_t *filled,
                           int *done, char *err, size_t errlen);
int capsem_index_fill_blocks(capsem_index *ix, capsem_block_rows *rows, size_t start, size_t cap, size_t *filled,
                             int *done, char *err, size_t errlen);

#endif
