/* A table's rows read from the database file's pages (see scan_pages.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "map_guard.h"
#include "page_payload.h"
#include "scan_pages.h"
#include "utf8_check.h"

#define CANCEL_EVERY 64u /* leaves between looks at the cancel flag */
/* A record header longer than this is not one a table of at most CS_MAX_COLUMNS writes. */
#define MAX_HEADER (9u * (CS_MAX_COLUMNS + 1))

/* One value of a row as its record holds it: class, serial type, where its bytes lie. */
typedef struct {
    uint8_t cls;
    uint64_t t;
    uint32_t off, len;
} rec_value;

/* Per thread: the file (and its page counter), a header buffer, the row's values. */
typedef struct {
    capsem_rec_file f;
    const cs_pages *s;
    uint8_t *header;
    rec_value *vals; /* in the order of s->order */
    uint8_t *scratch;
    uint32_t scratch_cap;
} reader;

static int reader_init(reader *r, const cs_pages *s) {
    memset(r, 0, sizeof *r);
    r->s = s;
    r->f.map = s->map;
    r->f.h = s->h;
    r->header = malloc(MAX_HEADER);
    r->vals = calloc(s->ncols ? s->ncols : 1, sizeof *r->vals);
    return r->header && r->vals ? CS_OK : CS_NO_MEMORY;
}

static void reader_free(reader *r) {
    free(r->header);
    free(r->vals);
    free(r->scratch);
}

/* Run fn(arg) with this thread's SIGBUS guard armed over the map. */
static int guarded(const cs_pages *s, int (*fn)(void *), void *arg) {
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
    return guarded(s, walk, s);
}

void cs_pages_close(cs_pages *s) {
    free(s->leaves);
    free(s->order);
    s->leaves = NULL;
    s->order = NULL;
    s->nleaves = 0;
}

/* ---- one row ------------------------------------------------------------------------------ */

static int cell_payload(const reader *r, const uint8_t *page, uint32_t pc, int64_t *rowid, payload *p) {
    uint64_t rid;
    if (!capsem_cell_payload(page, pc, r->f.h.usable, &rid, p)) return CS_UNREADABLE;
    *rowid = (int64_t)rid;
    return CS_OK;
}

/* The record's values of the chosen columns, in r->s->order (classes from serial types; TEXT
 * not yet checked for UTF-8; the REAL affinity applied). */
static int row_values(reader *r, payload *p, int64_t rowid) {
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
        rec_value *v = &r->vals[k];
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
static int number(reader *r, payload *p, const rec_value *v, int64_t rowid, int64_t *i, double *d) {
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
static int visit_bytes(reader *r, payload *p, uint32_t off, uint32_t len, cs_utf8 *u) {
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
static inline void prefetch_cell(const reader *r, const uint8_t *page, uint32_t hdr, uint32_t ncell, uint32_t i) {
    if (i >= ncell) return;
    uint32_t last = r->f.h.page_size - 1; /* a power of two, less one */
    uint32_t pc = get2(page + hdr + 8 + 2 * i);
    for (uint32_t k = 0; k < PREFETCH_LINES; k++) __builtin_prefetch(page + ((pc + 64 * k) & last));
}

/* Ask for the next leaf's header and cell pointers. */
static inline void prefetch_leaf(const reader *r, size_t li) {
    if (li >= r->s->nleaves) return;
    const uint8_t *page = r->s->map + (uint64_t)(r->s->leaves[li].page - 1) * r->f.h.page_size;
    __builtin_prefetch(page);
    __builtin_prefetch(page + 64);
}

/* The cells of leaf `li` to read: [*first, *last), checked as a leaf page. */
static int leaf_cells(reader *r, size_t li, const uint8_t **page, uint32_t *ncell) {
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
static int leaf_row(reader *r, size_t li, const uint8_t *page, uint32_t i, int64_t *prev, int *have_prev,
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

/* ---- the first pass ------------------------------------------------------------------------ */

typedef struct {
    const cs_pages *s;
    size_t a, b; /* leaves [a, b) */
    int64_t batch_rows, batch_bytes;
    int rc;
    uint8_t *masks;
    cs_pbatch *batches;
    size_t n, cap;
} plan_job;

static int new_batch(plan_job *j, size_t leaf, uint32_t cell) {
    if (j->n == j->cap) {
        size_t want = j->cap ? j->cap * 2 : 8;
        cs_pbatch *b = realloc(j->batches, want * sizeof *b);
        if (!b) return CS_NO_MEMORY;
        j->batches = b;
        j->cap = want;
    }
    cs_pbatch *b = &j->batches[j->n];
    memset(b, 0, sizeof *b);
    b->stats = calloc((j->s->ncols ? j->s->ncols : 1) * CS_CLASSES * 2, sizeof *b->stats);
    if (!b->stats) return CS_NO_MEMORY;
    b->start = (cs_at){(uint32_t)leaf, cell};
    j->n++;
    return CS_OK;
}

static int plan_range(void *arg) {
    plan_job *j = arg;
    const cs_pages *s = j->s;
    reader r;
    int rc = reader_init(&r, s);
    int64_t prev = 0;
    int have_prev = 0;
    cs_pbatch *cur = NULL;
    int64_t widest = 0; /* the current batch's largest column, in bytes */
    int64_t *bytes_of = calloc(s->ncols ? s->ncols : 1, sizeof *bytes_of);
    if (!bytes_of) rc = CS_NO_MEMORY;
    for (size_t li = j->a; li < j->b && rc == CS_OK; li++) {
        if ((li - j->a) % CANCEL_EVERY == 0 && s->cancel && *s->cancel) {
            rc = CS_CANCELLED;
            break;
        }
        const uint8_t *page;
        uint32_t ncell;
        if ((rc = leaf_cells(&r, li, &page, &ncell)) != CS_OK) break;
        for (uint32_t i = 0; i < ncell; i++) {
            int64_t rowid;
            payload p;
            if ((rc = leaf_row(&r, li, page, i, &prev, &have_prev, &rowid, &p)) != CS_OK) break;
            if (s->has_after && rowid <= s->after) continue;
            if ((rc = row_values(&r, &p, rowid)) != CS_OK) break;
            if (!cur) {
                if ((rc = new_batch(j, li, i)) != CS_OK) break;
                cur = &j->batches[j->n - 1];
                widest = 0;
                memset(bytes_of, 0, (s->ncols ? s->ncols : 1) * sizeof *bytes_of);
            }
            for (size_t k = 0; k < s->ncols; k++) {
                rec_value *v = &r.vals[k];
                uint32_t out = s->order[k];
                uint8_t cls = v->cls;
                if (cls == CS_TEXT) {
                    cs_utf8 u;
                    cs_utf8_start(&u);
                    if ((rc = visit_bytes(&r, &p, v->off, v->len, &u)) != CS_OK) break;
                    if (!cs_utf8_valid(&u)) cls = CS_TEXT_BYTES;
                } else if (cls == CS_BLOB) {
                    if ((rc = visit_bytes(&r, &p, v->off, v->len, NULL)) != CS_OK) break;
                }
                j->masks[out] |= (uint8_t)(1u << cls);
                int64_t *st = &cur->stats[(out * CS_CLASSES + cls) * 2];
                st[0]++;
                if (cls >= CS_TEXT) {
                    st[1] += v->len;
                    bytes_of[out] += v->len;
                    if (bytes_of[out] > widest) widest = bytes_of[out];
                }
            }
            if (rc != CS_OK) break;
            cur->rows++;
            cur->last_rowid = rowid;
            if (cur->rows >= j->batch_rows || widest >= j->batch_bytes) {
                cur->end = (cs_at){(uint32_t)li, i + 1};
                cur = NULL;
            }
        }
        if (cur && rc == CS_OK) cur->end = (cs_at){(uint32_t)li, ncell};
    }
    free(bytes_of);
    reader_free(&r);
    j->rc = rc;
    return rc;
}

static void *plan_thread(void *arg) {
    plan_job *j = arg;
    j->rc = guarded(j->s, plan_range, j);
    return NULL;
}

void cs_pbatches_free(cs_pbatch *b, size_t n) {
    if (!b) return;
    for (size_t i = 0; i < n; i++) free(b[i].stats);
    free(b);
}

#define MAX_PLAN_THREADS 64

int cs_pages_plan(cs_pages *s, int threads, int64_t batch_rows, int64_t batch_bytes, uint8_t *masks,
                  cs_pbatch **batches, size_t *nbatches) {
    *batches = NULL;
    *nbatches = 0;
    memset(masks, 0, s->ncols);
    if (threads < 1) threads = 1;
    if (threads > MAX_PLAN_THREADS) threads = MAX_PLAN_THREADS;
    if ((size_t)threads > s->nleaves) threads = s->nleaves ? (int)s->nleaves : 1;
    plan_job jobs[MAX_PLAN_THREADS];
    pthread_t tids[MAX_PLAN_THREADS];
    int started[MAX_PLAN_THREADS] = {0};
    memset(jobs, 0, sizeof jobs);
    int rc = CS_OK;
    for (int t = 0; t < threads; t++) {
        jobs[t].s = s;
        jobs[t].a = s->nleaves * (size_t)t / (size_t)threads;
        jobs[t].b = s->nleaves * (size_t)(t + 1) / (size_t)threads;
        jobs[t].batch_rows = batch_rows;
        jobs[t].batch_bytes = batch_bytes;
        jobs[t].masks = calloc(s->ncols ? s->ncols : 1, 1);
        if (!jobs[t].masks) rc = CS_NO_MEMORY;
    }
    if (rc == CS_OK) {
        for (int t = 1; t < threads; t++) started[t] = pthread_create(&tids[t], NULL, plan_thread, &jobs[t]) == 0;
        plan_thread(&jobs[0]);
        for (int t = 1; t < threads; t++) {
            if (started[t]) pthread_join(tids[t], NULL);
            else plan_thread(&jobs[t]); /* no thread to be had: this one does it */
        }
    }
    size_t total = 0;
    for (int t = 0; t < threads; t++) {
        if (rc == CS_OK && jobs[t].rc != CS_OK) rc = jobs[t].rc;
        total += jobs[t].n;
    }
    cs_pbatch *all = NULL;
    if (rc == CS_OK && total) {
        all = malloc(total * sizeof *all);
        if (!all) rc = CS_NO_MEMORY;
    }
    size_t at = 0;
    for (int t = 0; t < threads; t++) {
        if (rc == CS_OK) {
            if (jobs[t].n) memcpy(all + at, jobs[t].batches, jobs[t].n * sizeof *all);
            at += jobs[t].n;
            free(jobs[t].batches);
            for (size_t k = 0; k < s->ncols; k++) masks[k] |= jobs[t].masks[k];
        } else {
            cs_pbatches_free(jobs[t].batches, jobs[t].n);
        }
        free(jobs[t].masks);
    }
    if (rc != CS_OK) {
        free(all);
        return rc;
    }
    *batches = all;
    *nbatches = total;
    return CS_OK;
}

/* ---- the second pass ----------------------------------------------------------------------- */

typedef struct {
    const cs_pages *s;
    const cs_layout *lays;
    const cs_pbatch *b;
    cs_col *cols;
    int64_t rows;
} fill_job;

/* Append one value (of class v->cls as the first pass read it) to column `c`. */
static int append_value(reader *r, payload *p, const rec_value *v, int64_t rowid, cs_col *c) {
    const cs_layout *lay = c->lay;
    switch (v->cls) {
    case CS_NULL:
        return cs_col_null(c) ? CS_UNREADABLE : CS_OK;
    case CS_INTEGER:
    case CS_REAL: {
        int64_t i = 0;
        double d = 0;
        int rc = number(r, p, v, rowid, &i, &d);
        if (rc != CS_OK) return rc;
        if (v->cls == CS_INTEGER) return cs_col_int(c, i) ? CS_UNREADABLE : CS_OK;
        return cs_col_real(c, d) ? CS_UNREADABLE : CS_OK;
    }
    default:
        break;
    }
    uint8_t cls = v->cls;
    if (cls == CS_TEXT) {
        /* Which text class: the column's only one, unless it holds both (then check). */
        int both = (lay->mask & (1u << CS_TEXT)) && (lay->mask & (1u << CS_TEXT_BYTES));
        if (!both) {
            cls = (lay->mask & (1u << CS_TEXT)) ? CS_TEXT : CS_TEXT_BYTES;
        } else if (v->len == 0) {
            cls = CS_TEXT; /* the empty text is valid UTF-8, and has no bytes to read */
        } else {
            const uint8_t *src;
            if (v->off + v->len <= p->nlocal) {
                src = p->local + v->off;
            } else {
                if (v->len > r->scratch_cap) {
                    uint8_t *b = realloc(r->scratch, v->len);
                    if (!b) return CS_NO_MEMORY;
                    r->scratch = b;
                    r->scratch_cap = v->len;
                }
                src = capsem_payload_bytes(&r->f, p, v->off, v->len, r->scratch);
                if (!src) return CS_UNREADABLE;
            }
            cls = cs_utf8_check(src, v->len) ? CS_TEXT : CS_TEXT_BYTES;
            uint8_t *dst = cs_col_bytes(c, cls, v->len);
            if (!dst) return CS_NO_MEMORY;
            if (v->len) memcpy(dst, src, v->len);
            return CS_OK;
        }
    }
    uint8_t *dst = cs_col_bytes(c, cls, v->len);
    if (!dst) return CS_NO_MEMORY;
    if (!v->len) return CS_OK;
    if (v->len <= 64 && v->off + v->len <= p->nlocal &&
        p->local + v->off + 64 <= r->s->map + (uint64_t)r->f.h.page_count * r->f.h.page_size) {
        /* A short local value: whole 16-byte moves, reading past it inside the map and
         * writing into the slack every data buffer keeps (column_build.h), instead of a call
         * to memcpy per value. */
        const uint8_t *src = p->local + v->off;
        for (uint32_t k = 0; k < v->len; k += 16) memcpy(dst + k, src + k, 16);
        return CS_OK;
    }
    const uint8_t *src = capsem_payload_bytes(&r->f, p, v->off, v->len, dst);
    if (!src) return CS_UNREADABLE;
    if (src != dst) memcpy(dst, src, v->len);
    return CS_OK;
}

static int fill_range(void *arg) {
    fill_job *j = arg;
    const cs_pages *s = j->s;
    const cs_pbatch *b = j->b;
    reader r;
    int rc = reader_init(&r, s);
    int64_t prev = 0;
    int have_prev = 0;
    for (uint32_t li = b->start.leaf; li <= b->end.leaf && rc == CS_OK; li++) {
        const uint8_t *page;
        uint32_t ncell;
        if ((rc = leaf_cells(&r, li, &page, &ncell)) != CS_OK) break;
        uint32_t from = li == b->start.leaf ? b->start.cell : 0, to = li == b->end.leaf ? b->end.cell : ncell;
        if (to > ncell) rc = CS_UNREADABLE;
        for (uint32_t i = from; i < to && rc == CS_OK; i++) {
            int64_t rowid;
            payload p;
            if ((rc = leaf_row(&r, li, page, i, &prev, &have_prev, &rowid, &p)) != CS_OK) break;
            if ((rc = row_values(&r, &p, rowid)) != CS_OK) break;
            for (size_t k = 0; k < s->ncols && rc == CS_OK; k++)
                rc = append_value(&r, &p, &r.vals[k], rowid, &j->cols[s->order[k]]);
            j->rows++;
        }
    }
    reader_free(&r);
    return rc;
}

int cs_pages_fill(const cs_pages *s, const cs_layout *lays, const cs_pbatch *b, struct ArrowArray *out) {
    memset(out, 0, sizeof *out);
    cs_col *cols = calloc(s->ncols ? s->ncols : 1, sizeof *cols);
    if (!cols) return CS_NO_MEMORY;
    int rc = CS_OK;
    for (size_t i = 0; i < s->ncols && rc == CS_OK; i++) {
        const int64_t *st = &b->stats[i * CS_CLASSES * 2];
        int64_t counts[CS_CLASSES], bytes[CS_CLASSES];
        for (int k = 0; k < CS_CLASSES; k++) {
            counts[k] = st[2 * k];
            bytes[k] = st[2 * k + 1];
        }
        if (lays[i].plain != CS_UNION) { /* a plain column's data: every text class it takes */
            int64_t all = bytes[CS_TEXT] + bytes[CS_TEXT_BYTES] + bytes[CS_BLOB];
            for (int k = CS_TEXT; k <= CS_BLOB; k++) bytes[k] = all;
        }
        if (cs_col_init(&cols[i], &lays[i], b->rows, counts, bytes)) rc = CS_NO_MEMORY;
    }
    fill_job j = {s, lays, b, cols, 0};
    if (rc == CS_OK) rc = guarded(s, fill_range, &j);
    if (rc == CS_OK && j.rows != b->rows) rc = CS_UNREADABLE;
    if (rc == CS_OK && cs_batch_export(cols, s->ncols, b->rows, out)) rc = CS_NO_MEMORY;
    for (size_t i = 0; i < s->ncols; i++) cs_col_free(&cols[i]);
    free(cols);
    return rc;
}

/* ---- rows for a page of events --------------------------------------------------------------- */

int cs_rows_reserve(cs_rows *r, size_t ncols, int64_t rows) {
    if (rows <= r->cap) return CS_OK;
    int64_t cap = r->cap ? r->cap : 64;
    while (cap < rows) cap *= 2;
    int64_t *ids = realloc(r->rowid, (size_t)cap * sizeof *ids);
    if (!ids) return CS_NO_MEMORY;
    r->rowid = ids;
    cs_item *items = realloc(r->items, (size_t)cap * (ncols ? ncols : 1) * sizeof *items);
    if (!items) return CS_NO_MEMORY;
    r->items = items;
    r->cap = cap;
    return CS_OK;
}

uint8_t *cs_rows_bytes(cs_rows *r, uint32_t len, uint64_t *at) {
    if (r->arena_len + len > r->arena_cap) {
        uint64_t cap = r->arena_cap ? r->arena_cap : 65536;
        while (cap < r->arena_len + len) cap *= 2;
        uint8_t *a = realloc(r->arena, cap);
        if (!a) return NULL;
        r->arena = a;
        r->arena_cap = cap;
    }
    *at = r->arena_len;
    r->arena_len += len;
    return r->arena + *at;
}

void cs_rows_free(cs_rows *r) {
    free(r->rowid);
    free(r->items);
    free(r->arena);
    memset(r, 0, sizeof *r);
}

typedef struct {
    const cs_pages *s;
    int64_t limit;
    cs_rows *out;
} rows_job;

static int rows_range(void *arg) {
    rows_job *j = arg;
    const cs_pages *s = j->s;
    cs_rows *out = j->out;
    reader r;
    int rc = reader_init(&r, s);
    int64_t prev = 0;
    int have_prev = 0;
    for (size_t li = 0; li < s->nleaves && rc == CS_OK && out->n < j->limit; li++) {
        const uint8_t *page;
        uint32_t ncell;
        if ((rc = leaf_cells(&r, li, &page, &ncell)) != CS_OK) break;
        for (uint32_t i = 0; i < ncell && rc == CS_OK && out->n < j->limit; i++) {
            int64_t rowid;
            payload p;
            if ((rc = leaf_row(&r, li, page, i, &prev, &have_prev, &rowid, &p)) != CS_OK) break;
            if (s->has_after && rowid <= s->after) continue;
            if ((rc = row_values(&r, &p, rowid)) != CS_OK) break;
            if ((rc = cs_rows_reserve(out, s->ncols, out->n + 1)) != CS_OK) break;
            cs_item *row = &out->items[out->n * (int64_t)s->ncols];
            for (size_t k = 0; k < s->ncols && rc == CS_OK; k++) {
                const rec_value *v = &r.vals[k];
                cs_item *it = &row[s->order[k]];
                it->cls = v->cls;
                it->len = 0;
                if (v->cls == CS_INTEGER || v->cls == CS_REAL) {
                    rc = number(&r, &p, v, rowid, &it->v.i, &it->v.d);
                } else if (v->cls == CS_TEXT || v->cls == CS_BLOB) {
                    if (v->len > out->max_value) {
                        rc = CS_TOO_LARGE;
                        break;
                    }
                    uint8_t *dst = cs_rows_bytes(out, v->len, &it->v.at);
                    if (!dst) {
                        rc = CS_NO_MEMORY;
                        break;
                    }
                    it->len = v->len;
                    if (v->len) {
                        const uint8_t *src = capsem_payload_bytes(&r.f, &p, v->off, v->len, dst);
                        if (!src) rc = CS_UNREADABLE;
                        else if (src != dst) memcpy(dst, src, v->len);
                    }
                }
            }
            if (rc != CS_OK) break;
            out->rowid[out->n++] = rowid;
        }
    }
    reader_free(&r);
    return rc;
}

int cs_pages_rows(const cs_pages *s, int64_t limit, cs_rows *out) {
    rows_job j = {s, limit, out};
    out->n = 0;
    out->arena_len = 0;
    return guarded(s, rows_range, &j);
}
