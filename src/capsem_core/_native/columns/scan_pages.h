/* A table's rows from session.db's own pages as record batches, in two passes over the leaves
 * scan_leaves.h lists, and a page of rows for events.
 *
 * The first pass (`cs_pages_plan`, on threads over contiguous runs of leaves) reads every
 * row's record header, checks each text's UTF-8 and walks every overflow chain, and so learns
 * each column's storage classes (which fix the stream's schema, column_build.h) and cuts the
 * rows into batches whose exact sizes it records; anything not as SQLite writes it makes it
 * answer CS_UNREADABLE (the caller then reads the table through SQLite). The second
 * (`cs_pages_fill`) fills one batch; since it reads exactly what the first checked, it meets
 * nothing new. `cs_pages_rows` reads up to N rows as row-major values (a page of events). */
#ifndef CAPSEM_SCAN_PAGES_H
#define CAPSEM_SCAN_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "column_build.h"
#include "scan_leaves.h"

/* A place in the listed leaves: leaf index, cell index. */
typedef struct {
    uint32_t leaf, cell;
} cs_at;

/* One batch the first pass cut: rows [start, end), and per column and class the values and
 * bytes it holds (stats[(col * CS_CLASSES + cls) * 2 + {0: count, 1: bytes}]). */
typedef struct {
    cs_at start, end;
    int64_t rows;
    int64_t last_rowid;
    int64_t *stats;
} cs_pbatch;

/* The first pass on `threads` threads: `masks[col]` receives the classes of each column,
 * `*batches` / `*nbatches` the batches (of at most batch_rows rows, cut once a column holds
 * batch_bytes), freed with cs_pbatches_free. */
int cs_pages_plan(cs_pages *s, int threads, int64_t batch_rows, int64_t batch_bytes, uint8_t *masks,
                  cs_pbatch **batches, size_t *nbatches);
void cs_pbatches_free(cs_pbatch *b, size_t n);

/* The second pass: batch `b` into columns laid out as `lays`, exported to `out`. */
int cs_pages_fill(const cs_pages *s, const cs_layout *lays, const cs_pbatch *b, struct ArrowArray *out);

/* Row-major values of up to `limit` rows past `after` (a page of events). */
typedef struct {
    uint8_t cls;  /* CS_NULL, CS_INTEGER, CS_REAL, CS_TEXT (not checked for UTF-8), CS_BLOB */
    uint32_t len; /* TEXT / BLOB bytes, at arena + at */
    union {
        int64_t i;
        double d;
        uint64_t at;
    } v;
} cs_item;

typedef struct {
    int64_t n;        /* rows */
    int64_t *rowid;   /* n */
    cs_item *items;   /* n * ncols, output column order */
    uint8_t *arena;
    uint64_t arena_len, arena_cap;
    int64_t cap;
    uint64_t max_value; /* a TEXT / BLOB longer than this fails with CS_TOO_LARGE (the rows
                         * before it kept) */
    uint64_t max_bytes; /* > 0: no row is read once the values read hold this many bytes (the
                         * first always is): what a read holds, not only each value, is bounded */
} cs_rows;

/* Whether `r` takes no further row: `limit` rows, or its byte budget reached. */
static inline int cs_rows_full(const cs_rows *r, int64_t limit) {
    return r->n >= limit || (r->max_bytes && r->n > 0 && r->arena_len >= r->max_bytes);
}

int cs_rows_reserve(cs_rows *r, size_t ncols, int64_t rows);
uint8_t *cs_rows_bytes(cs_rows *r, uint32_t len, uint64_t *at);
void cs_rows_free(cs_rows *r);

int cs_pages_rows(const cs_pages *s, int64_t limit, cs_rows *out);

#endif
