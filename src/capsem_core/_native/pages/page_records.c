/* Rows of one table b-tree, read from the file (see page_records.h). */
#include <stdlib.h>
#include <string.h>

#include "big_alloc.h"
#include "body_hash.h"
#include "map_guard.h"
#include "page_payload.h"
#include "page_records.h"

#define CANCEL_EVERY 256u
#define PREFETCH 3u
#define MAX_PREFETCH_LINES 8u
#define FIRST_ROWS 4096u
/* A record header longer than this is not one a ledger's tables write (each column's serial
 * type takes at most 9 bytes). */
#define MAX_HEADER 4096u
/* The previous value of a text column, kept to skip the codes for runs of equal texts. */
#define LAST_TEXT 64u
/* Texts coded in one batch (about a leaf page's), so the memory their codes probe is asked
 * for before it is needed: a ledger's ids are too many for the codes to stay in cache. */
#define PENDING 2048u
#define ARENA (64u * 1024u)

typedef struct {
    uint32_t len, have;
    int64_t code;
    uint8_t bytes[LAST_TEXT];
} last_text;

/* A text waiting for its code (see flush). */
typedef struct {
    uint64_t hash;
    const uint8_t *p;
    uint32_t len;
    uint32_t col;
    uint64_t row;
    int32_t same; /* an earlier entry of the batch with the same text, or -1 */
    int64_t code;
} pending;

typedef struct {
    capsem_rec_file f;   /* f.pages: b-tree and overflow pages read: at most page_count, or the tree loops */
    capsem_rec_column *cols;
    size_t ncols;
    uint64_t rows, cap;
    uint32_t steps;
    uint32_t lines;      /* cache lines of a cell the last row's values spanned (prefetch_cell) */
    last_text last[CAPSEM_REC_MAX_COLUMNS];
    int32_t prev[CAPSEM_REC_MAX_COLUMNS]; /* the batch's last entry of each column, or -1 */
    size_t npend, arena_used;
    pending pend[PENDING];
    uint8_t arena[ARENA];
    uint8_t header[MAX_HEADER];
    uint8_t text[CAPSEM_REC_MAX_TEXT];
} scan;

static int grow_rows(scan *s) {
    uint64_t cap = s->cap ? s->cap * 2 : FIRST_ROWS;
    for (size_t i = 0; i < s->ncols; i++) {
        capsem_rec_column *c = &s->cols[i];
        int64_t *v = capsem_big_realloc(c->values, c->capacity * sizeof *v, cap * sizeof *v);
        if (!v) return CAPSEM_REC_NO_MEMORY;
        c->values = v;
        c->capacity = cap;
        if (c->kind == CAPSEM_REC_DIGEST) {
            uint8_t *b = capsem_big_realloc(c->bytes, c->bytes_cap, cap * 32);
            if (!b) return CAPSEM_REC_NO_MEMORY;
            c->bytes = b;
            c->bytes_cap = cap * 32;
        }
    }
    s->cap = cap;
    return CAPSEM_REC_OK;
}

/* Append [off, off + len) of the payload to a TEXT column's bytes: values[row] its start. */
static int append_text(scan *s, capsem_rec_column *c, payload *p, uint32_t off, uint32_t len) {
    c->values[s->rows] = (int64_t)c->nbytes;
    if (len == 0) return CAPSEM_REC_OK; /* no bytes to read, and maybe no buffer yet */
    if (c->bytes_cap - c->nbytes < len) {
        uint64_t want = c->bytes_cap ? c->bytes_cap : ARENA;
        while (want - c->nbytes < len) want *= 2; /* len < 2^31: a few doublings at most */
        uint8_t *b = capsem_big_realloc(c->bytes, c->bytes_cap, want);
        if (!b) return CAPSEM_REC_NO_MEMORY;
        c->bytes = b;
        c->bytes_cap = want;
    }
    uint8_t *dst = c->bytes + c->nbytes;
    const uint8_t *src = capsem_payload_bytes(&s->f, p, off, len, dst);
    if (!src) return CAPSEM_REC_UNREADABLE;
    if (src != dst) memcpy(dst, src, len);
    c->nbytes += len;
    return CAPSEM_REC_OK;
}

/* Each byte's value as a lower-case hex digit, 0x10 for any other byte. */
static const uint8_t HEX_DIGIT[256] = {
#define X16 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10
    X16, X16, X16,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, /* 0x30: the digits */
    X16, X16,
    0x10, 10, 11, 12, 13, 14, 15, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, /* 0x60: a-f */
    X16, X16, X16, X16, X16, X16, X16, X16, X16,
#undef X16
};

#define HEX_LEN 12u

/* A HEX column's value for serial type t of `size` bytes at `off` (see page_records.h). The
 * digits are read without a branch each: ids are random, a branch on digit or letter would be
 * mispredicted half the time. */
static int hex_value(scan *s, capsem_rec_column *c, payload *p, uint64_t t, uint32_t off, uint32_t size) {
    int64_t *out = &c->values[s->rows];
    *out = CAPSEM_REC_NULL;
    if (t < 13 || !(t & 1) || size != HEX_LEN) {
        c->odd++;
        return CAPSEM_REC_OK;
    }
    uint8_t text[HEX_LEN];
    const uint8_t *b = capsem_payload_bytes(&s->f, p, off, size, text);
    if (!b) return CAPSEM_REC_UNREADABLE;
    uint64_t v = 0;
    unsigned bad = 0;
    for (unsigned k = 0; k < HEX_LEN; k++) {
        unsigned d = HEX_DIGIT[b[k]];
        bad |= d;
        v = (v << 4) | (d & 0xF);
    }
    if (bad & 0x10)
        c->odd++;
    else
        *out = (int64_t)v;
    return CAPSEM_REC_OK;
}

/* A DIGEST column's value for serial type t of `size` bytes at `off` (see page_records.h). */
static int digest_value(scan *s, capsem_rec_column *c, payload *p, uint64_t t, uint32_t off, uint32_t size) {
    uint8_t *out = c->bytes + 32 * s->rows;
    memset(out, 0, 32);
    if (t < 13 || !(t & 1)) {
        c->values[s->rows] = -1;
        return CAPSEM_REC_OK;
    }
    c->values[s->rows] = 0;
    if (size != CAPSEM_BODY_HASH_TEXT_LEN) return CAPSEM_REC_OK;
    uint8_t text[CAPSEM_BODY_HASH_TEXT_LEN];
    const uint8_t *b = capsem_payload_bytes(&s->f, p, off, size, text);
    if (!b) return CAPSEM_REC_UNREADABLE;
    if (capsem_parse_body_hash(b, (int)size, out)) {
        c->values[s->rows] = 1;
    } else {
        memset(out, 0, 32);
    }
    return CAPSEM_REC_OK;
}

static inline int same_bytes(const uint8_t *a, const uint8_t *b, uint32_t len) {
    uint64_t x, y;
    for (; len >= 8; a += 8, b += 8, len -= 8) {
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    for (uint32_t i = 0; i < len; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* Code the queued texts: ask for the entries their slots hold (the slots were asked for
 * when they were queued), then add them in order. The last text of each column is kept for
 * the next batch's runs. */
static int flush(scan *s) {
    for (size_t k = 0; k < s->npend; k++) {
        const pending *q = &s->pend[k];
        if (q->same < 0) capsem_codes_prefetch_entry(s->cols[q->col].codes, q->hash);
    }
    for (size_t k = 0; k < s->npend; k++) {
        pending *q = &s->pend[k];
        if (q->same >= 0) {
            q->code = s->pend[q->same].code;
        } else {
            q->code = capsem_codes_add_hashed(s->cols[q->col].codes, q->hash, q->p, q->len);
            if (q->code == 0) return CAPSEM_REC_NO_MEMORY;
            if (q->code < 0) return CAPSEM_REC_GAVE_UP;
        }
        s->cols[q->col].values[q->row] = q->code;
    }
    for (size_t i = 0; i < s->ncols; i++) {
        if (s->prev[i] < 0) continue;
        const pending *q = &s->pend[s->prev[i]];
        last_text *last = &s->last[i];
        last->have = q->len <= LAST_TEXT;
        if (last->have) {
            memcpy(last->bytes, q->p, q->len);
            last->len = q->len;
            last->code = q->code;
        }
        s->prev[i] = -1;
    }
    s->npend = 0;
    s->arena_used = 0;
    return CAPSEM_REC_OK;
}

/* The text of column i of row `row`: its code now when it repeats the column's last text,
 * else queued for flush(), its slot asked for. A text read from an overflow chain (in the
 * scratch buffer) is copied to the batch's arena first. */
static int queue_text(scan *s, size_t i, const uint8_t *bytes, uint32_t len, int local) {
    if (s->npend == PENDING || (!local && s->arena_used + len > ARENA)) {
        int rc = flush(s);
        if (rc != CAPSEM_REC_OK) return rc;
    }
    uint64_t row = s->rows;
    int32_t prev = s->prev[i];
    if (prev >= 0) {
        const pending *q = &s->pend[prev];
        if (q->len == len && same_bytes(q->p, bytes, len)) {
            pending *n = &s->pend[s->npend++];
            *n = *q;
            n->row = row;
            n->same = q->same >= 0 ? q->same : prev;
            return CAPSEM_REC_OK;
        }
    } else {
        const last_text *last = &s->last[i];
        if (last->have && last->len == len && same_bytes(last->bytes, bytes, len)) {
            s->cols[i].values[row] = last->code;
            return CAPSEM_REC_OK;
        }
    }
    if (!local) {
        memcpy(s->arena + s->arena_used, bytes, len);
        bytes = s->arena + s->arena_used;
        s->arena_used += len;
    }
    pending *n = &s->pend[s->npend];
    n->hash = capsem_codes_hash(s->cols[i].codes, bytes, len);
    n->p = bytes;
    n->len = len;
    n->col = (uint32_t)i;
    n->row = row;
    n->same = -1;
    capsem_codes_prefetch(s->cols[i].codes, n->hash);
    s->prev[i] = (int32_t)s->npend++;
    return CAPSEM_REC_OK;
}

static int text_value(scan *s, size_t i, payload *p, uint32_t off, uint32_t len) {
    const uint8_t *bytes = capsem_payload_bytes(&s->f, p, off, len, s->text);
    if (!bytes) return CAPSEM_REC_UNREADABLE;
    return queue_text(s, i, bytes, len, bytes != s->text);
}

/* A NULL of column c in the row being read (a DIGEST's NULL is not a text: -1, zero bytes). */
static void null_value(scan *s, capsem_rec_column *c) {
    int64_t *out = &c->values[s->rows];
    switch (c->kind) {
    case CAPSEM_REC_CODE: *out = 0; break;
    case CAPSEM_REC_TEXT: *out = -1 - (int64_t)c->nbytes; break;
    case CAPSEM_REC_DIGEST:
        *out = -1;
        memset(c->bytes + 32 * s->rows, 0, 32);
        break;
    default: *out = CAPSEM_REC_NULL;
    }
}

/* One leaf cell at `pc` of a table leaf page: its chosen columns appended as a row. */
static int read_row(scan *s, const uint8_t *page, uint32_t pc) {
    uint64_t rowid;
    unsigned n;
    payload p;
    if (!capsem_cell_payload(page, pc, s->f.h.usable, &rowid, &p)) return CAPSEM_REC_UNREADABLE;
    if (s->rows == s->cap && grow_rows(s) != CAPSEM_REC_OK) return CAPSEM_REC_NO_MEMORY;

    /* The record header: its size, then one serial type per column. */
    uint8_t first[9];
    uint32_t peek = p.payload < 9 ? p.payload : 9;
    const uint8_t *hb = capsem_payload_bytes(&s->f, &p, 0, peek, first);
    uint64_t hsize;
    if (!hb || !(n = varint(hb, hb + peek, &hsize)) || hsize < n || hsize > p.payload || hsize > MAX_HEADER)
        return CAPSEM_REC_UNREADABLE;
    const uint8_t *hdr = capsem_payload_bytes(&s->f, &p, 0, (uint32_t)hsize, s->header);
    if (!hdr) return CAPSEM_REC_UNREADABLE;
    const uint8_t *ht = hdr + n, *hend = hdr + hsize;
    uint64_t body = hsize; /* payload offset of column `column`'s value */
    uint32_t column = 0;   /* the column whose serial type ht points at */
    uint64_t t = 0;
    for (size_t i = 0; i < s->ncols; i++) {
        capsem_rec_column *c = &s->cols[i];
        int64_t *out = &c->values[s->rows];
        if (c->column == CAPSEM_REC_ROWID) {
            *out = (int64_t)rowid;
            if (*out == CAPSEM_REC_NULL) c->odd++;
            continue;
        }
        /* Skip to column c->column (columns are asked for in increasing order), then read
         * its serial type. Most serial types are one byte: their sizes come from a table. */
        int ended = 0;
        for (;;) {
            if (ht >= hend) {
                ended = 1;
                break;
            }
            if (*ht < 0x80) {
                t = *ht++;
            } else {
                unsigned k = varint_long(ht, hend, &t);
                if (!k) return CAPSEM_REC_UNREADABLE;
                ht += k;
            }
            if (column++ == c->column) break;
            body += t < 128 ? SMALL_SIZE[t] : serial_size(t);
        }
        if (ended) { /* past the record's end: the column's default, which this scan does not read */
            null_value(s, c);
            c->odd++;
            continue;
        }
        uint32_t size = serial_size(t);
        if (body + size > p.payload || t == 10 || t == 11) return CAPSEM_REC_UNREADABLE;
        if (c->kind == CAPSEM_REC_DIGEST) {
            int rc = digest_value(s, c, &p, t, (uint32_t)body, size);
            if (rc != CAPSEM_REC_OK) return rc;
        } else if (t == 0) {
            null_value(s, c);
        } else if (c->kind == CAPSEM_REC_TEXT) {
            if (t >= 13 && (t & 1)) {
                int rc = append_text(s, c, &p, (uint32_t)body, size);
                if (rc != CAPSEM_REC_OK) return rc;
            } else {
                null_value(s, c);
                c->odd++;
            }
        } else if (c->kind == CAPSEM_REC_HEX) {
            int rc = hex_value(s, c, &p, t, (uint32_t)body, size);
            if (rc != CAPSEM_REC_OK) return rc;
        } else if (c->kind == CAPSEM_REC_CODE) {
            if (t >= 13 && (t & 1) && size <= CAPSEM_REC_MAX_TEXT) {
                int rc = text_value(s, i, &p, (uint32_t)body, size);
                if (rc != CAPSEM_REC_OK) return rc;
            } else {
                *out = 0;
                c->odd++;
            }
        } else if ((t >= 1 && t <= 6) || t == 8 || t == 9) {
            uint8_t raw[8] = {0};
            const uint8_t *b = size ? capsem_payload_bytes(&s->f, &p, (uint32_t)body, size, raw) : raw;
            if (!b) return CAPSEM_REC_UNREADABLE;
            *out = capsem_serial_int(b, t);
            if (*out == CAPSEM_REC_NULL) c->odd++;
        } else {
            *out = CAPSEM_REC_NULL;
            c->odd++;
        }
        body += size; /* the next column's value follows */
    }
    /* How far into this cell its last value lay (on the page): the next cells' reach. */
    uint64_t reach = (uint64_t)(p.local - (page + pc)) + (body < p.nlocal ? body : p.nlocal);
    s->lines = (uint32_t)(reach / 64 + 1 < MAX_PREFETCH_LINES ? reach / 64 + 1 : MAX_PREFETCH_LINES);
    s->rows++;
    return CAPSEM_REC_OK;
}

static inline void prefetch_cell(const scan *s, const uint8_t *page, uint32_t pc) {
    uint32_t last = s->f.h.page_size - 1; /* a power of two, less one */
    for (uint32_t k = 0; k < s->lines; k++) __builtin_prefetch(page + ((pc + 64 * k) & last));
}

/* Every cell of leaf page `page`. */
static int read_leaf(scan *s, const uint8_t *page, uint32_t hdr, uint32_t ncell) {
    uint32_t content = get2(page + hdr + 5);
    if (content == 0) content = 65536;
    const uint8_t *ptr = page + hdr + 8;
    /* Cells lie in no order the hardware can guess: ask for a few ahead of the one read,
     * their first lines (a record's header and first columns span a few). */
    for (uint32_t i = 0; i < ncell && i < PREFETCH; i++) prefetch_cell(s, page, get2(ptr + 2 * i));
    for (uint32_t i = 0; i < ncell; i++) {
        if (i + PREFETCH < ncell) prefetch_cell(s, page, get2(ptr + 2 * (i + PREFETCH)));
        uint32_t pc = get2(ptr + 2 * i);
        if (pc < content || pc > s->f.h.usable - 4) return CAPSEM_REC_UNREADABLE;
        int rc = read_row(s, page, pc);
        if (rc != CAPSEM_REC_OK) return rc;
    }
    return flush(s);
}

typedef struct {
    uint32_t page, next;
} frame;

/* Ask for the header and cell pointers of child `i` of an interior page (the page read after
 * the one about to be read), so a leaf's first cells can be asked for as soon as it starts. */
static inline void prefetch_child(const scan *s, const uint8_t *ip, uint32_t ih, uint32_t n, uint32_t i) {
    uint32_t child;
    if (i > n) return;
    if (i == n) {
        child = get4(ip + ih + 8);
    } else {
        uint32_t pc = get2(ip + ih + 12 + 2 * i);
        if (pc > s->f.h.usable - 4) return;
        child = get4(ip + pc);
    }
    if (child < 1 || child > s->f.h.page_count) return;
    const uint8_t *page = capsem_rec_page(&s->f, child);
    __builtin_prefetch(page);
    __builtin_prefetch(page + 64);
}

/* Where one tree's walk is: the interior pages above it, each with the next child to visit,
 * and the page to visit next. */
typedef struct {
    frame stack[CAPSEM_PAGES_MAX_DEPTH];
    unsigned depth;
    uint32_t pgno;
} cursor;

/* Visit the cursor's page (a leaf is read whole, an interior page pushed), then move it to
 * the next page of its tree: CAPSEM_REC_OK with *more set while pages remain, else the
 * tree's end (OK) or what ended it. */
static int step(scan *s, cursor *c, int *more) {
    *more = 0;
    uint32_t pgno = c->pgno;
    if (pgno < 1 || pgno > s->f.h.page_count || ++s->f.pages > s->f.h.page_count) return CAPSEM_REC_UNREADABLE;
    /* From the first page on; at every page behind a stream, whose gate a cancel ends. */
    if ((s->steps++ % CANCEL_EVERY == 0 || s->f.follow) && s->f.cancel && *s->f.cancel) return CAPSEM_REC_CANCELLED;
    const uint8_t *page = capsem_rec_read(&s->f, pgno);
    uint32_t hdr = pgno == 1 ? 100 : 0;
    uint8_t type = page[hdr];
    uint32_t ncell = get2(page + hdr + 3);
    if (ncell > (s->f.h.page_size - 8) / 6) return CAPSEM_REC_UNREADABLE;
    if (type == 0x0D) {
        int rc = read_leaf(s, page, hdr, ncell);
        if (rc != CAPSEM_REC_OK) return rc;
    } else if (type == 0x05) {
        if (c->depth >= CAPSEM_PAGES_MAX_DEPTH) return CAPSEM_REC_UNREADABLE;
        c->stack[c->depth].page = pgno;
        c->stack[c->depth].next = 0;
        c->depth++;
    } else {
        return CAPSEM_REC_UNREADABLE;
    }
    /* The next child: of the deepest interior page with one left. */
    for (;;) {
        if (c->depth == 0) return CAPSEM_REC_OK;
        frame *f = &c->stack[c->depth - 1];
        const uint8_t *ip = capsem_rec_read(&s->f, f->page);
        uint32_t ih = f->page == 1 ? 100 : 0, n = get2(ip + ih + 3);
        if (f->next > n) {
            c->depth--;
            continue;
        }
        if (f->next == n) {
            c->pgno = get4(ip + ih + 8);
        } else {
            uint32_t content = get2(ip + ih + 5);
            if (content == 0) content = 65536;
            uint32_t pc = get2(ip + ih + 12 + 2 * f->next);
            if (pc < content || pc > s->f.h.usable - 4) return CAPSEM_REC_UNREADABLE;
            c->pgno = get4(ip + pc);
        }
        f->next++;
        prefetch_child(s, ip, ih, n, f->next);
        *more = 1;
        return CAPSEM_REC_OK;
    }
}

/* A tree's columns as capsem_records_scan_trees takes them: CAPSEM_REC_OK, or UNREADABLE. */
static int check_columns(const capsem_rec_column *cols, size_t ncols) {
    if (ncols > CAPSEM_REC_MAX_COLUMNS) return CAPSEM_REC_UNREADABLE;
    for (size_t i = 0; i < ncols; i++) {
        if (cols[i].kind > CAPSEM_REC_HEX || (cols[i].kind == CAPSEM_REC_CODE) != (cols[i].codes != NULL) ||
            (cols[i].column == CAPSEM_REC_ROWID && cols[i].kind != CAPSEM_REC_INTEGER))
            return CAPSEM_REC_UNREADABLE;
    }
    for (size_t i = 1; i < ncols; i++) {
        uint32_t a = cols[i - 1].column, b = cols[i].column;
        if (a != CAPSEM_REC_ROWID && b != CAPSEM_REC_ROWID && a >= b) return CAPSEM_REC_UNREADABLE;
    }
    return CAPSEM_REC_OK;
}

/* The live cursor whose next page lies first in the file, or ntrees when none is left. */
static size_t first_in_file(const cursor *c, const int *live, size_t ntrees) {
    size_t best = ntrees;
    for (size_t k = 0; k < ntrees; k++)
        if (live[k] && (best == ntrees || c[k].pgno < c[best].pgno)) best = k;
    return best;
}

/* The live trees walked together under the SIGBUS guard: always the one whose next page
 * lies first in the file. A tree's pages are spread over the file among the others', so the
 * walks move through it as one pass, just behind a read-ahead streaming it (their `follow`). */
static void walk_trees(const uint8_t *map, uint64_t size, capsem_rec_tree *trees, scan **scans, cursor *cursors,
                       int *live, size_t ntrees) {
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        for (size_t k = 0; k < ntrees; k++)
            if (live[k]) trees[k].status = CAPSEM_REC_SHRANK;
        return;
    }
    capsem_guard_range(map, size);
    capsem_guard_armed = 1;
    for (size_t k = 0; k < ntrees; k++) {
        if (!live[k]) continue;
        trees[k].status = grow_rows(scans[k]);
        live[k] = trees[k].status == CAPSEM_REC_OK;
    }
    for (size_t k; (k = first_in_file(cursors, live, ntrees)) < ntrees;) {
        int more = 0;
        int st = step(scans[k], &cursors[k], &more);
        if (st != CAPSEM_REC_OK || !more) {
            trees[k].status = st;
            live[k] = 0;
        }
    }
    capsem_guard_armed = 0;
}

int capsem_records_scan_trees(const uint8_t *map, uint64_t size, const capsem_page_header *h,
                              capsem_rec_tree *trees, size_t ntrees, volatile const int *cancel, uint64_t window,
                              capsem_stream_gate *follow) {
    for (size_t k = 0; k < ntrees; k++) {
        capsem_rec_tree *t = &trees[k];
        t->rows = 0;
        t->status = CAPSEM_REC_OK;
        for (size_t i = 0; i < t->ncols && i < CAPSEM_REC_MAX_COLUMNS; i++) {
            t->cols[i].values = NULL;
            t->cols[i].capacity = 0;
            t->cols[i].odd = 0;
            t->cols[i].bytes = NULL;
            t->cols[i].nbytes = t->cols[i].bytes_cap = 0;
        }
    }
    if (ntrees == 0) return CAPSEM_REC_OK;
    if (ntrees > CAPSEM_REC_MAX_TREES) return CAPSEM_REC_UNREADABLE;
    int bad_file = h->page_size < 512 || h->usable < 480 || (uint64_t)h->page_count * h->page_size > size;
    scan **scans = calloc(ntrees, sizeof *scans);
    cursor *cursors = calloc(ntrees, sizeof *cursors);
    int *live = calloc(ntrees, sizeof *live);
    capsem_page_window win;
    memset(&win, 0, sizeof win);
    int rc = CAPSEM_REC_OK, windowed = 0;
    if (!scans || !cursors || !live) {
        rc = CAPSEM_REC_NO_MEMORY;
        goto out;
    }
    /* Without memory for the window the scans still run, keeping what they read resident. */
    windowed = window && capsem_window_init(&win, map, size, window) == 0;
    for (size_t k = 0; k < ntrees; k++) {
        capsem_rec_tree *t = &trees[k];
        t->status = bad_file ? CAPSEM_REC_UNREADABLE : check_columns(t->cols, t->ncols);
        if (t->status != CAPSEM_REC_OK) continue;
        scan *s = scans[k] = calloc(1, sizeof *s);
        if (!s) {
            rc = CAPSEM_REC_NO_MEMORY;
            goto out;
        }
        s->f.map = map;
        s->f.h = *h;
        s->f.window = windowed ? &win : NULL;
        s->f.follow = follow;
        s->f.cancel = cancel;
        s->cols = t->cols;
        s->ncols = t->ncols;
        for (size_t i = 0; i < CAPSEM_REC_MAX_COLUMNS; i++) s->prev[i] = -1;
        s->lines = 4;
        cursors[k].pgno = t->root;
        live[k] = 1;
    }
    walk_trees(map, size, trees, scans, cursors, live, ntrees);
out:
    capsem_window_end(&win); /* a window never set up is all zeros: nothing to drop */
    for (size_t k = 0; scans && k < ntrees; k++) {
        if (scans[k]) trees[k].rows = scans[k]->rows;
        free(scans ? scans[k] : NULL);
    }
    free(scans);
    free(cursors);
    free(live);
    return rc;
}
