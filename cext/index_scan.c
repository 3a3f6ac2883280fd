/* Body index scans (see index_scan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "index_scan.h"

struct capsem_index {
    sqlite3 *db;
    sqlite3_stmt *stmt;
    int in_txn;
};

static void copy_err(sqlite3 *db, int rc, char *err, size_t errlen) {
    if (!err || !errlen) return;
    snprintf(err, errlen, "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

int capsem_index_open(const char *path, capsem_index **out, char *err, size_t errlen) {
    capsem_index *ix = calloc(1, sizeof *ix);
    *out = ix;
    if (!ix) {
        snprintf(err, errlen, "out of memory");
        return SQLITE_NOMEM;
    }
    /* No URI parsing: the path is a path, whatever characters it holds. */
    int rc = sqlite3_open_v2(path, &ix->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        copy_err(ix->db, rc, err, errlen);
        return rc;
    }
    sqlite3_busy_timeout(ix->db, 5000);
    rc = sqlite3_exec(ix->db, "BEGIN", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        copy_err(ix->db, rc, err, errlen);
        return rc;
    }
    ix->in_txn = 1;
    return SQLITE_OK;
}

void capsem_index_close(capsem_index *ix) {
    if (!ix) return;
    if (ix->stmt) sqlite3_finalize(ix->stmt);
    if (ix->db) {
        if (ix->in_txn) sqlite3_exec(ix->db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close_v2(ix->db);
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

/* Hex digit values, 0xFF for anything else (upper case included: Capsem writes lower case
 * and compares the text, so "ABC..." would not match either). */
static uint8_t hex_table[256];
static int hex_ready;

static void hex_init(void) {
    memset(hex_table, 0xFF, sizeof hex_table);
    for (int c = 0; c < 10; c++) hex_table['0' + c] = (uint8_t)c;
    for (int c = 0; c < 6; c++) hex_table['a' + c] = (uint8_t)(10 + c);
    hex_ready = 1;
}

int capsem_parse_body_hash(const unsigned char *text, int len, uint8_t out[32]) {
    if (!hex_ready) hex_init(); /* idempotent: racing initialisers write the same bytes */
    if (!text || len != 71 || memcmp(text, "blake3:", 7) != 0) return 0;
    const unsigned char *h = text + 7;
    uint8_t bad = 0;
    for (int i = 0; i < 32; i++) {
        uint8_t hi = hex_table[h[2 * i]], lo = hex_table[h[2 * i + 1]];
        bad |= (hi | lo) & 0xF0;
        out[i] = (uint8_t)(hi << 4 | (lo & 0x0F));
    }
    return !bad;
}

static int prepare(capsem_index *ix, const char *sql, char *err, size_t errlen) {
    if (ix->stmt) return SQLITE_OK;
    int rc = sqlite3_prepare_v2(ix->db, sql, -1, &ix->stmt, NULL);
    if (rc != SQLITE_OK) copy_err(ix->db, rc, err, errlen);
    return rc;
}

/* SQLITE_ROW, or SQLITE_OK with *done set at the end, or an error copied to err. */
static int step(capsem_index *ix, int *done, char *err, size_t errlen) {
    int rc = sqlite3_step(ix->stmt);
    if (rc == SQLITE_DONE) {
        *done = 1;
        return SQLITE_OK;
    }
    if (rc != SQLITE_ROW) copy_err(ix->db, rc, err, errlen);
    return rc;
}

int capsem_index_fill_bodies(capsem_index *ix, capsem_body_rows *r, size_t start, size_t cap, size_t *filled,
                             int *done, char *err, size_t errlen) {
    *done = 0;
    *filled = start;
    int rc = prepare(ix,
                     "SELECT id, block_offset, body_offset, body_len, body_hash FROM event_body_blobs",
                     err, errlen);
    if (rc != SQLITE_OK) return rc;
    size_t i = start;
    while (i < cap && (rc = step(ix, done, err, errlen)) == SQLITE_ROW) {
        r->id[i] = sqlite3_column_int64(ix->stmt, 0);
        r->block_offset[i] = sqlite3_column_int64(ix->stmt, 1);
        r->body_offset[i] = sqlite3_column_int64(ix->stmt, 2);
        r->body_len[i] = sqlite3_column_int64(ix->stmt, 3);
        const unsigned char *text = sqlite3_column_text(ix->stmt, 4);
        int len = sqlite3_column_bytes(ix->stmt, 4);
        int ok = sqlite3_column_type(ix->stmt, 4) == SQLITE_TEXT && capsem_parse_body_hash(text, len, r->digest + 32 * i);
        if (!ok) memset(r->digest + 32 * i, 0, 32);
        r->hash_ok[i] = (uint8_t)ok;
        i++;
    }
    *filled = i;
    return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

int capsem_index_fill_blocks(capsem_index *ix, capsem_block_rows *r, size_t start, size_t cap, size_t *filled,
                             int *done, char *err, size_t errlen) {
    *done = 0;
    *filled = start;
    int rc = prepare(ix, "SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset", err,
                     errlen);
    if (rc != SQLITE_OK) return rc;
    size_t i = start;
    while (i < cap && (rc = step(ix, done, err, errlen)) == SQLITE_ROW) {
        r->block_offset[i] = sqlite3_column_int64(ix->stmt, 0);
        r->raw_len[i] = sqlite3_column_int64(ix->stmt, 1);
        r->disk_len[i] = sqlite3_column_int64(ix->stmt, 2);
        i++;
    }
    *filled = i;
    return rc == SQLITE_ROW ? SQLITE_OK : rc;
}
