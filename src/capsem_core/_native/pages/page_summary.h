/* What the page walk (page_map.c) needs of each page of a database file, read once in file
 * order before the trees are followed.
 *
 * SQLite's integrity check follows each tree from its root, so it reads the file in tree
 * order: a table's leaves lie across the whole file, interleaved with every other tree's,
 * and an index on a random key (a body hash, an event id) visits its pages at random. With
 * the map's resident pages bounded (page_window.h), reading in that order would fault each
 * region of the file in again for every tree holding a page in it. So the walk first reads
 * every page once, in file order, and keeps what following the trees needs of it: a b-tree
 * page's type, an interior page's children, each overflow chain of its cells (head page and
 * length), and for any other page its first four bytes (an overflow page's next page). The
 * trees are then followed in SQLite's order on these summaries alone.
 *
 * A page the summary cannot stand for exactly is marked to be read again by the walk: a
 * page with a cell outside its content area or more cells than fit, and every page once
 * the entries reach their budget (two per page, so a crafted file cannot make them grow past
 * the file's own size), which the walk then reads as it always did. Every length is bounded
 * before use; the file is read under the caller's SIGBUS guard. */
#ifndef CAPSEM_PAGE_SUMMARY_H
#define CAPSEM_PAGE_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "page_map.h"
#include "page_sound.h"
#include "page_window.h"

/* kind[p]: besides a b-tree type (0x02, 0x05, 0x0A, 0x0D; its entries: for an interior page
 * its cell count then its cell count + 1 children, then (head, length) per overflow chain). */
#define CAPSEM_SUMMARY_OTHER 0u /* not a b-tree page: one entry, its first four bytes */
#define CAPSEM_SUMMARY_READ 1u  /* the walk reads the page itself */

typedef struct {
    uint32_t page_count;
    uint8_t *kind;    /* [page_count + 1] */
    uint32_t *at;     /* [page_count + 2]: page p's entries are entry[at[p] .. at[p + 1]) */
    uint32_t *entry;
    size_t cap;       /* entries allocated (the budget) */
    /* Each b-tree page's own tests (page_sound.h), for the tests between pages: sound[p] 1 when
     * page p passed them, facts[p] what they found. NULL when they were not asked for or there
     * was no memory for them (no tree is then found sound). */
    uint8_t *sound;             /* [page_count + 1] */
    capsem_page_facts *facts;   /* [page_count + 1] */
    capsem_sound_scratch *scratch; /* while the summary is built (freed with it after a SIGBUS) */
} capsem_page_summary;

/* Summarise pages 1..h->page_count of the map [map, map + size) (every page within the file,
 * the header having parsed; the last may end past it: `scratch`, one page, holds its bytes),
 * noting each read in `win` (may be NULL); `starts` is a cell-start bitmap of usable / 64
 * words. `tests`: hold each b-tree page to its own tests too (`sound`, `facts`), for a walk
 * that judges trees. Returns 0, 1 when `cancel` stopped it, -1 when memory ran out (the walk
 * then reads every page itself). */
int capsem_summary_build(capsem_page_summary *s, const uint8_t *map, uint64_t size, const capsem_page_header *h,
                         capsem_page_window *win, volatile const int *cancel, uint64_t *starts, uint8_t *scratch,
                         int tests);

void capsem_summary_free(capsem_page_summary *s);

#endif
