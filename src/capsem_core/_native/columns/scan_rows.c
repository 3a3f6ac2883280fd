/* A table's rows through SQLite's statements (see scan_rows.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan_rows.h"
#include "utf8_check.h"

#define CANCEL_EVERY 1024u

static void copy_err(sqlite3_stmt *st, int rc, char *err, size_t errlen) {
    sqlite3 *db = sqlite3_db_handle(st);
    snprintf(err, errlen, "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

/* A TEXT value's bytes: as stored in a UTF-8 database (the blob accessor returns a text
 * unconverted and without adding a terminator), converted to UTF-8 otherwise. */
static const uint8_t *text_of(sqlite3_value *v, int utf8_db, int *n) {
    const uint8_t *p = utf8_db ? sqlite3_value_blob(v) : sqlite3_value_text(v);
    *n = sqlite3_value_bytes(v);
    return p;
}

static uint8_t class_of(sqlite3_value *v, int utf8_db, const uint8_t **p, int *n) {
    switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: return CS_INTEGER;
    case SQLITE_FLOAT: return CS_REAL;
    case SQLITE_TEXT:
        *p = text_of(v, utf8_db, n);
        return *n <= 0 || cs_utf8_check(*p, (size_t)*n) ? CS_TEXT : CS_TEXT_BYTES;
    case SQLITE_BLOB:
        *p = sqlite3_value_blob(v);
        *n = sqlite3_value_bytes(v);
        return CS_BLOB;
    default: return CS_NULL;
    }
}

int cs_rows_plan(sqlite3_stmt *st, size_t ncols, int utf8_db, uint8_t *masks, volatile const int *cancel,
                 char *err, size_t errlen) {
    memset(masks, 0, ncols);
    sqlite3_reset(st);
    int rc;
    uint64_t steps = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (++steps % CANCEL_EVERY == 0 && cancel && *cancel) return SQLITE_INTERRUPT;
        for (size_t k = 0; k < ncols; k++) {
            const uint8_t *p = NULL;
            int n = 0;
            masks[k] |= (uint8_t)(1u << class_of(sqlite3_column_value(st, (int)k), utf8_db, &p, &n));
        }
    }
    if (rc == SQLITE_DONE) return SQLITE_OK;
    copy_err(st, rc, err, errlen);
    return rc;
}

int cs_rows_fill(sqlite3_stmt *st, size_t ncols, const cs_layout *lays, int utf8_db, int64_t batch_rows,
                 int64_t batch_bytes, struct ArrowArray *out, int64_t *rows, int64_t *last_rowid, int *done,
                 volatile const int *cancel, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    *rows = 0;
    *done = 0;
    cs_col *cols = calloc(ncols ? ncols : 1, sizeof *cols);
    int64_t *bytes = calloc(ncols ? ncols : 1, sizeof *bytes);
    int rc = cols && bytes ? SQLITE_OK : SQLITE_NOMEM;
    int64_t start = batch_rows < 1024 ? batch_rows : 1024;
    for (size_t k = 0; k < ncols && rc == SQLITE_OK; k++)
        if (cs_col_init(&cols[k], &lays[k], start, NULL, NULL)) rc = SQLITE_NOMEM;
    int64_t widest = 0;
    while (rc == SQLITE_OK && *rows < batch_rows && widest < batch_bytes) {
        if ((*rows + 1) % CANCEL_EVERY == 0 && cancel && *cancel) {
            rc = SQLITE_INTERRUPT;
            break;
        }
        int step = sqlite3_step(st);
        if (step == SQLITE_DONE) {
            *done = 1;
            break;
        }
        if (step != SQLITE_ROW) {
            copy_err(st, step, err, errlen);
            rc = step;
            break;
        }
        for (size_t k = 0; k < ncols && rc == SQLITE_OK; k++) {
            sqlite3_value *v = sqlite3_column_value(st, (int)k);
            const uint8_t *p = NULL;
            int n = 0;
            uint8_t cls = class_of(v, utf8_db, &p, &n);
            cs_col *c = &cols[k];
            int bad;
            if (cls == CS_NULL) bad = cs_col_null(c);
            else if (cls == CS_INTEGER) bad = cs_col_int(c, sqlite3_value_int64(v));
            else if (cls == CS_REAL) bad = cs_col_real(c, sqlite3_value_double(v));
            else {
                if (n < 0 || (n > 0 && !p)) {
                    rc = SQLITE_NOMEM;
                    break;
                }
                uint8_t *dst = cs_col_bytes(c, cls, (uint32_t)n);
                bad = dst == NULL;
                if (dst && n) memcpy(dst, p, (size_t)n);
                bytes[k] += n;
                if (bytes[k] > widest) widest = bytes[k];
            }
            if (bad) {
                /* A class the first pass did not see (it cannot, in one transaction), or memory. */
                snprintf(err, errlen, "a value of column %zu does not fit the stream's columns", k);
                rc = SQLITE_NOMEM;
            }
        }
        if (rc != SQLITE_OK) break;
        *last_rowid = sqlite3_column_int64(st, (int)ncols);
        (*rows)++;
    }
    if (rc == SQLITE_OK && *rows > 0 && cs_batch_export(cols, ncols, *rows, out)) {
        snprintf(err, errlen, "out of memory");
        rc = SQLITE_NOMEM;
    }
    if (rc == SQLITE_NOMEM && !err[0]) snprintf(err, errlen, "out of memory");
    for (size_t k = 0; cols && k < ncols; k++) cs_col_free(&cols[k]);
    free(cols);
    free(bytes);
    return rc;
}

int cs_rows_read(sqlite3_stmt *st, size_t ncols, int utf8_db, int64_t limit, cs_rows *out, char *err,
                 size_t errlen) {
    out->n = 0;
    out->arena_len = 0;
    int rc = SQLITE_OK;
    while (!cs_rows_full(out, limit)) {
        int step = sqlite3_step(st);
        if (step == SQLITE_DONE) break;
        if (step != SQLITE_ROW) {
            copy_err(st, step, err, errlen);
            return step;
        }
        if (cs_rows_reserve(out, ncols, out->n + 1) != CS_OK) {
            snprintf(err, errlen, "out of memory");
            return SQLITE_NOMEM;
        }
        cs_item *row = &out->items[out->n * (int64_t)ncols];
        for (size_t k = 0; k < ncols; k++) {
            sqlite3_value *v = sqlite3_column_value(st, (int)k);
            cs_item *it = &row[k];
            it->len = 0;
            switch (sqlite3_value_type(v)) {
            case SQLITE_INTEGER:
                it->cls = CS_INTEGER;
                it->v.i = sqlite3_value_int64(v);
                break;
            case SQLITE_FLOAT:
                it->cls = CS_REAL;
                it->v.d = sqlite3_value_double(v);
                break;
            case SQLITE_TEXT:
            case SQLITE_BLOB: {
                int text = sqlite3_value_type(v) == SQLITE_TEXT;
                int n = 0;
                const uint8_t *p = text ? text_of(v, utf8_db, &n) : sqlite3_value_blob(v);
                if (!text) n = sqlite3_value_bytes(v);
                if (n < 0 || (uint64_t)n > out->max_value) {
                    snprintf(err, errlen, "a value of %d bytes", n);
                    return SQLITE_TOOBIG;
                }
                uint8_t *dst = cs_rows_bytes(out, (uint32_t)n, &it->v.at);
                if (!dst) {
                    snprintf(err, errlen, "out of memory");
                    return SQLITE_NOMEM;
                }
                if (n) memcpy(dst, p, (size_t)n);
                it->cls = text ? CS_TEXT : CS_BLOB;
                it->len = (uint32_t)n;
                break;
            }
            default: it->cls = CS_NULL;
            }
        }
        out->rowid[out->n++] = sqlite3_column_int64(st, (int)ncols);
    }
    return rc;
}
