/* The page map of a session.db (see page_map.h): every page's owner, as a whole-file
 * quick_check sees them. This file holds the walk's file-wide parts: the pointer map, the
 * freelist, the header, every page's use and the entry point; one tree's walk is page_tree.h's
 * and the walker's state page_walker.h's. Field offsets and cell layouts are SQLite's file
 * format (fileformat2.html §1.3 header, §1.5 b-tree pages, §1.6 payload and overflow, §1.4
 * freelist, §1.7 pointer map). */
#include <stdlib.h>
#include <string.h>

#include "map_guard.h"
#include "page_map.h"
#include "page_summary.h"
#include "page_tree.h"
#include "page_window.h"

#define MAX_ROOTS 0x10000000u
#define PENDING_BYTE 0x40000000u

/* Pointer-map entry types (fileformat2 §1.7). */
#define PTRMAP_ROOTPAGE 1u
#define PTRMAP_FREEPAGE 2u

static const uint8_t SQLITE_MAGIC[16] = "SQLite format 3";

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
