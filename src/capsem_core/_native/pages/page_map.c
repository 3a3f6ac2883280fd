/* The page map of a session.db (see page_map.h): every page's owner, as a whole-file
 * quick_check sees them. Field offsets and cell layouts are SQLite's file format
 * (fileformat2.html §1.3 header, §1.5 b-tree pages, §1.6 payload and overflow, §1.4
 * freelist, §1.7 pointer map). */
#include <stdlib.h>
#include <string.h>

#include "map_guard.h"
#include "page_cells.h"
#include "page_map.h"

/* Owners beyond the trees (which are 1 + the index of their root in `roots`). */
#define OWNER_FREE 0xFFFFFFFFu
#define OWNER_LOCK 0xFFFFFFFEu
#define MAX_ROOTS 0x10000000u
#define PENDING_BYTE 0x40000000u
#define CANCEL_EVERY 1024u

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
    uint64_t *tree_pages; /* the current tree's count, or NULL */
    volatile const int *cancel;
    uint32_t steps;
    int stopped;
    int freelist_errors;
    capsem_page_walk *w;
} walker;

typedef struct {
    uint32_t page;
    uint32_t next; /* the next child to descend: cell index, ncell for the right child */
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
        pgno = get4(page_at(k, pgno));
        if (poll_cancel(k)) return;
    }
}

/* The cell pointer array of page `pgno` (of `type`): the offset of cell `i`, or 0 when it is
 * outside the cell content area (in-tree damage, noted). */
static uint32_t cell_at(walker *k, const uint8_t *page, uint32_t hdr, uint8_t type, uint32_t i, uint32_t pgno,
                        uint32_t owner, capsem_cell *c) {
    uint32_t leaf = (type & 0x08) != 0;
    uint32_t content = get2(page + hdr + 5);
    if (content == 0) content = 65536;
    uint32_t pc = get2(page + hdr + (leaf ? 8 : 12) + 2 * i);
    if (pc < content || pc > k->h.usable - 4 || capsem_parse_cell(k->h.page_size, k->h.usable, type, page, pc, c) != 0 ||
        (uint64_t)pc + c->size > k->h.usable) {
        add(k, CAPSEM_PG_BAD_CELL, 1, pgno, root_of(k, owner), 0, i, pc);
        return 0;
    }
    return pc;
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
        uint32_t usable = k->h.usable;
        uint32_t content = get2(page + hdr + 5);
        if (content == 0) content = 65536;
        /* A payload whose size varint is one or two bytes and within the page's local limit
         * never spills: most cells of a ledger's tables and indexes are decided by those bytes. */
        uint32_t max_local = type == 0x0D ? usable - 35 : (usable - 12) * 64 / 255 - 23;
        uint32_t skip = type == 0x02 ? 4 : 0;
        const uint8_t *ptr = page + hdr + ((type & 0x08) ? 8 : 12);
        for (uint32_t i = 0; i < ncell; i++) {
            uint32_t at = get2(ptr + 2 * i) + skip;
            if (at >= content + skip && at + 1 < usable) {
                uint32_t b0 = page[at], b1 = page[at + 1];
                uint32_t payload = b0 < 0x80 ? b0 : b1 < 0x80 ? ((b0 & 0x7f) << 7) | b1 : max_local + 1;
                if (payload <= max_local) continue;
            }
            capsem_cell c;
            uint32_t pc = cell_at(k, page, hdr, type, i, pgno, owner, &c);
            if (pc && c.payload > c.local) {
                uint32_t want = (c.payload - c.local + usable - 5) / (usable - 4); /* SQLite's u32 sum */
                walk_chain(k, get4(page + pc + c.size - 4), want, owner, pgno);
                page = page_at(k, pgno); /* the chain may have used the scratch page */
            }
            if (k->stopped) return -1;
        }
    }
    return (type & 0x08) ? -1 : (int64_t)ncell;
}

/* The child `i` of interior page `pgno` (`ncell` for the right-most pointer), or 0. */
static uint32_t child_at(walker *k, uint32_t pgno, uint32_t i, uint32_t owner) {
    const uint8_t *page = page_at(k, pgno);
    uint32_t hdr = pgno == 1 ? 100 : 0;
    uint32_t ncell = get2(page + hdr + 3);
    if (i >= ncell) return get4(page + hdr + 8);
    capsem_cell c;
    /* Interior table cells were not visited for overflow: note their bad offsets here. */
    uint8_t type = page[hdr];
    uint32_t pc;
    if (type == 0x05) {
        pc = cell_at(k, page, hdr, type, i, pgno, owner, &c);
    } else { /* index interior: already noted by visit() when bad */
        uint32_t content = get2(page + hdr + 5);
        if (content == 0) content = 65536;
        pc = get2(page + hdr + 12 + 2 * i);
        if (pc < content || pc > k->h.usable - 4 || capsem_parse_cell(k->h.page_size, k->h.usable, type, page, pc, &c) != 0 ||
            (uint64_t)pc + c.size > k->h.usable)
            pc = 0;
    }
    return pc ? get4(page + pc) : 0;
}

static void walk_tree(walker *k, uint32_t owner) {
    frame stack[CAPSEM_PAGES_MAX_DEPTH + 1];
    unsigned depth = 0;
    uint32_t root = root_of(k, owner);
    int64_t n = visit(k, root, owner, 0, 0);
    if (n < 0) return;
    stack[0].page = root;
    stack[0].next = 0;
    depth = 1;
    while (depth > 0 && !poll_cancel(k)) {
        frame *top = &stack[depth - 1];
        const uint8_t *page = page_at(k, top->page);
        uint32_t ncell = get2(page + (top->page == 1 ? 100 : 0) + 3);
        if (top->next > ncell) {
            depth--;
            continue;
        }
        uint32_t child = child_at(k, top->page, top->next, owner);
        uint32_t parent = top->page;
        top->next++;
        int64_t m = visit(k, child, owner, parent, depth);
        if (m >= 0) { /* visit() bounds depth, so the stack has room */
            stack[depth].page = child;
            stack[depth].next = 0;
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
        walk_tree(k, (uint32_t)(i + 1));
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
                         uint64_t *pages_out, volatile const int *cancel, capsem_page_walk *w) {
    memset(w, 0, sizeof *w);
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
    if (pages_out) memset(pages_out, 0, nroots * sizeof *pages_out);
    k->pages_out = pages_out;
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        add(k, CAPSEM_PG_SHRANK, 0, 0, 0, 0, 0, size);
    } else {
        capsem_guard_range(map, size);
        capsem_guard_armed = 1;
        walk_all(k);
        capsem_guard_armed = 0;
    }
    int stopped = k->stopped;
    free(k->owner);
    free(k->scratch);
    free(k);
    return stopped ? 1 : 0;
}

void capsem_page_estimate(const uint8_t *map, uint64_t size, const capsem_page_header *h, const uint32_t *roots,
                          size_t nroots, uint64_t *out) {
    memset(out, 0, nroots * sizeof *out);
    walker k;
    memset(&k, 0, sizeof k);
    k.map = map;
    k.size = size;
    k.h = *h;
    k.scratch = malloc(h->page_size);
    if (!k.scratch) return;
    volatile size_t i = 0;
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        free(k.scratch);
        return;
    }
    capsem_guard_range(map, size);
    capsem_guard_armed = 1;
    for (; i < nroots; i++) {
        uint32_t pgno = roots[i];
        uint64_t level = 1, pages = 0;
        for (unsigned depth = 0; depth < CAPSEM_PAGES_MAX_DEPTH; depth++) {
            if (pgno == 0 || pgno > h->page_count) break;
            const uint8_t *page = page_at(&k, pgno);
            uint32_t hdr = pgno == 1 ? 100 : 0;
            uint8_t type = page[hdr];
            if (type != 0x02 && type != 0x05 && type != 0x0A && type != 0x0D) break;
            pages += level;
            if (pages >= h->page_count || (type & 0x08)) break;
            uint32_t ncell = get2(page + hdr + 3);
            if (ncell > (h->page_size - 8) / 6) break;
            level *= (uint64_t)ncell + 1;
            if (level > h->page_count) level = h->page_count;
            uint32_t pc = ncell ? get2(page + hdr + 12) : 0;
            if (ncell && pc > h->usable - 4) break;
            pgno = ncell ? get4(page + pc) : get4(page + hdr + 8);
        }
        out[i] = pages < h->page_count ? pages : h->page_count;
    }
    capsem_guard_armed = 0;
    free(k.scratch);
}
