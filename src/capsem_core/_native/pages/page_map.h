/* The whole-file half of a session.db page check: which page each b-tree, overflow chain,
 * the freelist, the pointer map and the lock-byte page use, read from the database file's
 * own bytes (SQLite's file format, https://www.sqlite.org/fileformat2.html).
 *
 * `PRAGMA quick_check(TABLE)` checks one table's b-trees in full but, being partial, skips
 * what only a check of every tree can see: the freelist, a page used by two trees (or by a
 * tree and the freelist), a page no one uses, the pointer-map entries of root pages. This
 * walk is exactly that: it follows every root's tree the way SQLite's integrity check does
 * (cells, child pointers, overflow chains of the length the payload needs), marks each page
 * with its owner, walks the freelist, and reports what a whole-file quick_check would.
 * Damage *inside* one tree (a bad page header, a cell out of place, a short overflow chain)
 * is the per-table check's to word; the walk notes it as an in-tree finding so it is never
 * silently lost. Every page number and length read from the file is bounded before use, and
 * the file is read through a read-only map under the SIGBUS guard. */
#ifndef CAPSEM_PAGE_MAP_H
#define CAPSEM_PAGE_MAP_H

#include <stddef.h>
#include <stdint.h>

/* The findings a walk records in full; the rest are counted. (SQLite's own check stops at
 * 100 messages.) */
#define CAPSEM_PAGES_MAX_FINDINGS 100
/* Deeper than any b-tree of at most 2^32 pages can be (each interior page has two children
 * or more), so only a damaged tree reaches it. */
#define CAPSEM_PAGES_MAX_DEPTH 64

/* What a walk finds. Fields used: page, tree (the root of the tree being walked; 0 for the
 * freelist), from (the page holding the reference), a, b (kind-specific). */
typedef enum {
    CAPSEM_PG_NEVER_USED = 1,        /* page: no tree, freelist, pointer map or lock byte uses it */
    CAPSEM_PG_SECOND_REF = 2,        /* page already used by a (a root; 0 the freelist), again by tree */
    CAPSEM_PG_INVALID_REF = 3,       /* a reference to page 0 or past the last page (a = last page) */
    CAPSEM_PG_PTRMAP_REFERENCED = 4, /* a pointer-map page is used by a tree or the freelist */
    CAPSEM_PG_PTRMAP_ENTRY = 5,      /* page's pointer-map entry is (b >> 32, b) not the (1, 0) of a root */
    CAPSEM_PG_PTRMAP_UNREADABLE = 6, /* page's pointer-map entry cannot be read */
    CAPSEM_PG_FREELIST_SIZE = 7,     /* the freelist holds a pages; the header says b */
    CAPSEM_PG_FREELIST_LEAVES = 8,   /* trunk page records a leaves, more than a trunk holds (b) */
    CAPSEM_PG_MAX_ROOT = 9,          /* auto-vacuum: the largest root is a, the header says b */
    CAPSEM_PG_INCREMENTAL = 10,      /* not auto-vacuum, yet the incremental-vacuum field is a */
    CAPSEM_PG_BAD_PAGE = 11,         /* in-tree: page is not a b-tree page (a = its type byte) */
    CAPSEM_PG_BAD_CELLS = 12,        /* in-tree: page records a cells, more than fit (b) */
    CAPSEM_PG_BAD_CELL = 13,         /* in-tree: cell a of page lies outside the page */
    CAPSEM_PG_SHORT_OVERFLOW = 14,   /* in-tree: the chain from page (cell on from) ends after a of b pages */
    CAPSEM_PG_TOO_DEEP = 15,         /* in-tree: the tree is deeper than CAPSEM_PAGES_MAX_DEPTH at page */
    CAPSEM_PG_BAD_HEADER = 16,       /* the database header is not one SQLite opens (a: which field) */
    CAPSEM_PG_SHORT_FILE = 17,       /* the header counts a pages; the file holds b */
    CAPSEM_PG_SHRANK = 18,           /* the file shrank while it was read (SIGBUS) */
} capsem_page_kind;

typedef struct {
    uint32_t kind;
    uint32_t in_tree; /* 1: damage inside one tree, which that tree's quick_check reports */
    uint32_t page;
    uint32_t tree;
    uint32_t from;
    uint32_t a;
    uint64_t b;
} capsem_page_finding;

/* The database header, as SQLite reads it when it opens the file. */
typedef struct {
    uint32_t page_size;
    uint32_t usable;        /* page size less the reserved bytes */
    uint32_t page_count;    /* SQLite's: the header's count when valid, else the file's */
    uint32_t file_pages;    /* ceil(file size / page size) */
    uint32_t freelist_trunk;
    uint32_t freelist_count;
    uint32_t schema_cookie;
    uint32_t autovacuum_root; /* the largest root page (auto-vacuum), 0 without */
    uint32_t incremental;
    uint32_t lock_page;     /* the page holding the lock byte (1 GiB), when page_count reaches it */
} capsem_page_header;

typedef struct {
    /* out */
    capsem_page_header header;
    uint64_t btree_pages;
    uint64_t overflow_pages;
    uint64_t freelist_pages;
    uint64_t ptrmap_pages;
    uint64_t findings_total;
    uint64_t in_tree_total;
    size_t nfindings;
    capsem_page_finding findings[CAPSEM_PAGES_MAX_FINDINGS];
} capsem_page_walk;

/* Parse the header of a mapped database file of `size` bytes (0 when it is one SQLite would
 * open; else a CAPSEM_PG_BAD_HEADER / CAPSEM_PG_SHORT_FILE finding is written to *bad). */
int capsem_page_header_parse(const uint8_t *map, uint64_t size, capsem_page_header *h, capsem_page_finding *bad);

/* What a tree must be for the walk to find it sound (one per root). `fields` 0: an index tree;
 * else a rowid table's tree whose every record has exactly `fields` fields, a value in each
 * field of `not_null`, NULL in each of `null` (the rowid's alias, which a record leaves NULL),
 * no number in a field of `no_number` (TEXT affinity) and no text in one of `no_text` (numeric
 * affinity): quick_check's tests of each row, for the first 64 fields. */
typedef struct {
    uint32_t fields;
    uint64_t not_null;
    uint64_t null;
    uint64_t no_number;
    uint64_t no_text;
} capsem_tree_rule;

/* Walk the file: the freelist, then every tree of `roots` (each an sqlite_schema rootpage;
 * 1 is sqlite_schema), then every page's use. `pages_out`, when not NULL, receives the pages
 * each root's tree uses (overflow pages included). `cancel`, when not NULL, is polled: a
 * non-zero value stops the walk (returns 1). `window`: the bytes of the map the walk keeps
 * resident (page_window.h; 0: no bound). `rules` and `sound_out` (both or neither): per
 * root, what its tree must be, and 1 when the tree passed every test SQLite's per-table
 * quick_check applies to it (each page's own, page_sound.h, and those between its pages: one
 * kind of page, leaves at one depth, keys in their parents' ranges, no empty page below the
 * root, overflow chains of exactly the pages the payload needs), the records keeping the
 * rule, and the walk found nothing in it; 0 leaves the tree to SQLite's check. An auto-vacuum
 * file's trees are all left to it (their pointer-map entries are not read here). Returns 0
 * when the walk ran, -1 when memory ran out. The SIGBUS guard must be installed
 * (capsem_guard_install). Runs without the GIL. */
int capsem_page_walk_run(const uint8_t *map, uint64_t size, const uint32_t *roots, size_t nroots,
                         uint64_t *pages_out, volatile const int *cancel, uint64_t window,
                         const capsem_tree_rule *rules, uint8_t *sound_out, capsem_page_walk *w);

/* A cheap estimate of the pages of each root's tree: the product of the fan-outs down its
 * left-most path (a few pages read per tree, every tree's next level asked of the page cache
 * together: page_summary.c), for ordering the per-table checks largest first. 0 for a root
 * that cannot be read. `window`: as the walk's (page_window.h), the pages read dropped once
 * it is done. */
void capsem_page_estimate(const uint8_t *map, uint64_t size, const capsem_page_header *h, const uint32_t *roots,
                          size_t nroots, uint64_t window, uint64_t *out);

#endif
