/* Rows of one table b-tree, read from the file (see page_records.h): the walk of the trees,
 * page by page in file order, each leaf's cells read in turn. One row's values are
 * page_record_row.h's, included here so they stay in this translation unit. */
#include <stdlib.h>
#include <string.h>

#include "map_guard.h"
#include "page_record_row.h"

#define CANCEL_EVERY 256u
#define PREFETCH 3u

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
