/* One tree's walk of the page map (page_map.h): every page of a root's tree taken with its
 * overflow chains, on the pages' summaries where they stand for the pages, and the tests
 * between pages that say whether the tree is sound. Included by page_map.c alone, which
 * walks each root's tree: the per-page steps stay in its translation unit. */
#ifndef CAPSEM_PAGE_TREE_H
#define CAPSEM_PAGE_TREE_H

#include <stdint.h>

#include "page_cells.h"
#include "page_walker.h"

/* SQLite's cursors go at most 20 pages deep (BTCURSOR_MAX_DEPTH): reading the rows of a deeper
 * tree is an error its quick_check reports. */
#define CURSOR_DEPTH 19u

typedef struct {
    uint32_t page;
    uint32_t next; /* the next child to descend: cell index, ncell for the right child */
    /* The keys a table page's subtree may hold: (lo, hi], each bound only where has_ says. */
    int64_t lo, hi;
    uint8_t has_lo, has_hi;
} frame;

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

#endif
