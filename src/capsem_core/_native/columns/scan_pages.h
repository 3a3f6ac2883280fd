/* A table's rows read from session.db's own pages (fileformat2 §1.5 b-tree pages, §1.6
 * payload and overflow, §2.1 records), for a stream of record batches and for a page of
 * events. The caller has made sure the mapped file is the snapshot of its read transaction.
 *
 * The table tree is walked from its root down to the first leaf holding a rowid past `after`
 * (interior keys say where), and every leaf from there on is listed with the rowid bounds its
 * ancestors give it. The first pass (`cs_pages_plan`, on threads over contiguous runs of
 * leaves) reads every row's record header, checks each text's UTF-8 and walks every overflow
 * chain, and so learns each column's storage classes and cuts the rows into batches whose
 * exact sizes it records; the second (`cs_pages_fill`) fills one batch. Anything not as
 * SQLite writes it - a page of the wrong type, a cell outside its page, a rowid out of its
 * ancestors' bounds or not increasing, a header or chain shorter than it says, a reserved
 * serial type, a record with fewer columns than the table (an ALTER TABLE default SQLite
 * would supply), a tree that loops or is deeper than any sound one - makes the first pass
 * answer CS_UNREADABLE, and the caller reads the table through SQLite instead. Since the
 * second pass reads exactly what the first checked, it meets nothing new. Every page number,
 * offset, varint and length is bounded before use; the map is read under the SIGBUS guard
 * (a file cut short underneath answers CS_SHRANK). */
#ifndef CAPSEM_SCAN_PAGES_H
#define CAPSEM_SCAN_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "column_build.h"
#include "page_map.h"

#define CS_ROWID 0xFFFFFFFFu
#define CS_MAX_COLUMNS 2000 /* SQLite's own default limit */

enum {
    CS_OK = 0,
    CS_CANCELLED = 1,
    CS_NO_MEMORY = -1,
    CS_UNREADABLE = -2,
    CS_SHRANK = -3,
};

/* A leaf of the tree and the rowids its ancestors allow it: (lo, hi], open where unbounded. */
typedef struct {
    uint32_t page;
    uint8_t lo_open, hi_open;
    int64_t lo, hi;
} cs_leaf;

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

typedef struct {
    const uint8_t *map;
    uint64_t size;
    capsem_page_header h;
    uint32_t root;
    int has_after;
    int64_t after;
    size_t ncols;
    const uint32_t *record; /* per output column: its record column, or CS_ROWID */
    const uint8_t *real;    /* per output column: REAL affinity (an INTEGER reads as REAL) */
    volatile const int *cancel;
    int64_t max_rows; /* > 0: list only the leaves that can hold this many rows past `after` */
    /* filled by cs_pages_open */
    cs_leaf *leaves;
    size_t nleaves;
    uint32_t *order; /* output columns in record order */
    uint32_t need;   /* record columns the header walk must reach */
} cs_pages;

/* Parse the header of the map and list the leaves (see above). CS_OK, CS_UNREADABLE,
 * CS_NO_MEMORY, CS_SHRANK. The caller frees with cs_pages_close (also on error). */
int cs_pages_open(cs_pages *s);
void cs_pages_close(cs_pages *s);

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
    uint64_t max_value; /* a TEXT / BLOB longer than this fails with CS_TOO_LARGE */
} cs_rows;

#define CS_TOO_LARGE (-4)

int cs_rows_reserve(cs_rows *r, size_t ncols, int64_t rows);
uint8_t *cs_rows_bytes(cs_rows *r, uint32_t len, uint64_t *at);
void cs_rows_free(cs_rows *r);

int cs_pages_rows(const cs_pages *s, int64_t limit, cs_rows *out);

#endif
