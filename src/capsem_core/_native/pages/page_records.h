/* Rows of one table b-tree, read from the database file's own bytes (SQLite's file format,
 * fileformat2 §1.5 b-tree pages, §1.6 payload and overflow, §2.1 record format): chosen
 * columns of every row, in rowid order, into integer arrays with no SQL and no object per
 * row. A text column becomes codes (text_codes.h) or its bytes end to end, a body_hash its
 * digest, an integer column its values.
 *
 * It reads what a sound tree holds and nothing else: any page, cell or record that is not as
 * SQLite writes it (a wrong page type, a cell outside its page, a chain shorter than its
 * payload, a tree deeper than CAPSEM_PAGES_MAX_DEPTH or larger than the file) ends the scan
 * with CAPSEM_REC_UNREADABLE, and the caller answers with SQL instead, which words the
 * damage. A value of another kind than the column's (a text in an integer column, a blob,
 * a real, a value past the end of a short record, a text longer than CAPSEM_REC_MAX_TEXT)
 * is counted in the column's `odd`, so the caller never reasons about values it did not
 * read. Every page number and length read from the file is bounded before use; the file is
 * read under the SIGBUS guard. */
#ifndef CAPSEM_PAGE_RECORDS_H
#define CAPSEM_PAGE_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "page_map.h"
#include "stream_gate.h"
#include "text_codes.h"

/* The column that is the row's rowid (an INTEGER PRIMARY KEY is stored as NULL). */
#define CAPSEM_REC_ROWID 0xFFFFFFFFu
/* An integer column's NULL. A stored value equal to it is odd. */
#define CAPSEM_REC_NULL INT64_MIN
/* The longest text a CODE column codes (a longer one is odd); TEXT columns take any. */
#define CAPSEM_REC_MAX_TEXT 4096u
#define CAPSEM_REC_MAX_COLUMNS 16

enum {
    CAPSEM_REC_OK = 0,
    CAPSEM_REC_CANCELLED = 1,
    CAPSEM_REC_NO_MEMORY = -1,
    CAPSEM_REC_UNREADABLE = -2, /* the tree is not one this scan reads (see above) */
    CAPSEM_REC_GAVE_UP = -3,    /* the text codes reached their probe bound */
    CAPSEM_REC_SHRANK = -4,     /* the file shrank while it was read */
};

/* What a column's values become (values[row] below). */
enum {
    CAPSEM_REC_INTEGER = 0, /* the integer; CAPSEM_REC_NULL for NULL */
    CAPSEM_REC_CODE = 1,    /* the text's code in `codes`; 0 for NULL */
    CAPSEM_REC_TEXT = 2,    /* the text's bytes appended to `bytes`, values[row] their start;
                             * -1 - (bytes used so far) for NULL, so row i's bytes end where the
                             * next row's start (the last row's at nbytes) */
    CAPSEM_REC_DIGEST = 3,  /* a body_hash: 1 for "blake3:" + 64 lower-case hex (its 32 bytes
                             * at bytes[32 * row]), 0 for another text, -1 for a value that is
                             * not a text (NULL included; then and for 0 the 32 bytes are zero) */
    CAPSEM_REC_HEX = 4,     /* an event id, 12 lower-case hex digits: their 48-bit value (equal
                             * values, byte-equal texts); CAPSEM_REC_NULL for NULL. Any other
                             * value is odd (another text too): read as NULL */
};

typedef struct {
    uint32_t column;  /* in: the record's column number, or CAPSEM_REC_ROWID */
    uint32_t kind;    /* in: CAPSEM_REC_INTEGER, _CODE, _TEXT or _DIGEST */
    capsem_codes *codes; /* in: a CODE column's codes */
    int64_t *values;  /* out: [rows] of `capacity`, from capsem_big_alloc: the caller's to free with
                       * capsem_big_free(values, capacity * 8), also on error */
    uint64_t capacity;
    uint64_t odd;     /* out: values of another kind, read as NULL (DIGEST: only a column the
                       * record lacks, written before ALTER TABLE added it) */
    uint8_t *bytes;   /* out: TEXT and DIGEST columns, from capsem_big_alloc; the caller frees
                       * capsem_big_free(bytes, bytes_cap), also on error */
    uint64_t nbytes, bytes_cap;
} capsem_rec_column;

/* One tree of capsem_records_scan_trees: in, its root and its columns (at most
 * CAPSEM_REC_MAX_COLUMNS, in increasing `column` order, the rowid anywhere); out, its rows and
 * how its walk ended (a CAPSEM_REC_ status). */
typedef struct {
    uint32_t root;
    capsem_rec_column *cols;
    size_t ncols;
    uint64_t rows;
    int status;
} capsem_rec_tree;

#define CAPSEM_REC_MAX_TREES 64

/* Scan the table trees (at most CAPSEM_REC_MAX_TREES) of a mapped file whose header `h`
 * parsed, in one pass on this thread: always the page that lies first in the file among each
 * tree's next, so together they read the file in about file order (each tree's pages are
 * spread among the others'). Columns of one pass may share codes; passes sharing codes must
 * not run at once. A tree that cannot be read ends alone, in its `status`. `cancel`, when not
 * NULL, is polled. `window`: the bytes of the map the pass keeps resident (page_window.h; 0:
 * no bound). `follow`, when not NULL: a read-ahead's gate on this file, whose stream the pass
 * stays behind (stream_gate.h). Returns CAPSEM_REC_NO_MEMORY when the pass itself could not be
 * set up, UNREADABLE past the tree bound, else CAPSEM_REC_OK. Runs without the GIL. */
int capsem_records_scan_trees(const uint8_t *map, uint64_t size, const capsem_page_header *h,
                              capsem_rec_tree *trees, size_t ntrees, volatile const int *cancel, uint64_t window,
                              capsem_stream_gate *follow);

#endif
