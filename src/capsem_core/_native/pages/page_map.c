/* The page map of a session.db (see page_map.h): every page's owner, as a whole-file
 * quick_check sees them. Field offsets and cell layouts are SQLite's file format
 * (fileformat2.html §1.3 header, §1.5 b-tree pages, §1.6 payload and overflow, §1.4
 * freelist, §1.7 pointer map). */
#include <stdlib.h>
#include <string.h>

#include "map_guard.h"
#include "page_cells.h"
#include "page_map.h"
#include "page_sound.h"
#include "page_summary.h"
#include "page_window.h"

/* Owners beyond the trees (which are 1 + the index of their root in `roots`). */
#define OWNER_FREE 0xFFFFFFFFu
#define OWNER_LOCK 0xFFFFFFFEu
#define MAX_ROOTS 0x10000000u
#define PENDING_BYTE 0x40000000u
#define CANCEL_EVERY 1024u
/* SQLite's cursors go at most 20 pages deep (BTCURSOR_MAX_DEPTH): reading the rows of a deeper
 * tree is an error its quick_check reports. */
#define CURSOR_DEPTH 19u

/* Pointer-map entry types (fileformat2 §1.7). */
#define PTRMAP_ROOTPAGE 1u
#define PTRMAP_FREEPAGE 2u

static const uint8_t SQLITE_MAGIC[16] = "SQLite format 3";

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

typedef struct {
    uint32_t page;
    uint32_t next; /* the next child to descend: cell index, ncell for the right child */
    /* The keys a table page's subtree may hold: (lo, hi], each bound only where has_ says. */
    int64_t lo, hi;
    uint8_t has_lo, has_hi;
} frame;

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

/* Page `pgno`'s summary when it stands for the page as a b-tree page of its type (*type set;
 * its entries returned), else NULL: the walk reads the page itself. */
static const uint32_t *summary_of(const walker *k, uint32_t pgno, uint8_t *type) {
    if (!k->sum.kind) return NULL;
    uint8_t kind = k->sum.kind[pgno];
    if (kind == CAPSEM_SUMMARY_OTHER || kind == CAPSEM_SUMMARY_READ) return NULL;
    *type = kind;
    return k->sum.entry + k->sum.at[pgno];
}

/* The first four bytes of page `pgno` (an overflow page's next page). */
static uint32_t next_of(walker *k, uint32_t pgno) {
    if (k->sum.kind && k->sum.kind[pgno] == CAPSEM_SUMMARY_OTHER) return k->sum.entry[k->sum.at[pgno]];
    return get4(page_at(k, pgno));
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

/* --- the pointer map (auto-vacuum files) --------------------------------------------------- */

static uint32_t ptrmap_page(const walker *k, uint32_t pgno) {
    if (pgno < 2) return 0;
    uint32_t per = k->h.usable / 5 + 1;
    uint32_t ret = ((pgno - 2) / per) * per + 2;
    if (ret == k->h.lock_page) ret++;
    return ret;
}

/* The entry SQLite's ptrmapGet reads for `key`: 0 and (type, parent), or -1 when it cannot. */
static int ptrmap_get(walker *k, uint32_t key, uint32_t *type, uint32_t *parent) {
    uint32_t pm = ptrmap_page(k, key);
    if (pm == 0 || pm > k->h.page_count || key <= pm) return -1;
    uint64_t off = 5ull * (key - pm - 1); /* <= usable - 5: key - pm - 1 < usable / 5 */
    const uint8_t *p = page_at(k, pm);
    *type = p[off];
    *parent = get4(p + off + 1);
    return (*type < 1 || *type > 5) ? -1 : 0;
}

static void check_ptrmap(walker *k, uint32_t key, uint32_t type, uint32_t parent, uint32_t tree) {
    uint32_t got_type = 0, got_parent = 0;
    if (ptrmap_get(k, key, &got_type, &got_parent) != 0) {
        add(k, CAPSEM_PG_PTRMAP_UNREADABLE, 0, key, tree, 0, type, parent);
    } else if (got_type != type || got_parent != parent) {
        add(k, CAPSEM_PG_PTRMAP_ENTRY, 0, key, tree, parent, type, ((uint64_t)got_type << 32) | got_parent);
    }
}

/* --- b-tree pages ----------------------------------------------------------------------------- */

/* An overflow chain of the `want` pages the cell's payload needs (SQLite follows it as far;
 * a chain ending early is in-tree damage). */
static void walk_chain(walker *k, uint32_t head, uint32_t want, uint32_t owner, uint32_t from) {
    uint32_t pgno = head, seen = 0;
    while (seen < want) {
        if (pgno == 0) {
            add(k, CAPSEM_PG_SHORT_OVERFLOW, 1, head, root_of(k, owner), from, seen, want);
            return;
        }
        if (take(k, pgno, owner, from)) return;
        seen++;
        k->w->overflow_pages++;
        if (k->tree_pages) (*k->tree_pages)++;
        pgno = next_of(k, pgno);
        if (poll_cancel(k)) return;
    }
    if (pgno != 0) k->sound = 0; /* longer than the payload needs: SQLite follows it and says so */
}

/* Visit page `pgno` of a tree: take it, check its header, walk the overflow chains of its
 * cells. Returns its cell count when it is an interior page to descend, else -1. */
static int64_t visit(walker *k, uint32_t pgno, uint32_t owner, uint32_t from, unsigned depth) {
    if (pgno == 0) return -1; /* SQLite's checkTreePage skips a zero child without a word */
    if (take(k, pgno, owner, from)) return -1;
    k->w->btree_pages++;
    if (k->tree_pages) (*k->tree_pages)++;
    uint32_t root = root_of(k, owner);
    if (depth >= CAPSEM_PAGES_MAX_DEPTH) {
        add(k, CAPSEM_PG_TOO_DEEP, 1, pgno, root, from, depth, 0);
        return -1;
    }
    uint8_t kind;
    const uint32_t *e = summary_of(k, pgno, &kind);
    if (!e) k->sound = 0; /* a page the summary does not stand for is left to SQLite */
    if (e) { /* a sound b-tree page: its chains in cell order, as below */
        uint32_t ncell = (kind & 0x08) ? 0 : e[0];
        const uint32_t *chain = e + ((kind & 0x08) ? 0 : (size_t)ncell + 2), *end = k->sum.entry + k->sum.at[pgno + 1];
        for (; chain < end && !k->stopped; chain += 2) walk_chain(k, chain[0], chain[1], owner, pgno);
        return k->stopped || (kind & 0x08) ? -1 : (int64_t)ncell;
    }
    const uint8_t *page = page_at(k, pgno);
    uint32_t hdr = pgno == 1 ? 100 : 0;
    uint8_t type = page[hdr];
    if (type != 0x02 && type != 0x05 && type != 0x0A && type != 0x0D) {
        add(k, CAPSEM_PG_BAD_PAGE, 1, pgno, root, from, type, 0);
        return -1;
    }
    uint32_t ncell = get2(page + hdr + 3);
    uint32_t max_cells = (k->h.page_size - 8) / 6;
    if (ncell > max_cells) {
        add(k, CAPSEM_PG_BAD_CELLS, 1, pgno, root, from, ncell, max_cells);
        return -1;
    }
    if (type != 0x05 && !capsem_cells_cannot_spill(k->h.usable, page, hdr, type, ncell, k->starts)) { /* cells with payload: overflow chains */
        for (uint32_t i = 0; i < ncell; i++) {
            uint32_t pc, head, want;
            int r = capsem_cell_chain(k->h.page_size, k->h.usable, page, hdr, type, i, &pc, &head, &want);
            if (r < 0) add(k, CAPSEM_PG_BAD_CELL, 1, pgno, root, 0, i, pc);
            if (r > 0) {
                walk_chain(k, head, want, owner, pgno);
                page = page_at(k, pgno); /* the chain may have used the scratch page */
            }
            if (k->stopped) return -1;
        }
    }
    return (type & 0x08) ? -1 : (int64_t)ncell;
}

/* The cell count of interior page `pgno`. */
static uint32_t cells_of(walker *k, uint32_t pgno) {
    uint8_t kind;
    const uint32_t *e = summary_of(k, pgno, &kind);
    return e ? e[0] : get2(page_at(k, pgno) + (pgno == 1 ? 100 : 0) + 3);
}

/* The child `i` of interior page `pgno` (`ncell` for the right-most pointer), or 0. */
static uint32_t child_at(walker *k, uint32_t pgno, uint32_t i, uint32_t owner) {
    uint8_t kind;
    const uint32_t *e = summary_of(k, pgno, &kind);
    if (e) return e[1 + i];
    const uint8_t *page = page_at(k, pgno);
    uint32_t hdr = pgno == 1 ? 100 : 0;
    uint8_t type = page[hdr];
    uint32_t pc;
    int bad;
    uint32_t child = capsem_cell_child(k->h.page_size, k->h.usable, page, hdr, type, i, get2(page + hdr + 3), &pc, &bad);
    /* Interior table cells were not visited for overflow: note their bad offsets here (an
     * index interior's were noted by visit()). */
    if (bad && type == 0x05) add(k, CAPSEM_PG_BAD_CELL, 1, pgno, root_of(k, owner), 0, i, pc);
    return child;
}

/* The tests between pages of a table or index tree, for page `pgno` (just visited, at `depth`)
 * within `f`'s key range: a tree of one kind of page, leaves at one depth within a cursor's
 * reach, no empty page but a leaf root, a table page's keys within its range, a table leaf's
 * records keeping the root's rule (page_map.h). */
static void judge(walker *k, uint32_t pgno, uint32_t owner, unsigned depth, const frame *f) {
    if (!k->sound) return;
    if (!k->rules || !k->sum.sound || pgno == 0 || pgno > k->h.page_count || !k->sum.sound[pgno]) {
        k->sound = 0;
        return;
    }
    uint8_t kind = k->sum.kind[pgno];
    int table = kind & 0x01, leaf = (kind & 0x08) != 0;
    const capsem_page_facts *p = &k->sum.facts[pgno];
    const capsem_tree_rule *rule = &k->rules[owner - 1];
    int ok = depth < CURSOR_DEPTH && (table ? rule->fields != 0 : rule->fields == 0);
    if (k->tree_table == 0) k->tree_table = table ? 1 : 2;
    ok = ok && k->tree_table == (table ? 1 : 2);
    if (leaf) {
        if (k->leaf_depth < 0) k->leaf_depth = (int)depth;
        ok = ok && k->leaf_depth == (int)depth && (p->rows > 0 || depth == 0);
    } else {
        ok = ok && p->rows > 0;
    }
    if (ok && table && p->rows > 0) {
        ok = (!f->has_lo || p->lo > f->lo) && (!f->has_hi || p->hi <= f->hi);
        if (ok && leaf)
            ok = p->fields_min == rule->fields && p->fields_max == rule->fields && !(p->nulls & rule->not_null) &&
                 !(p->values & rule->null) && !(p->numbers & rule->no_number) && !(p->texts & rule->no_text);
    }
    if (!ok) k->sound = 0;
}

/* The key range of child `i` of table interior page `top` (`ncell` cells): between its keys
 * i - 1 and i, the page's own bounds at either end. */
static void child_range(walker *k, const frame *top, uint32_t i, uint32_t ncell, frame *child) {
    child->lo = top->lo;
    child->hi = top->hi;
    child->has_lo = top->has_lo;
    child->has_hi = top->has_hi;
    if (!k->sound || k->tree_table != 1) return;
    const uint8_t *page = page_at(k, top->page);
    uint32_t hdr = top->page == 1 ? 100 : 0;
    if (i > 0) {
        child->lo = capsem_interior_key(page, hdr, i - 1);
        child->has_lo = 1;
    }
    if (i < ncell) {
        child->hi = capsem_interior_key(page, hdr, i);
        child->has_hi = 1;
    }
}

static void walk_tree(walker *k, uint32_t owner) {
    frame stack[CAPSEM_PAGES_MAX_DEPTH + 1];
    unsigned depth = 0;
    uint32_t root = root_of(k, owner);
    k->sound = k->rules != NULL && !k->autovacuum;
    k->tree_table = 0;
    k->leaf_depth = -1;
    stack[0].page = root;
    stack[0].next = 0;
    stack[0].has_lo = stack[0].has_hi = 0;
    stack[0].lo = stack[0].hi = 0;
    int64_t n = visit(k, root, owner, 0, 0);
    judge(k, root, owner, 0, &stack[0]);
    if (n < 0) return;
    depth = 1;
    while (depth > 0 && !poll_cancel(k)) {
        frame *top = &stack[depth - 1];
        uint32_t ncell = cells_of(k, top->page);
        if (top->next > ncell) {
            depth--;
            continue;
        }
        uint32_t child = child_at(k, top->page, top->next, owner);
        uint32_t parent = top->page;
        frame *next = &stack[depth];
        child_range(k, top, top->next, ncell, next);
        top->next++;
        if (child == 0) k->sound = 0; /* SQLite passes over a zero child pointer, then finds the depth differs */
        int64_t m = visit(k, child, owner, parent, depth);
        judge(k, child, owner, depth, next);
        if (m >= 0) { /* visit() bounds depth, so the stack has room */
            next->page = child;
            next->next = 0;
            depth++;
        }
    }
}

/* --- the freelist ------------------------------------------------------------------------------ */

/* SQLite's checkList for the freelist: trunks chained from the header, each listing leaves. */
static void walk_freelist(walker *k) {
    uint32_t trunk = k->h.freelist_trunk, from = 0;
    uint64_t counted = 0;
    uint32_t max_leaves = k->h.usable / 4 - 2;
    while (trunk != 0 && !poll_cancel(k)) {
        if (take(k, trunk, OWNER_FREE, from)) break;
        counted++;
        k->w->freelist_pages++;
        const uint8_t *p = page_at(k, trunk);
        uint32_t leaves = get4(p + 4);
        if (k->autovacuum) check_ptrmap(k, trunk, PTRMAP_FREEPAGE, 0, 0);
        if (leaves > max_leaves) {
            k->freelist_errors++;
            add(k, CAPSEM_PG_FREELIST_LEAVES, 0, trunk, 0, from, leaves, max_leaves);
            counted++;
        } else {
            for (uint32_t i = 0; i < leaves; i++) {
                p = page_at(k, trunk);
                uint32_t leaf = get4(p + 8 + 4 * i);
                if (k->autovacuum) check_ptrmap(k, leaf, PTRMAP_FREEPAGE, 0, 0);
                if (take(k, leaf, OWNER_FREE, trunk) == 0) k->w->freelist_pages++;
            }
            counted += leaves;
        }
        from = trunk;
        trunk = get4(page_at(k, trunk));
    }
    if (!k->stopped && counted != k->h.freelist_count && k->freelist_errors == 0)
        add(k, CAPSEM_PG_FREELIST_SIZE, 0, 0, 0, 0, (uint32_t)counted, k->h.freelist_count);
}

/* --- the header ------------------------------------------------------------------------------- */

int capsem_page_header_parse(const uint8_t *map, uint64_t size, capsem_page_header *h, capsem_page_finding *bad) {
    memset(h, 0, sizeof *h);
    memset(bad, 0, sizeof *bad);
    bad->kind = CAPSEM_PG_BAD_HEADER;
    if (size < 100) {
        bad->a = 0; /* shorter than the header */
        return -1;
    }
    if (memcmp(map, SQLITE_MAGIC, 16) != 0) {
        bad->a = 1;
        return -1;
    }
    uint32_t page_size = ((uint32_t)map[16] << 8) | ((uint32_t)map[17] << 16);
    if ((page_size & (page_size - 1)) != 0 || page_size > 65536 || page_size <= 256) {
        bad->a = 16;
        return -1;
    }
    if (map[19] > 2) {
        bad->a = 19;
        return -1;
    }
    if (map[21] != 64 || map[22] != 32 || map[23] != 32) {
        bad->a = 21;
        return -1;
    }
    uint32_t usable = page_size - map[20];
    if (usable < 480) {
        bad->a = 20;
        return -1;
    }
    uint64_t file_pages = (size + page_size - 1) / page_size;
    h->page_size = page_size;
    h->usable = usable;
    h->file_pages = file_pages > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)file_pages;
    uint32_t count = get4(map + 28);
    /* The header's count holds only while the version-valid-for field matches the change
     * counter; else SQLite sizes the database by the file. */
    if (count == 0 || memcmp(map + 24, map + 92, 4) != 0) count = h->file_pages;
    if (count > h->file_pages) {
        bad->kind = CAPSEM_PG_SHORT_FILE;
        bad->a = count;
        bad->b = h->file_pages;
        return -1;
    }
    h->page_count = count;
    h->freelist_trunk = get4(map + 32);
    h->freelist_count = get4(map + 36);
    h->schema_cookie = get4(map + 40);
    h->autovacuum_root = get4(map + 52);
    h->incremental = get4(map + 64);
    h->lock_page = PENDING_BYTE / page_size + 1;
    return 0;
}

/* --- the walk ------------------------------------------------------------------------------------ */

static void walk_all(walker *k) {
    capsem_page_walk *w = k->w;
    const capsem_page_header *h = &k->h;
    if (k->cancel && *k->cancel) {
        k->stopped = 1;
        return;
    }
    if (h->lock_page <= h->page_count) k->owner[h->lock_page] = OWNER_LOCK;
    /* Every page read once, in file order, before the trees are followed on the summaries
     * (page_summary.h); without memory for them the walk reads each page as it goes. */
    /* The pages' own tests only where some tree is judged (page_map.h: none of an auto-vacuum
     * file's). */
    int tests = k->rules != NULL && !k->autovacuum;
    if (capsem_summary_build(&k->sum, k->map, k->size, h, &k->win, k->cancel, k->starts, k->scratch, tests) == 1) {
        k->stopped = 1;
        return;
    }
    walk_freelist(k);
    /* What only a check of every root sees in an auto-vacuum file: the largest root is the
     * header's, and each root's pointer-map entry says so. */
    if (k->autovacuum) {
        uint32_t largest = 0;
        for (size_t i = 0; i < k->nroots; i++)
            if (k->roots[i] > largest) largest = k->roots[i];
        if (largest != h->autovacuum_root) add(k, CAPSEM_PG_MAX_ROOT, 0, 0, 0, 0, largest, h->autovacuum_root);
    } else if (h->incremental != 0) {
        add(k, CAPSEM_PG_INCREMENTAL, 0, 0, 0, 0, h->incremental, 0);
    }
    for (size_t i = 0; i < k->nroots && !k->stopped; i++) {
        uint32_t root = k->roots[i];
        if (k->autovacuum && root > 1 && root <= h->page_count) check_ptrmap(k, root, PTRMAP_ROOTPAGE, 0, root);
        k->tree_pages = k->pages_out ? &k->pages_out[i] : NULL;
        uint64_t found = w->findings_total;
        walk_tree(k, (uint32_t)(i + 1));
        if (k->sound_out) k->sound_out[i] = (uint8_t)(k->sound && !k->stopped && w->findings_total == found);
        k->tree_pages = NULL;
    }
    if (k->stopped) return;
    for (uint32_t p = 1; p <= h->page_count && p != 0; p++) {
        int is_map = k->autovacuum && ptrmap_page(k, p) == p;
        if (is_map) w->ptrmap_pages++;
        if (!k->owner[p] && !is_map) add(k, CAPSEM_PG_NEVER_USED, 0, p, 0, 0, 0, 0);
        if (k->owner[p] && is_map) add(k, CAPSEM_PG_PTRMAP_REFERENCED, 0, p, root_of(k, k->owner[p]), 0, 0, 0);
        if (poll_cancel(k)) return;
    }
}

int capsem_page_walk_run(const uint8_t *map, uint64_t size, const uint32_t *roots, size_t nroots,
                         uint64_t *pages_out, volatile const int *cancel, uint64_t window,
                         const capsem_tree_rule *rules, uint8_t *sound_out, capsem_page_walk *w) {
    memset(w, 0, sizeof *w);
    if (pages_out) memset(pages_out, 0, nroots * sizeof *pages_out); /* also when the header stops the walk */
    if (sound_out) memset(sound_out, 0, nroots); /* likewise: no tree sound until walked */
    capsem_page_finding bad;
    walker *k = calloc(1, sizeof *k);
    if (!k) return -1;
    k->w = w;
    if (capsem_page_header_parse(map, size, &k->h, &bad) != 0) {
        w->header = k->h;
        w->findings[0] = bad;
        w->nfindings = 1;
        w->findings_total = 1;
        free(k);
        return 0;
    }
    w->header = k->h;
    if (nroots > MAX_ROOTS) nroots = MAX_ROOTS;
    k->map = map;
    k->size = size;
    k->roots = roots;
    k->nroots = nroots;
    k->cancel = cancel;
    k->autovacuum = k->h.autovacuum_root != 0;
    /* Bounded by the file: page_count <= file_pages, checked by the header parse. */
    k->owner = calloc((size_t)k->h.page_count + 1, sizeof *k->owner);
    k->scratch = malloc(k->h.page_size);
    if (!k->owner || !k->scratch) {
        free(k->owner);
        free(k->scratch);
        free(k);
        return -1;
    }
    k->pages_out = pages_out;
    k->rules = sound_out ? rules : NULL;
    k->sound_out = rules ? sound_out : NULL;
    /* Without memory for the window the walk still runs, keeping what it reads resident. */
    if (window) capsem_window_init(&k->win, map, size, window);
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        add(k, CAPSEM_PG_SHRANK, 0, 0, 0, 0, 0, size);
    } else {
        capsem_guard_range(map, size);
        capsem_guard_armed = 1;
        walk_all(k);
        capsem_guard_armed = 0;
    }
    capsem_window_end(&k->win);
    capsem_summary_free(&k->sum);
    int stopped = k->stopped;
    free(k->owner);
    free(k->scratch);
    free(k);
    return stopped ? 1 : 0;
}
