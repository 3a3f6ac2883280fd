/* A table tree's leaves and the values of the rows on them (see scan_leaves.h). */
#include <stdlib.h>
#include <string.h>

#include "map_guard.h"
#include "scan_leaves.h"

/* A record header longer than this is not one a table of at most CS_MAX_COLUMNS writes. */
#define MAX_HEADER (9u * (CS_MAX_COLUMNS + 1))

int cs_reader_init(cs_reader *r, const cs_pages *s) {
    memset(r, 0, sizeof *r);
    r->s = s;
    r->f.map = s->map;
    r->f.h = s->h;
    r->header = malloc(MAX_HEADER);
    r->vals = calloc(s->ncols ? s->ncols : 1, sizeof *r->vals);
    /* Without memory for the window the reader still reads, keeping what it read resident. */
    if (s->shared) r->f.window = s->shared;
    else if (s->window && capsem_window_init(&r->win, s->map, s->size, s->window) == 0) r->f.window = &r->win;
    return r->header && r->vals ? CS_OK : CS_NO_MEMORY;
}

void cs_reader_free(cs_reader *r) {
    capsem_window_end(&r->win); /* a window never set up is all zeros: nothing to drop */
    r->f.window = NULL;
    free(r->header);
    free(r->vals);
    free(r->scratch);
}

/* Run fn(arg) with this thread's SIGBUS guard armed over the map. */
int cs_guarded(const cs_pages *s, int (*fn)(void *), void *arg) {
    int rc;
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        capsem_guard_armed = 0;
        return CS_SHRANK;
    }
    capsem_guard_range(s->map, s->size);
    capsem_guard_armed = 1;
    rc = fn(arg);
    capsem_guard_armed = 0;
    return rc;
}

static inline uint32_t hdr_offset(uint32_t pgno) { return pgno == 1 ? 100 : 0; }

/* ---- the tree walk: leaves with their rowid bounds ----------------------------------------- */

typedef struct {
    uint32_t page, ncell, next;
    uint8_t lo_open, hi_open;
    int64_t lo, hi;
} frame;

static int push_leaf(cs_pages *s, size_t *cap, uint32_t page, const frame *b) {
    if (s->nleaves == *cap) {
        size_t want = *cap ? *cap * 2 : 256;
        cs_leaf *l = realloc(s->leaves, want * sizeof *l);
        if (!l) return CS_NO_MEMORY;
        s->leaves = l;
        *cap = want;
    }
    s->leaves[s->nleaves++] = (cs_leaf){page, b->lo_open, b->hi_open, b->lo, b->hi};
    return CS_OK;
}

/* Key of cell i of an interior page (and its child), bounded. */
static int interior_cell(const cs_pages *s, const uint8_t *page, uint32_t ih, uint32_t i, uint32_t *child,
                         int64_t *key) {
    uint32_t content = get2(page + ih + 5);
    if (content == 0) content = 65536;
    uint32_t pc = get2(page + ih + 12 + 2 * i);
    if (pc < content || pc > s->h.usable - 5) return CS_UNREADABLE;
    *child = get4(page + pc);
    uint64_t k;
    if (!varint(page + pc + 4, page + s->h.usable, &k)) return CS_UNREADABLE;
    *key = (int64_t)k;
    return CS_OK;
}

static int walk_in(cs_pages *s, capsem_page_window *win) {
    frame stack[CAPSEM_PAGES_MAX_DEPTH];
    unsigned depth = 0;
    size_t cap = 0;
    uint64_t visited = 0;
    int seeking = s->has_after;
    int64_t cells = 0, first_cells = -1; /* cells of the leaves listed (a page of rows needs few) */
    frame bounds = {0, 0, 0, 1, 1, 0, 0};
    uint32_t pgno = s->root;
    for (;;) {
        if (pgno < 1 || pgno > s->h.page_count || ++visited > s->h.page_count) return CS_UNREADABLE;
        if (s->cancel && *s->cancel) return CS_CANCELLED;
        capsem_window_touch(win, (uint64_t)(pgno - 1) * s->h.page_size);
        const uint8_t *page = s->map + (uint64_t)(pgno - 1) * s->h.page_size;
        uint32_t ih = hdr_offset(pgno);
        uint8_t type = page[ih];
        uint32_t ncell = get2(page + ih + 3);
        if (ncell > (s->h.page_size - 8) / 6) return CS_UNREADABLE;
        if (type == 0x0D) {
            int rc = push_leaf(s, &cap, pgno, &bounds);
            if (rc != CS_OK) return rc;
            seeking = 0;
            if (first_cells < 0) first_cells = ncell; /* of which some may lie at or before `after` */
            cells += ncell;
            if (s->max_rows > 0 && cells - first_cells >= s->max_rows) return CS_OK;
        } else if (type == 0x05) {
            if (depth >= CAPSEM_PAGES_MAX_DEPTH) return CS_UNREADABLE;
            frame *f = &stack[depth++];
            *f = bounds;
            f->page = pgno;
            f->ncell = ncell;
            f->next = 0;
            /* Seeking: children whose keys are all at or before `after` are skipped (each
             * key is checked in order and against the bounds as it is passed). */
            while (seeking && f->next < ncell) {
                uint32_t child;
                int64_t key;
                if (interior_cell(s, page, ih, f->next, &child, &key) != CS_OK) return CS_UNREADABLE;
                if ((!f->lo_open && key <= f->lo) || (!f->hi_open && key > f->hi)) return CS_UNREADABLE;
                if (key > s->after) break;
                f->lo = key;
                f->lo_open = 0;
                f->next++;
            }
        } else {
            return CS_UNREADABLE;
        }
        /* The next child of the deepest interior page with one left, and its bounds. */
        for (;;) {
            if (depth == 0) return CS_OK;
            frame *f = &stack[depth - 1];
            /* read again: noted again, its chunk may have been dropped since */
            capsem_window_touch(win, (uint64_t)(f->page - 1) * s->h.page_size);
            const uint8_t *ip = s->map + (uint64_t)(f->page - 1) * s->h.page_size;
            uint32_t ih2 = hdr_offset(f->page);
            if (f->next > f->ncell) {
                depth--;
                continue;
            }
            bounds = *f;
            if (f->next == f->ncell) {
                pgno = get4(ip + ih2 + 8);
            } else {
                int64_t key;
                if (interior_cell(s, ip, ih2, f->next, &pgno, &key) != CS_OK) return CS_UNREADABLE;
                if ((!f->lo_open && key <= f->lo) || (!f->hi_open && key > f->hi)) return CS_UNREADABLE;
                bounds.hi = key;
                bounds.hi_open = 0;
                f->lo = key; /* the next child's rows come after it */
                f->lo_open = 0;
            }
            f->next++;
            break;
        }
    }
}

typedef struct {
    cs_pages *s;
    capsem_page_window *win;
} walk_job;

static int walk(void *arg) {
    walk_job *j = arg;
    return walk_in(j->s, j->win);
}

int cs_pages_open(cs_pages *s) {
    s->leaves = NULL;
    s->nleaves = 0;
    s->order = NULL;
    s->want = NULL;
    s->want_real = NULL;
    s->need = 0;
    if (s->ncols > CS_MAX_COLUMNS) return CS_UNREADABLE;
    if ((uint64_t)s->h.page_count * s->h.page_size > s->size || s->h.page_size < 512 || s->h.usable < 480)
        return CS_UNREADABLE;
    size_t n = s->ncols ? s->ncols : 1;
    s->order = malloc(n * sizeof *s->order);
    s->want = malloc(n * sizeof *s->want);
    s->want_real = malloc(n);
    if (!s->order || !s->want || !s->want_real) return CS_NO_MEMORY;
    /* Output columns in record order (the rowid first): a record's values are read forwards. */
    for (size_t i = 0; i < s->ncols; i++) s->order[i] = (uint32_t)i;
    for (size_t i = 1; i < s->ncols; i++) {
        uint32_t k = s->order[i];
        size_t j = i;
        uint64_t key = s->record[k] == CS_ROWID ? 0 : (uint64_t)s->record[k] + 1;
        while (j > 0) {
            uint32_t o = s->order[j - 1];
            uint64_t other = s->record[o] == CS_ROWID ? 0 : (uint64_t)s->record[o] + 1;
            if (other <= key) break;
            s->order[j] = o;
            j--;
        }
        s->order[j] = k;
    }
    for (size_t k = 0; k < s->ncols; k++) {
        s->want[k] = s->record[s->order[k]];
        s->want_real[k] = s->real[s->order[k]];
    }
    for (size_t i = 0; i < s->ncols; i++)
        if (s->record[i] != CS_ROWID && s->record[i] + 1 > s->need) s->need = s->record[i] + 1;
    if (s->need > CS_MAX_COLUMNS) return CS_UNREADABLE;
    /* The walk's pages under a window of its own, dropped when it ends (the passes after it
     * read the leaves again, each through its reader's window). */
    capsem_page_window win;
    memset(&win, 0, sizeof win);
    walk_job j = {s, s->shared};
    if (!j.win && s->window && capsem_window_init(&win, s->map, s->size, s->window) == 0) j.win = &win;
    int rc = cs_guarded(s, walk, &j);
    capsem_window_end(&win);
    return rc;
}

void cs_pages_close(cs_pages *s) {
    free(s->leaves);
    free(s->order);
    free(s->want);
    free(s->want_real);
    s->leaves = NULL;
    s->order = NULL;
    s->want = NULL;
    s->want_real = NULL;
    s->nleaves = 0;
}

/* ---- one row ------------------------------------------------------------------------------ */

static int cell_payload(const cs_reader *r, const uint8_t *page, uint32_t pc, int64_t *rowid, payload *p) {
    uint64_t rid;
    if (!capsem_cell_payload(page, pc, r->f.h.usable, &rid, p)) return CS_UNREADABLE;
    *rowid = (int64_t)rid;
    return CS_OK;
}

/* The class of each serial type below 12 (10 and 11, reserved, are refused before this). */
static const uint8_t NUMBER_CLASS[12] = {CS_NULL,    CS_INTEGER, CS_INTEGER, CS_INTEGER, CS_INTEGER, CS_INTEGER,
                                         CS_INTEGER, CS_REAL,    CS_INTEGER, CS_INTEGER, CS_NULL,    CS_NULL};

/* The next serial type of a record header: one byte for most, two for a text or blob of 58 to
 * 8,185 bytes (a ledger's ids, hashes and short contents), SQLite's varint beyond. NULL when it
 * runs off the header. */
static inline const uint8_t *serial_type(const uint8_t *ht, const uint8_t *hend, uint64_t *t) {
    if (ht[0] < 0x80) {
        *t = ht[0];
        return ht + 1;
    }
    if (ht + 1 < hend && ht[1] < 0x80) {
        *t = ((uint64_t)(ht[0] & 0x7f) << 7) | ht[1];
        return ht + 2;
    }
    unsigned n = varint_long(ht, hend, t);
    return n ? ht + n : NULL;
}

int cs_row_values(cs_reader *r, payload *p, int64_t rowid) {
    const cs_pages *s = r->s;
    uint8_t first[9];
    uint32_t peek = p->payload < 9 ? p->payload : 9;
    const uint8_t *hb = capsem_payload_bytes(&r->f, p, 0, peek, first);
    uint64_t hsize;
    unsigned n;
    (void)rowid;
    if (!hb || !(n = varint(hb, hb + peek, &hsize)) || hsize < n || hsize > p->payload || hsize > MAX_HEADER)
        return CS_UNREADABLE;
    const uint8_t *hdr = capsem_payload_bytes(&r->f, p, 0, (uint32_t)hsize, r->header);
    if (!hdr) return CS_UNREADABLE;
    /* Locals, not the structures' fields: the stores below (bytes) may alias those, so the
     * compiler would read them again for every value. */
    const uint8_t *ht = hdr + n, *hend = hdr + hsize;
    const uint32_t *want = s->want;
    const uint8_t *real = s->want_real;
    cs_value *vals = r->vals;
    const size_t ncols = s->ncols;
    const uint64_t total = p->payload;
    uint64_t body = hsize, t = 0;
    uint32_t column = 0;
    for (size_t k = 0; k < ncols; k++) {
        uint32_t w = want[k];
        if (w == CS_ROWID) { /* its record column holds NULL: the caller has the rowid */
            vals[k] = (cs_value){CS_INTEGER, 0, 0, 0};
            continue;
        }
        for (;;) { /* on to record column w, summing the sizes of the values passed */
            if (ht >= hend) return CS_UNREADABLE; /* a short record: SQLite would supply the default */
            if (!(ht = serial_type(ht, hend, &t)) || t == 10 || t == 11) return CS_UNREADABLE;
            if (column++ == w) break;
            body += serial_size(t);
        }
        uint32_t size = serial_size(t);
        if (body + size > total) return CS_UNREADABLE;
        uint8_t cls = t < 12 ? NUMBER_CLASS[t] : (t & 1) ? CS_TEXT : CS_BLOB;
        if (cls == CS_INTEGER && real[k]) cls = CS_REAL;
        vals[k] = (cs_value){cls, t, (uint32_t)body, size};
        body += size;
    }
    return CS_OK;
}

int cs_value_number_chain(cs_reader *r, payload *p, const cs_value *v, int64_t *i, double *d) {
    uint8_t raw[8];
    const uint8_t *b = capsem_payload_bytes(&r->f, p, v->off, v->len, raw);
    if (!b) return CS_UNREADABLE;
    cs_number_of(b, v, i, d);
    return CS_OK;
}

int cs_value_gather_chain(cs_reader *r, payload *p, const cs_value *v, const uint8_t **out) {
    if (v->len > r->scratch_cap) {
        uint8_t *b = realloc(r->scratch, v->len);
        if (!b) return CS_NO_MEMORY;
        r->scratch = b;
        r->scratch_cap = v->len;
    }
    *out = capsem_payload_bytes(&r->f, p, v->off, v->len, r->scratch);
    return *out ? CS_OK : CS_UNREADABLE;
}

/* A leaf's lines are asked for while the leaf before it is read, a few per row: the cells of
 * a page lie in no order the hardware prefetcher follows (each row's first touch would
 * otherwise wait on memory), and asking for a whole page at once fills the queue of misses
 * and stalls there instead. */
static inline void ask_ahead(cs_reader *r, uint32_t lines) {
    while (lines-- && r->ahead_left) {
        r->ahead_left -= 64;
        __builtin_prefetch(r->ahead + r->ahead_left);
    }
}

/* The cells of leaf `li`, checked as a leaf page. */
int cs_leaf_cells(cs_reader *r, size_t li, const uint8_t **page, uint32_t *ncell) {
    const cs_leaf *leaf = &r->s->leaves[li];
    capsem_window_pin(r->f.window, (uint64_t)(leaf->page - 1) * r->f.h.page_size);
    *page = r->s->map + (uint64_t)(leaf->page - 1) * r->f.h.page_size;
    uint32_t hdr = hdr_offset(leaf->page);
    if ((*page)[hdr] != 0x0D) return CS_UNREADABLE;
    *ncell = get2(*page + hdr + 3);
    if (*ncell > (r->f.h.page_size - 8) / 6) return CS_UNREADABLE;
    r->f.pages = 0; /* a leaf's overflow chains hold at most the file's pages */
    /* The next leaf: its header and cell pointers now, the rest (from the end of the page,
     * where its first cells lie) a few lines per row of this one. */
    ask_ahead(r, UINT32_MAX);
    uint32_t lines = r->f.h.page_size / 64;
    r->ahead_step = (lines + *ncell - 1) / (*ncell ? *ncell : 1) + 1;
    if (li + 1 < r->s->nleaves) {
        r->ahead = r->s->map + (uint64_t)(r->s->leaves[li + 1].page - 1) * r->f.h.page_size;
        __builtin_prefetch(r->ahead);
        __builtin_prefetch(r->ahead + 64);
        r->ahead += 128;
        r->ahead_left = r->f.h.page_size - 128;
    }
    return CS_OK;
}

int cs_leaf_row(cs_reader *r, size_t li, const uint8_t *page, uint32_t i, int64_t *prev, int *have_prev,
                int64_t *rowid, payload *p) {
    const cs_leaf *leaf = &r->s->leaves[li];
    uint32_t hdr = hdr_offset(leaf->page);
    ask_ahead(r, r->ahead_step);
    uint32_t content = get2(page + hdr + 5);
    if (content == 0) content = 65536;
    uint32_t pc = get2(page + hdr + 8 + 2 * i);
    if (pc < content || pc > r->f.h.usable - 4) return CS_UNREADABLE;
    int rc = cell_payload(r, page, pc, rowid, p);
    if (rc != CS_OK) return rc;
    if ((!leaf->lo_open && *rowid <= leaf->lo) || (!leaf->hi_open && *rowid > leaf->hi)) return CS_UNREADABLE;
    if (*have_prev && *rowid <= *prev) return CS_UNREADABLE;
    *prev = *rowid;
    *have_prev = 1;
    return CS_OK;
}
