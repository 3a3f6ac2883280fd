/* A table tree of session.db's own pages and the rows on its leaves (fileformat2 §1.5 b-tree
 * pages, §1.6 payload and overflow, §2.1 records), read from the mapped file for the column
 * scans (scan_pages.h). The caller has made sure the map is the snapshot of its read
 * transaction.
 *
 * `cs_pages_open` walks the tree from its root down to the first leaf holding a rowid past
 * `after` (interior keys say where) and lists every leaf from there on with the rowid bounds
 * its ancestors give it. A `cs_reader` (one per thread) then reads a leaf's cells, each cell's
 * rowid and payload, and the record header's values of the chosen columns. Anything not as
 * SQLite writes it - a page of the wrong type, a cell outside its page, a rowid out of its
 * ancestors' bounds or not increasing, a header or chain shorter than it says, a reserved
 * serial type, a record with fewer columns than the table (an ALTER TABLE default SQLite
 * would supply), a tree that loops or is deeper than any sound one - answers CS_UNREADABLE,
 * and the caller reads the table through SQLite instead. Every page number, offset, varint
 * and length is bounded before use; the map is read under the SIGBUS guard (`cs_guarded`: a
 * file cut short underneath answers CS_SHRANK).
 *
 * Every reader of the map keeps a bounded window of it resident (page_window.h, as the page
 * map and the record scans do): the tree walk and each `cs_reader` note every page they read,
 * and drop what they touched once it fills `window` bytes, and when they end. A reader pins the
 * leaf whose cells it reads, since it goes back to it between its rows' overflow pages. */
#ifndef CAPSEM_SCAN_LEAVES_H
#define CAPSEM_SCAN_LEAVES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "column_build.h"
#include "page_map.h"
#include "page_payload.h"
#include "utf8_check.h"

#define CS_ROWID 0xFFFFFFFFu
#define CS_MAX_COLUMNS 2000 /* SQLite's own default limit */

enum {
    CS_OK = 0,
    CS_CANCELLED = 1,
    CS_NO_MEMORY = -1,
    CS_UNREADABLE = -2,
    CS_SHRANK = -3,
    CS_TOO_LARGE = -4, /* a value past the caller's bound (a page of events) */
};

/* A leaf of the tree and the rowids its ancestors allow it: (lo, hi], open where unbounded. */
typedef struct {
    uint32_t page;
    uint8_t lo_open, hi_open;
    int64_t lo, hi;
} cs_leaf;

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
    uint64_t window;  /* bytes of the map the walk and each reader keep resident; 0: no bound */
    capsem_page_window *shared; /* not NULL: the walk and the reader note their pages here instead */
    /* filled by cs_pages_open */
    cs_leaf *leaves;
    size_t nleaves;
    uint32_t *order;    /* output columns in record order */
    uint32_t *want;     /* the record column of each of them (CS_ROWID first) */
    uint8_t *want_real; /* and its REAL affinity */
    uint32_t need;      /* record columns the header walk must reach */
} cs_pages;

/* Parse the header of the map and list the leaves (see above). CS_OK, CS_UNREADABLE,
 * CS_NO_MEMORY, CS_SHRANK. The caller frees with cs_pages_close (also on error). */
int cs_pages_open(cs_pages *s);
void cs_pages_close(cs_pages *s);

/* Run fn(arg) with this thread's SIGBUS guard armed over the map: fn's answer, or CS_SHRANK. */
int cs_guarded(const cs_pages *s, int (*fn)(void *), void *arg);

/* One value of a row as its record holds it: class, serial type, where its bytes lie. */
typedef struct {
    uint8_t cls;
    uint64_t t;
    uint32_t off, len;
} cs_value;

/* Per thread: the file (and its page counter), its window over the map, a header buffer, the
 * row's values, a buffer for values gathered from overflow pages, and the next leaf's lines
 * still to ask for. */
typedef struct {
    capsem_rec_file f;
    capsem_page_window win; /* f.window points here when s->window bounds it */
    const cs_pages *s;
    uint8_t *header;
    cs_value *vals; /* in the order of s->order */
    uint8_t *scratch;
    uint32_t scratch_cap;
    const uint8_t *ahead; /* the next leaf's page */
    uint32_t ahead_left;  /* its bytes below this not asked for yet */
    uint32_t ahead_step;  /* lines asked for per row read */
} cs_reader;

int cs_reader_init(cs_reader *r, const cs_pages *s);
/* Free the reader, dropping what its window still holds of the map. */
void cs_reader_free(cs_reader *r);

/* The cells of leaf `li`, checked as a leaf page: the page and its cell count. */
int cs_leaf_cells(cs_reader *r, size_t li, const uint8_t **page, uint32_t *ncell);
/* Cell i of a leaf: its payload and rowid, the rowid checked against the leaf's bounds and
 * the previous row's (*prev, *have_prev: the reader's last row, updated). */
int cs_leaf_row(cs_reader *r, size_t li, const uint8_t *page, uint32_t i, int64_t *prev, int *have_prev,
                int64_t *rowid, payload *p);
/* The record's values of the chosen columns into r->vals, in r->s->order (classes from serial
 * types; TEXT not yet checked for UTF-8; the REAL affinity applied). */
int cs_row_values(cs_reader *r, payload *p, int64_t rowid);
/* The values' bytes when they run onto overflow pages (the inline functions below call these
 * only then). */
int cs_value_number_chain(cs_reader *r, payload *p, const cs_value *v, int64_t *i, double *d);
int cs_value_gather_chain(cs_reader *r, payload *p, const cs_value *v, const uint8_t **out);

/* The number of serial type v->t whose big-endian bytes are at b, as the class the column
 * reads it as (v->cls: an INTEGER of a REAL column is REAL). */
static inline void cs_number_of(const uint8_t *b, const cs_value *v, int64_t *i, double *d) {
    if (v->t == 7) {
        uint64_t bits = 0;
        for (int k = 0; k < 8; k++) bits = (bits << 8) | b[k];
        memcpy(d, &bits, 8);
        return;
    }
    int64_t x = capsem_serial_int(b, v->t);
    if (v->cls == CS_REAL) *d = (double)x;
    else *i = x;
}

/* A numeric value (INTEGER or REAL serial types, `rowid` for the rowid column) as the class
 * the column reads it as. CS_OK or CS_UNREADABLE (a chain shorter than the payload says). */
static inline int cs_value_number(cs_reader *r, payload *p, const cs_value *v, int64_t rowid, int64_t *i,
                                  double *d) {
    static const uint8_t none[8] = {0};
    if (v->t == 0 && v->cls == CS_INTEGER) { /* the rowid column */
        *i = rowid;
        return CS_OK;
    }
    if (v->len && v->off + v->len > p->nlocal) return cs_value_number_chain(r, p, v, i, d);
    cs_number_of(v->len ? p->local + v->off : none, v, i, d);
    return CS_OK;
}

/* A TEXT or BLOB value's bytes in one piece: on the page, or gathered from its overflow
 * chain into the reader's scratch buffer (grown to the value's length, which the record
 * header bounded by the payload). CS_OK, CS_UNREADABLE (a chain shorter than the payload
 * says), CS_NO_MEMORY. An empty value has no bytes to read, wherever it lies. */
static inline int cs_value_gather(cs_reader *r, payload *p, const cs_value *v, const uint8_t **out) {
    if (v->len && v->off + v->len > p->nlocal) return cs_value_gather_chain(r, p, v, out);
    *out = p->local + (v->len ? v->off : 0);
    return CS_OK;
}

#endif
