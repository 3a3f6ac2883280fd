/* What the page walk reads of a database file before it follows the trees (page_summary.h):
 * each page summarised in file order, and each tree's size estimated for ordering the
 * per-table checks (page_map.h). */
#include <stdlib.h>
#include <string.h>

#include "archive_file.h"
#include "big_alloc.h"
#include "map_guard.h"
#include "page_cells.h"
#include "page_summary.h"

#define CANCEL_EVERY 1024u

static inline uint32_t get2(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t get4(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Page `pgno` (1 <= pgno <= page_count <= the file's pages) of the map, or `scratch` holding
 * it when the file ends inside it (SQLite reads the missing bytes as zeros). */
static const uint8_t *page_of(const uint8_t *map, uint64_t size, const capsem_page_header *h, uint64_t pgno,
                              uint8_t *scratch) {
    uint64_t off = (pgno - 1) * h->page_size;
    if (off + h->page_size <= size) return map + off;
    memset(scratch, 0, h->page_size);
    if (off < size) memcpy(scratch, map + off, (size_t)(size - off));
    return scratch;
}

void capsem_summary_free(capsem_page_summary *s) {
    uint64_t n = (uint64_t)s->page_count;
    capsem_big_free(s->kind, (size_t)(n + 1));
    capsem_big_free(s->at, (size_t)(n + 2) * sizeof *s->at);
    capsem_big_free(s->entry, s->cap * sizeof *s->entry);
    capsem_big_free(s->sound, (size_t)(n + 1));
    capsem_big_free(s->facts, (size_t)(n + 1) * sizeof *s->facts);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}

#define READ_IT ((size_t)-1)

/* The entries of b-tree page `page` (of `type`, `ncell` cells) from entry[n] on: the new end,
 * or READ_IT when the walk is to read the page itself (damage it words, or no room). */
static size_t summarise_btree(const capsem_page_header *h, const uint8_t *page, uint32_t hdr, uint8_t type,
                              uint32_t ncell, int sound, uint64_t *starts, uint32_t *entry, size_t n, size_t cap) {
    uint32_t pc, head, want;
    int bad;
    if (!(type & 0x08)) {
        if (cap - n < (size_t)ncell + 2) return READ_IT;
        entry[n++] = ncell;
        for (uint32_t i = 0; i <= ncell; i++) {
            uint32_t child = capsem_cell_child(h->page_size, h->usable, page, hdr, type, i, ncell, &pc, &bad);
            if (bad && type == 0x05) return READ_IT; /* the walk notes a table interior's bad cell */
            entry[n++] = child;
        }
    }
    /* A page that passed its own tests says whether a cell spills; else the cell pointers do. */
    if (type == 0x05 || sound == CAPSEM_SOUND_OK ||
        (sound != CAPSEM_SOUND_SPILLS && capsem_cells_cannot_spill(h->usable, page, hdr, type, ncell, starts)))
        return n;
    for (uint32_t i = 0; i < ncell; i++) {
        int r = capsem_cell_chain(h->page_size, h->usable, page, hdr, type, i, &pc, &head, &want);
        if (r < 0 || (r > 0 && cap - n < 2)) return READ_IT;
        if (r > 0) {
            entry[n++] = head;
            entry[n++] = want;
        }
    }
    return n;
}

int capsem_summary_build(capsem_page_summary *s, const uint8_t *map, uint64_t size, const capsem_page_header *h,
                         capsem_page_window *win, volatile const int *cancel, uint64_t *starts, uint8_t *scratch,
                         int tests) {
    memset(s, 0, sizeof *s);
    uint64_t count = h->page_count;
    /* Two entries a page: a file's children and chain heads are fewer (each page is the child
     * or chain page of one other at most); entry numbers stay below 2^32. */
    uint64_t cap = 2 * count + 1024;
    if (cap > UINT32_MAX - 1u) cap = UINT32_MAX - 1u;
    s->page_count = (uint32_t)count;
    s->cap = (size_t)cap;
    s->kind = capsem_big_alloc((size_t)(count + 1));
    s->at = capsem_big_alloc((size_t)(count + 2) * sizeof *s->at);
    s->entry = capsem_big_alloc(s->cap * sizeof *s->entry);
    if (!s->kind || !s->at || !s->entry) {
        capsem_summary_free(s);
        return -1;
    }
    /* Without memory for the pages' own tests the summary still serves the walk. */
    if (tests) {
        s->sound = capsem_big_alloc((size_t)(count + 1));
        s->facts = capsem_big_alloc((size_t)(count + 1) * sizeof *s->facts);
    }
    capsem_sound_scratch *scr = s->sound && s->facts ? malloc(sizeof *scr) : NULL;
    s->scratch = scr;
    if (!scr) {
        capsem_big_free(s->sound, (size_t)(count + 1));
        capsem_big_free(s->facts, (size_t)(count + 1) * sizeof *s->facts);
        s->sound = NULL;
        s->facts = NULL;
    }
    uint32_t max_cells = (h->page_size - 8) / 6;
    size_t n = 0;
    for (uint64_t p = 1; p <= count; p++) {
        if (p % CANCEL_EVERY == 0 && cancel && *cancel) {
            capsem_summary_free(s);
            return 1;
        }
        capsem_window_touch(win, (p - 1) * h->page_size);
        const uint8_t *page = page_of(map, size, h, p, scratch);
        s->at[p] = (uint32_t)n;
        uint32_t hdr = p == 1 ? 100 : 0;
        uint8_t type = page[hdr];
        if (type != 0x02 && type != 0x05 && type != 0x0A && type != 0x0D) {
            if (n < s->cap) {
                s->kind[p] = CAPSEM_SUMMARY_OTHER;
                s->entry[n++] = get4(page);
            } else {
                s->kind[p] = CAPSEM_SUMMARY_READ;
            }
            continue;
        }
        uint32_t ncell = get2(page + hdr + 3);
        int sound = 0;
        if (ncell <= max_cells && scr) sound = capsem_page_sound(h->page_size, h->usable, page, hdr, type, ncell, scr,
                                                                 &s->facts[p]);
        size_t end = ncell > max_cells ? READ_IT
                                       : summarise_btree(h, page, hdr, type, ncell, sound, starts, s->entry, n, s->cap);
        if (end != READ_IT) {
            s->kind[p] = type;
            n = end;
            if (scr) s->sound[p] = sound != 0;
        } else {
            s->kind[p] = CAPSEM_SUMMARY_READ;
        }
    }
    s->at[count + 1] = (uint32_t)n;
    free(scr);
    s->scratch = NULL;
    return 0;
}

void capsem_page_estimate(const uint8_t *map, uint64_t size, const capsem_page_header *h, const uint32_t *roots,
                          size_t nroots, uint64_t window, uint64_t *out) {
    memset(out, 0, nroots * sizeof *out);
    uint8_t *scratch = malloc(h->page_size);
    /* volatile: read after the longjmp below, so not to be kept in a register across it. */
    uint32_t *volatile at = malloc((nroots ? nroots : 1) * sizeof *at);
    uint64_t *level = malloc((nroots ? nroots : 1) * sizeof *level);
    /* A path here and there through every tree: its pages go through a window like every other
     * reader's, dropped at the end (on the heap: still readable after a longjmp). */
    capsem_page_window *win = calloc(1, sizeof *win);
    if (!scratch || !at || !level || !win) {
        free(scratch);
        free(at);
        free(level);
        free(win);
        return;
    }
    if (window) capsem_window_init(win, map, size, window);
    for (size_t i = 0; i < nroots; i++) {
        at[i] = roots[i];
        level[i] = 1;
    }
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        capsem_window_end(win);
        free(scratch);
        free(at);
        free(level);
        free(win);
        return;
    }
    capsem_guard_range(map, size);
    capsem_guard_armed = 1;
    /* Every tree one level at a time, the level's pages asked for together first: from a cold
     * page cache that is one wait on the disk per level, not one per page (a ledger has about
     * a hundred trees). at[i] == 0: tree i is done. */
    for (unsigned depth = 0; depth < CAPSEM_PAGES_MAX_DEPTH; depth++) {
        int any = 0;
        for (size_t i = 0; i < nroots; i++) {
            if (at[i] == 0 || at[i] > h->page_count) continue;
            uint64_t off = (uint64_t)(at[i] - 1) * h->page_size;
            capsem_map_advise(map, size, off, off + h->page_size, ADVICE_WILLNEED, 0);
            any = 1;
        }
        if (!any) break;
        for (size_t i = 0; i < nroots; i++) {
            uint32_t pgno = at[i];
            at[i] = 0;
            if (pgno == 0 || pgno > h->page_count) continue;
            capsem_window_touch(win, (uint64_t)(pgno - 1) * h->page_size);
            const uint8_t *page = page_of(map, size, h, pgno, scratch);
            uint32_t hdr = pgno == 1 ? 100 : 0;
            uint8_t type = page[hdr];
            if (type != 0x02 && type != 0x05 && type != 0x0A && type != 0x0D) continue;
            out[i] += level[i];
            if (out[i] >= h->page_count || (type & 0x08)) continue;
            uint32_t ncell = get2(page + hdr + 3);
            if (ncell > (h->page_size - 8) / 6) continue;
            level[i] *= (uint64_t)ncell + 1;
            if (level[i] > h->page_count) level[i] = h->page_count;
            uint32_t pc = ncell ? get2(page + hdr + 12) : 0;
            if (ncell && pc > h->usable - 4) continue;
            at[i] = ncell ? get4(page + pc) : get4(page + hdr + 8);
        }
    }
    capsem_guard_armed = 0;
    capsem_window_end(win);
    for (size_t i = 0; i < nroots; i++)
        if (out[i] > h->page_count) out[i] = h->page_count;
    free(scratch);
    free(at);
    free(level);
    free(win);
}
