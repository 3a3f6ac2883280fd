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
    return r->header && r->vals ? CS_OK : CS_NO_MEMORY;
}

void cs_reader_free(cs_reader *r) {
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

static int walk(void *arg) {
    cs_pages *s = arg;
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

int cs_pages_open(cs_pages *s) {
    s->leaves = NULL;
    s->nleaves = 0;
    s->order = NULL;
    s->need = 0;
    if (s->ncols > CS_MAX_COLUMNS) return CS_UNREADABLE;
    if ((uint64_t)s->h.page_count * s->h.page_size > s->size || s->h.page_size < 512 || s->h.usable < 480)
        return CS_UNREADABLE;
    s->order = malloc((s->ncols ? s->ncols : 1) * sizeof *s->order);
    if (!s->order) return CS_NO_MEMORY;
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
    for (size_t i = 0; i < s->ncols; i++)
        if (s->record[i] != CS_ROWID && s->record[i] + 1 > s->need) s->need = s->record[i] + 1;
    if (s->need > CS_MAX_COLUMNS) return CS_UNREADABLE;
    return cs_guarded(s, walk, s);
}

void cs_pages_close(cs_pages *s) {
    free(s->leaves);
    free(s->order);
    s->leaves = NULL;
    s->order = NULL;
    s->nleaves = 0;
}

/* ---- one row ------------------------------------------------------------------------------ */

static int cell_payload(const cs_reader *r, const uint8_t *page, uint32_t pc, int64_t *rowid, payload *p) {
    uint64_t rid;
    if (!capsem_cell_payload(page, pc, r->f.h.usable, &rid, p)) return CS_UNREADABLE;
    *rowid = (int64_t)rid;
    return CS_OK;
}

/* The record's values of the chosen columns, in r->s->order (classes from serial types; TEXT
 * not yet checked for UTF-8; the REAL affinity applied). */
int cs_row_values(cs_reader *r, payload *p, int64_t rowid) {
    const cs_pages *s = r->s;
    uint8_t first[9];
    uint32_t peek = p->payload < 9 ? p->payload : 9;
    const uint8_t *hb = capsem_payload_bytes(&r->f, p, 0, peek, first);
    uint64_t hsize;
    unsigned n;
    if (!hb || !(n = varint(hb, hb + peek, &hsize)) || hsize < n || hsize > p->payload || hsize > MAX_HEADER)
        return CS_UNREADABLE;
    const uint8_t *hdr = capsem_payload_bytes(&r->f, p, 0, (uint32_t)hsize, r->header);
    if (!hdr) return CS_UNREADABLE;
    const uint8_t *ht = hdr + n, *hend = hdr + hsize;
    uint64_t body = hsize;
    uint32_t column = 0;
    for (size_t k = 0; k < s->ncols; k++) {
        uint32_t out = s->order[k];
        cs_value *v = &r->vals[k];
        if (s->record[out] == CS_ROWID) {
            v->cls = CS_INTEGER;
            v->t = 0;
            v->off = 0;
            v->len = 0;
            (void)rowid;
            continue;
        }
        uint64_t t = 0;
        for (;;) {
            if (ht >= hend) return CS_UNREADABLE; /* a short record: SQLite would supply the default */
            if (*ht < 0x80) {
                t = *ht++;
            } else {
                unsigned k2 = varint_long(ht, hend, &t);
                if (!k2) return CS_UNREADABLE;
                ht += k2;
            }
            if (column++ == s->record[out]) break;
            if (t == 10 || t == 11) return CS_UNREADABLE;
            body += serial_size(t);
        }
        if (t == 10 || t == 11) return CS_UNREADABLE;
        uint32_t size = serial_size(t);
        if (body + size > p->payload) return CS_UNREADABLE;
        v->t = t;
        v->off = (uint32_t)body;
        v->len = size;
        if (t == 0) v->cls = CS_NULL;
        else if (t == 7) v->cls = CS_REAL;
        else if (t < 12) v->cls = s->real[out] ? CS_REAL : CS_INTEGER;
        else v->cls = (t & 1) ? CS_TEXT : CS_BLOB;
        body += size;
    }
    return CS_OK;
}

/* A numeric value (INTEGER or REAL serial types, `rowid` for the rowid column) as the class
 * the column reads it as. */
int cs_value_number(cs_reader *r, payload *p, const cs_value *v, int64_t rowid, int64_t *i, double *d) {
    if (v->t == 0 && v->cls == CS_INTEGER) { /* the rowid column */
        *i = rowid;
        return CS_OK;
    }
    uint8_t raw[8] = {0};
    const uint8_t *b = v->len ? capsem_payload_bytes(&r->f, p, v->off, v->len, raw) : raw;
    if (!b) return CS_UNREADABLE;
    if (v->t == 7) {
        uint64_t bits = 0;
        for (int k = 0; k < 8; k++) bits = (bits << 8) | b[k];
        memcpy(d, &bits, 8);
        return CS_OK;
    }
    int64_t x = capsem_serial_int(b, v->t);
    if (v->cls == CS_REAL) *d = (double)x;
    else *i = x;
    return CS_OK;
}

/* Walk bytes [off, off + len) of the payload piece by piece (into the UTF-8 check when `u` is
 * given): the overflow chain must hold them. Mirrors chain_bytes' bounds. */
int cs_value_visit(cs_reader *r, payload *p, uint32_t off, uint32_t len, cs_utf8 *u) {
    if (off + len <= p->nlocal) {
        if (u && !cs_ascii(p->local + off, len)) cs_utf8_feed(u, p->local + off, len);
        return CS_OK;
    }
    uint32_t have = 0;
    if (off < p->nlocal) {
        have = p->nlocal - off;
        if (u) cs_utf8_feed(u, p->local + off, have);
    }
    capsem_rec_file *f = &r->f;
    uint32_t per = f->h.usable - 4;
    while (have < len) {
        uint32_t at = off + have;
        while (at >= p->chain_at + per) {
            if (!p->left || p->next < 2 || p->next > f->h.page_count || ++f->pages > f->h.page_count)
                return CS_UNREADABLE;
            p->next = get4(capsem_rec_page(f, p->next));
            p->chain_at += per;
            p->left--;
        }
        if (!p->left || p->next < 2 || p->next > f->h.page_count || at < p->chain_at) return CS_UNREADABLE;
        const uint8_t *content = capsem_rec_page(f, p->next) + 4;
        uint32_t from = at - p->chain_at, n = per - from;
        if (n > len - have) n = len - have;
        if (u) cs_utf8_feed(u, content + from, n);
        have += n;
    }
    return CS_OK;
}

#define PREFETCH 4u   /* cells asked for ahead of the one read */
#define PREFETCH_LINES 4u

/* Ask for the first lines of cell i of a leaf (its header and first values): the cells of a
 * page lie in no order the hardware guesses, and the first touch of each is otherwise a
 * stall on memory. */
static inline void prefetch_cell(const cs_reader *r, const uint8_t *page, uint32_t hdr, uint32_t ncell, uint32_t i) {
    if (i >= ncell) return;
    uint32_t last = r->f.h.page_size - 1; /* a power of two, less one */
    uint32_t pc = get2(page + hdr + 8 + 2 * i);
    for (uint32_t k = 0; k < PREFETCH_LINES; k++) __builtin_prefetch(page + ((pc + 64 * k) & last));
}

/* Ask for the next leaf's header and cell pointers. */
static inline void prefetch_leaf(const cs_reader *r, size_t li) {
    if (li >= r->s->nleaves) return;
    const uint8_t *page = r->s->map + (uint64_t)(r->s->leaves[li].page - 1) * r->f.h.page_size;
    __builtin_prefetch(page);
    __builtin_prefetch(page + 64);
}

/* The cells of leaf `li` to read: [*first, *last), checked as a leaf page. */
int cs_leaf_cells(cs_reader *r, size_t li, const uint8_t **page, uint32_t *ncell) {
    const cs_leaf *leaf = &r->s->leaves[li];
    *page = r->s->map + (uint64_t)(leaf->page - 1) * r->f.h.page_size;
    uint32_t hdr = hdr_offset(leaf->page);
    if ((*page)[hdr] != 0x0D) return CS_UNREADABLE;
    *ncell = get2(*page + hdr + 3);
    if (*ncell > (r->f.h.page_size - 8) / 6) return CS_UNREADABLE;
    r->f.pages = 0; /* a leaf's overflow chains hold at most the file's pages */
    prefetch_leaf(r, li + 1);
    /* (Usually asked for already, while the leaf before was read: asking again costs little.) */
    for (uint32_t i = 0; i < PREFETCH; i++) prefetch_cell(r, *page, hdr, *ncell, i);
    return CS_OK;
}

/* Cell i of a leaf: its payload and rowid, the rowid checked against the leaf's bounds and
 * the previous row's. */
int cs_leaf_row(cs_reader *r, size_t li, const uint8_t *page, uint32_t i, int64_t *prev, int *have_prev,
                int64_t *rowid, payload *p) {
    const cs_leaf *leaf = &r->s->leaves[li];
    uint32_t hdr = hdr_offset(leaf->page);
    uint32_t ncell = get2(page + hdr + 3);
    if (i + PREFETCH < ncell) {
        prefetch_cell(r, page, hdr, ncell, i + PREFETCH);
    } else if (li + 1 < r->s->nleaves) { /* the next leaf's first cells, before it starts */
        uint32_t next = r->s->leaves[li + 1].page;
        const uint8_t *np = r->s->map + (uint64_t)(next - 1) * r->f.h.page_size;
        uint32_t nh = hdr_offset(next);
        prefetch_cell(r, np, nh, get2(np + nh + 3), i + PREFETCH - ncell);
    }
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
