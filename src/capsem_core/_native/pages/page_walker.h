/* The state of one page-map walk (page_map.h) and how it takes a page: the owner it marks on
 * every page, the findings it records, the pages it reads (from the map, or the scratch copy
 * of a last page the file ends inside) and the cancel flag it polls. Shared by the file-wide
 * parts of the walk (page_map.c) and one tree's walk (page_tree.h, which page_map.c includes):
 * one translation unit, so these per-page helpers stay inlinable wherever the walk calls them. */
#ifndef CAPSEM_PAGE_WALKER_H
#define CAPSEM_PAGE_WALKER_H

#include <stdint.h>
#include <string.h>

#include "page_map.h"
#include "page_summary.h"
#include "page_window.h"

/* Owners beyond the trees (which are 1 + the index of their root in `roots`). */
#define OWNER_FREE 0xFFFFFFFFu
#define OWNER_LOCK 0xFFFFFFFEu
#define CANCEL_EVERY 1024u

typedef struct {
    const uint8_t *map;
    uint64_t size;
    capsem_page_header h;
    int autovacuum;
    uint32_t *owner; /* [page_count + 1] */
    uint8_t *scratch; /* one page: the file's last page when the file ends inside it */
    uint64_t starts[1024]; /* a bitmap of cell starts, one bit per byte of a page */
    const uint32_t *roots;
    size_t nroots;
    uint64_t *pages_out;  /* per root, or NULL */
    uint8_t *sound_out;   /* per root, or NULL */
    uint64_t *tree_pages; /* the current tree's count, or NULL */
    volatile const int *cancel;
    capsem_page_window win; /* the pages this walk keeps resident */
    capsem_page_summary sum; /* every page read once in file order (kind NULL: none, read each page) */
    const capsem_tree_rule *rules; /* per root, or NULL: no tree is judged */
    int sound;       /* the tree being walked has passed every test so far */
    int tree_table;  /* its kind: 0 not yet known, 1 a table, 2 an index */
    int leaf_depth;  /* the depth of its first leaf, -1 before it */
    uint32_t steps;
    int stopped;
    int freelist_errors;
    capsem_page_walk *w;
} walker;

static inline uint32_t get2(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t get4(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void add(walker *k, uint32_t kind, uint32_t in_tree, uint32_t page, uint32_t tree, uint32_t from, uint32_t a,
                uint64_t b) {
    capsem_page_walk *w = k->w;
    w->findings_total++;
    if (in_tree) w->in_tree_total++;
    if (w->nfindings >= CAPSEM_PAGES_MAX_FINDINGS) return;
    capsem_page_finding *f = &w->findings[w->nfindings++];
    f->kind = kind;
    f->in_tree = in_tree;
    f->page = page;
    f->tree = tree;
    f->from = from;
    f->a = a;
    f->b = b;
}

/* Page `pgno` (1 ≤ pgno ≤ page_count ≤ file_pages): a pointer into the map, or the scratch
 * copy of a last page the file ends inside (SQLite reads the missing bytes as zeros). */
static const uint8_t *page_at(walker *k, uint32_t pgno) {
    uint64_t off = (uint64_t)(pgno - 1) * k->h.page_size;
    capsem_window_touch(&k->win, off);
    if (off + k->h.page_size <= k->size) return k->map + off;
    memset(k->scratch, 0, k->h.page_size);
    if (off < k->size) memcpy(k->scratch, k->map + off, (size_t)(k->size - off));
    return k->scratch;
}

static int poll_cancel(walker *k) {
    if (k->stopped) return 1;
    if (++k->steps % CANCEL_EVERY == 0 && k->cancel && *k->cancel) k->stopped = 1;
    return k->stopped;
}

static uint32_t root_of(const walker *k, uint32_t owner) {
    return (owner >= 1 && owner <= k->nroots) ? k->roots[owner - 1] : 0;
}

/* SQLite's checkRef: a page number in range and not yet used, then marked with its owner. */
static int take(walker *k, uint32_t pgno, uint32_t owner, uint32_t from) {
    int tree = owner != OWNER_FREE;
    uint32_t root = root_of(k, owner);
    if (pgno == 0 || pgno > k->h.page_count) {
        if (!tree) k->freelist_errors++;
        add(k, CAPSEM_PG_INVALID_REF, (uint32_t)tree, pgno, root, from, k->h.page_count, 0);
        return 1;
    }
    uint32_t prev = k->owner[pgno];
    if (prev) {
        if (!tree) k->freelist_errors++;
        uint64_t what = prev == OWNER_FREE ? 1 : prev == OWNER_LOCK ? 2 : 0;
        add(k, CAPSEM_PG_SECOND_REF, (uint32_t)(tree && prev == owner), pgno, root, from, root_of(k, prev), what);
        return 1;
    }
    k->owner[pgno] = owner;
    return 0;
}

#endif
