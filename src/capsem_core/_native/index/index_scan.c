/* Body index scans (see index_scan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>

#include "body_hash.h"
#include "index_scan.h"

struct capsem_index {
    sqlite3 *db;
    sqlite3_stmt *stmt;
    int in_txn;   /* 1: this scan began the read transaction and ends it at close */
    int busy_ms;
    int borrowed; /* db is the caller's connection: closing the scan leaves it open */
};

static void copy_err(sqlite3 *db, int rc, char *err, size_t errlen) {
    if (!err || !errlen) return;
    snprintf(err, errlen, "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

/* A read-only connection to the URI the Python layer's connection policy chose (its path percent-encoded, so any
 * character a path holds stays a path character; mode=ro, and immutable=1 on read-only
 * media) inside a read transaction. *db is set either way (close it). */
static int open_reader(const char *uri, int busy_ms, sqlite3 **db, char *err, size_t errlen) {
    int rc = sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(*db, busy_ms);
        rc = sqlite3_exec(*db, "BEGIN", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) copy_err(*db, rc, err, errlen);
    return rc;
}

static void close_reader(sqlite3 *db, sqlite3_stmt *st, int in_txn) {
    if (st) sqlite3_finalize(st);
    if (!db) return;
    if (in_txn) sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close_v2(db);
}

int capsem_index_open(const char *uri, int busy_ms, capsem_index **out, char *err, size_t errlen) {
    capsem_index *ix = calloc(1, sizeof *ix);
    *out = ix;
    if (!ix) {
        snprintf(err, errlen, "out of memory");
        return SQLITE_NOMEM;
    }
    ix->busy_ms = busy_ms;
    int rc = open_reader(uri, busy_ms, &ix->db, err, errlen);
    ix->in_txn = rc == SQLITE_OK;
    return rc;
}

int capsem_index_borrow(sqlite3 *db, int busy_ms, capsem_index **out, char *err, size_t errlen) {
    capsem_index *ix = calloc(1, sizeof *ix);
    *out = ix;
    if (!ix) {
        snprintf(err, errlen, "out of memory");
        return SQLITE_NOMEM;
    }
    ix->db = db;
    ix->borrowed = 1;
    ix->busy_ms = busy_ms;
    /* Inside the caller's read transaction when it has one (check's: the SQL checks and the
     * scans then read one snapshot); else one of our own for the scan's duration. */
    if (sqlite3_get_autocommit(db)) {
        int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            copy_err(db, rc, err, errlen);
            return rc;
        }
        ix->in_txn = 1;
    }
    return SQLITE_OK;
}

void capsem_index_close(capsem_index *ix) {
    if (!ix) return;
    if (ix->borrowed) {
        if (ix->stmt) sqlite3_finalize(ix->stmt);
        if (ix->in_txn) sqlite3_exec(ix->db, "COMMIT", NULL, NULL, NULL);
    } else {
        close_reader(ix->db, ix->stmt, ix->in_txn);
    }
    free(ix);
}

int capsem_index_count(capsem_index *ix, const char *table, int64_t *n, char *err, size_t errlen) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s", table);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *n = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) copy_err(ix->db, rc, err, errlen);
    sqlite3_finalize(st);
    return rc;
}

static int prepare(capsem_index *ix, const char *sql, char *err, size_t errlen) {
    if (ix->stmt) return SQLITE_OK;
    int rc = sqlite3_prepare_v2(ix->db, sql, -1, &ix->stmt, NULL);
    if (rc != SQLITE_OK) copy_err(ix->db, rc, err, errlen);
    return rc;
}

/* The body columns in record order (body_hash is stored before the offsets), so SQLite
 * decodes each record's header once and walks it forward. */
#define BODY_COLUMNS "SELECT id, body_hash, block_offset, body_offset, body_len FROM event_body_blobs"

/* Steps st into rows [start, cap). Returns SQLITE_OK with *done set at the end of the
 * statement, SQLITE_OK with *done clear when cap was reached first, or an error (copied). */
static int fill_bodies(sqlite3 *db, sqlite3_stmt *st, capsem_body_rows *r, size_t start, size_t cap, size_t *filled,
                       int *done, char *err, size_t errlen) {
    size_t i = start;
    int rc = SQLITE_OK;
    *done = 0;
    while (i < cap) {
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW) break;
        r->id[i] = sqlite3_column_int64(st, 0);
        /* The TEXT's bytes as stored: no terminator added, no copy (blob access to a TEXT
         * value returns it unconverted). Anything but TEXT is malformed, as in Capsem.
         * One sqlite3_column_* call, then sqlite3_value_* on its value: each column call
         * enters and leaves the connection, the value calls do not (the value is
         * "unprotected", which only matters to a connection shared between threads: each
         * of ours is used by one thread). */
        sqlite3_value *hash = sqlite3_column_value(st, 1);
        int ok = 0;
        if (sqlite3_value_type(hash) == SQLITE_TEXT) {
            const unsigned char *text = sqlite3_value_blob(hash);
            ok = capsem_parse_body_hash(text, sqlite3_value_bytes(hash), r->digest + 32 * i);
        }
        if (!ok) memset(r->digest + 32 * i, 0, 32);
        r->hash_ok[i] = (uint8_t)ok;
        r->block_offset[i] = sqlite3_column_int64(st, 2);
        r->body_offset[i] = sqlite3_column_int64(st, 3);
        r->body_len[i] = sqlite3_column_int64(st, 4);
        i++;
    }
    *filled = i;
    if (i == cap) return SQLITE_OK; /* cap reached (the statement may hold more) */
    if (rc == SQLITE_DONE) {
        *done = 1;
        return SQLITE_OK;
    }
    copy_err(db, rc, err, errlen);
    return rc;
}

int capsem_index_fill_bodies(capsem_index *ix, capsem_body_rows *r, size_t start, size_t cap, size_t *filled,
                             int *done, char *err, size_t errlen) {
    *done = 0;
    *filled = start;
    int rc = prepare(ix, BODY_COLUMNS, err, errlen);
    if (rc != SQLITE_OK) return rc;
    return fill_bodies(ix->db, ix->stmt, r, start, cap, filled, done, err, errlen);
}

int capsem_index_rowid_bounds(capsem_index *ix, const char *table, int64_t *lo, int64_t *hi, int *empty, char *err,
                              size_t errlen) {
    /* Two statements: min() and max() of the rowid alone are each one b-tree descent; asked
     * for together SQLite scans the table. */
    const char *which[2] = {"min", "max"};
    int64_t *out[2] = {lo, hi};
    *empty = 0;
    for (int k = 0; k < 2; k++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT %s(rowid) FROM %s", which[k], table);
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
        if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (sqlite3_column_type(st, 0) == SQLITE_NULL) *empty = 1;
            *out[k] = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
        if (rc != SQLITE_OK) copy_err(ix->db, rc, err, errlen);
        sqlite3_finalize(st);
        if (rc != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
}

int capsem_index_rowid_shadowed(capsem_index *ix, const char *table, int *shadowed, char *err, size_t errlen) {
    static const char *const aliases[3] = {"rowid", "_rowid_", "oid"};
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
    *shadowed = 0;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        for (int k = 0; name && k < 3; k++)
            if (sqlite3_stricmp(name, aliases[k]) == 0) *shadowed = 1;
        rc = SQLITE_OK;
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
    if (rc != SQLITE_OK) copy_err(ix->db, rc, err, errlen);
    sqlite3_finalize(st);
    return rc;
}

/* The shared state of a parallel scan: ranges are taken from an atomic counter, so a
 * reader that the scheduler holds back takes fewer of them instead of delaying the rest. */
typedef struct {
    const char *uri;
    int busy_ms;
    capsem_body_rows *rows;
    capsem_body_range *ranges;
    int n;
    atomic_int next;
} range_scan;

typedef struct {
    range_scan *scan;
    capsem_index *ix; /* the caller's connection, or NULL: open scan->uri */
} range_reader;

/* One range on a prepared statement; its outcome goes to the range. */
static void scan_range(sqlite3 *db, sqlite3_stmt *st, capsem_body_rows *rows, capsem_body_range *g) {
    int done = 0;
    size_t filled = g->start;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, g->lo);
    sqlite3_bind_int64(st, 2, g->hi);
    /* cap is the range's rowid count: rowids are unique, so a full range has no more rows
     * in any snapshot. */
    g->rc = fill_bodies(db, st, rows, g->start, g->start + g->cap, &filled, &done, g->err, sizeof g->err);
    g->filled = filled - g->start;
}

static void *range_reader_main(void *arg) {
    range_reader *r = arg;
    range_scan *scan = r->scan;
    sqlite3 *db = r->ix ? r->ix->db : NULL;
    sqlite3_stmt *st = NULL;
    int own = r->ix == NULL;
    char err[256];
    /* A reader that cannot open its connection or prepare takes no range: the others do. */
    if (own && open_reader(scan->uri, scan->busy_ms, &db, err, sizeof err) != SQLITE_OK) {
        close_reader(db, NULL, 0);
        return NULL;
    }
    /* By rowid, as the ranges were cut: an id column that is not the rowid's alias (a hostile
     * index) would otherwise drop rows outside the rowid bounds or past a range's slots. */
    if (sqlite3_prepare_v2(db, BODY_COLUMNS " WHERE rowid BETWEEN ?1 AND ?2", -1, &st, NULL) == SQLITE_OK) {
        for (;;) {
            int k = atomic_fetch_add(&scan->next, 1);
            if (k >= scan->n) break;
            scan_range(db, st, scan->rows, &scan->ranges[k]);
        }
    }
    if (own) close_reader(db, st, 1);
    else sqlite3_finalize(st);
    return NULL;
}

int capsem_index_scan_body_ranges(capsem_index *ix, const char *uri, capsem_body_rows *rows,
                                  capsem_body_range *ranges, int n, int threads) {
    if (n < 1) return SQLITE_OK;
    if (threads < 1) threads = 1;
    if (threads > CAPSEM_INDEX_MAX_THREADS) threads = CAPSEM_INDEX_MAX_THREADS;
    range_scan scan = {uri, ix->busy_ms, rows, ranges, n, 0};
    range_reader readers[CAPSEM_INDEX_MAX_THREADS];
    pthread_t tids[CAPSEM_INDEX_MAX_THREADS];
    int started[CAPSEM_INDEX_MAX_THREADS] = {0};
    for (int k = 0; k < n; k++) {
        ranges[k].filled = 0;
        ranges[k].err[0] = 0;
        /* Untaken until a reader scans it (every range is, by the caller's reader at least). */
        ranges[k].rc = SQLITE_MISUSE;
    }
    for (int t = 0; t < threads; t++) readers[t] = (range_reader){&scan, t == 0 ? ix : NULL};
    for (int t = 1; t < threads; t++) started[t] = pthread_create(&tids[t], NULL, range_reader_main, &readers[t]) == 0;
    /* The caller's connection, whose read transaction stays open throughout, reads too. */
    range_reader_main(&readers[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
    }
    for (int k = 0; k < n; k++) {
        if (ranges[k].rc != SQLITE_OK) {
            if (ranges[k].rc == SQLITE_MISUSE && !ranges[k].err[0]) {
                /* The caller's reader could not prepare its statement: say why. */
                copy_err(ix->db, sqlite3_errcode(ix->db), ranges[k].err, sizeof ranges[k].err);
            }
            return ranges[k].rc;
        }
    }
    return SQLITE_OK;
}

/* How a fill loop that stopped at row i of cap, on step result rc, ends: SQLITE_OK with *done
 * clear when cap was reached, with *done set at the statement's end, else the error (copied). */
static int fill_end(sqlite3 *db, int rc, size_t i, size_t cap, int *done, char *err, size_t errlen) {
    if (i == cap) return SQLITE_OK;
    if (rc == SQLITE_DONE) {
        *done = 1;
        return SQLITE_OK;
    }
    copy_err(db, rc, err, errlen);
    return rc;
}

int capsem_index_fill_blocks(capsem_index *ix, capsem_block_rows *r, size_t start, size_t cap, size_t *filled,
                             int *done, char *err, size_t errlen) {
    *done = 0;
    *filled = start;
    int rc = prepare(ix, "SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset", err,
                     errlen);
    if (rc != SQLITE_OK) return rc;
    size_t i = start;
    while (i < cap && (rc = sqlite3_step(ix->stmt)) == SQLITE_ROW) {
        r->block_offset[i] = sqlite3_column_int64(ix->stmt, 0);
        r->raw_len[i] = sqlite3_column_int64(ix->stmt, 1);
        r->disk_len[i] = sqlite3_column_int64(ix->stmt, 2);
        i++;
    }
    *filled = i;
    return fill_end(ix->db, rc, i, cap, done, err, errlen);
}

/* Appends one value's text to a column (row i). 0 when out of memory. */
static int append_text(capsem_text_column *t, size_t i, sqlite3_value *v) {
    if (sqlite3_value_type(v) == SQLITE_NULL) {
        t->null[i] = 1;
        t->offsets[i + 1] = (int64_t)t->len;
        return 1;
    }
    t->null[i] = 0;
    /* sqlite3_value_text converts INTEGER / REAL to text; a BLOB comes as it is. */
    const unsigned char *text = sqlite3_value_type(v) == SQLITE_BLOB ? sqlite3_value_blob(v) : sqlite3_value_text(v);
    int n = sqlite3_value_bytes(v);
    if (n < 0 || (n > 0 && !text)) return 0;
    if ((size_t)n > t->cap - t->len) {
        size_t want = t->cap ? t->cap : (1u << 16);
        while (want - t->len < (size_t)n) {
            if (want > SIZE_MAX / 2) return 0;
            want *= 2;
        }
        uint8_t *p = realloc(t->data, want);
        if (!p) return 0;
        t->data = p;
        t->cap = want;
    }
    if (n) memcpy(t->data + t->len, text, (size_t)n);
    t->len += (size_t)n;
    t->offsets[i + 1] = (int64_t)t->len;
    return 1;
}

int capsem_index_fill_keys(capsem_index *ix, capsem_key_rows *r, size_t start, size_t cap, size_t *filled,
                           int *done, char *err, size_t errlen) {
    *done = 0;
    *filled = start;
    /* Record order (event_id, source_table, direction, content_type, original_bytes, ...,
     * truncated): SQLite walks each record's header forward once. */
    int rc = prepare(ix, "SELECT id, event_id, source_table, direction, content_type, original_bytes, truncated, "
                         "body_hash, block_offset, body_offset, body_len FROM event_body_blobs", err, errlen);
    if (rc != SQLITE_OK) return rc;
    size_t i = start;
    while (i < cap && (rc = sqlite3_step(ix->stmt)) == SQLITE_ROW) {
        r->id[i] = sqlite3_column_int64(ix->stmt, 0);
        for (int k = 0; k < CAPSEM_KEY_TEXTS; k++) {
            if (!append_text(&r->text[k], i, sqlite3_column_value(ix->stmt, 1 + k))) {
                *filled = i;
                snprintf(err, errlen, "out of memory reading the body index's keys");
                return SQLITE_NOMEM;
            }
        }
        r->original_bytes[i] = sqlite3_column_int64(ix->stmt, 5);
        r->truncated[i] = sqlite3_column_int64(ix->stmt, 6) != 0;
        /* The body scan reads spans as integers whatever they hold (SQLite turns 'abc'
         * into 0): the tables are not STRICT, so a reader must know which rows lie. */
        r->row_ok[i] = sqlite3_column_type(ix->stmt, 7) == SQLITE_TEXT &&
                       sqlite3_column_type(ix->stmt, 8) == SQLITE_INTEGER &&
                       sqlite3_column_type(ix->stmt, 9) == SQLITE_INTEGER &&
                       sqlite3_column_type(ix->stmt, 10) == SQLITE_INTEGER;
        i++;
    }
    *filled = i;
    return fill_end(ix->db, rc, i, cap, done, err, errlen);
}
