/* B-tree cells as SQLite's integrity check parses them (fileformat2 §1.6): a cell's size
 * on its page, its payload and how much of it stays local, and a test, from the cell
 * pointer array alone, that no cell of a page spills into an overflow chain. */
#ifndef CAPSEM_PAGE_CELLS_H
#define CAPSEM_PAGE_CELLS_H

#include <stdint.h>

typedef struct {
    uint32_t size;    /* bytes of the cell on its page */
    uint32_t payload; /* payload bytes in all */
    uint32_t local;   /* of which on the page */
} capsem_cell;

/* The cell at `pc` of a page of `type` (0x02, 0x05, 0x0A, 0x0D; SQLite's btreeParseCellPtr*,
 * sizes in its 32-bit arithmetic): 0, or -1 when its header runs off the page. */
int capsem_parse_cell(uint32_t page_size, uint32_t usable, uint8_t type, const uint8_t *page, uint32_t pc,
                      capsem_cell *c);

/* 1 when no cell of the page can have an overflow chain, read from the cell pointer array
 * alone (the cells themselves stay untouched: they are most of a walk's memory traffic). On a
 * page SQLite accepts, cells do not overlap, so a cell is no larger than the distance from
 * its offset to the next cell's above it (or to the end of the usable area); a cell that
 * spills holds at least min_local bytes of payload, a size varint and the 4-byte overflow
 * pointer. When every such distance is shorter, no cell spills. A damaged page may fool this,
 * but then that tree's own check reports it. The cell starts are sorted through `starts`, a
 * bitmap of the page's bytes (at least usable / 64 words; SQLite keeps cells in key order,
 * not address order). */
int capsem_cells_cannot_spill(uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type, uint32_t ncell,
                              uint64_t *starts);

/* Cell `i` of a b-tree page of `type` (not 0x05: its cells hold no payload), as the page walk
 * reads it for overflow: 0 when its payload stays on the page, 1 when it spills into a chain
 * of *want pages starting at *head, -1 when the cell lies outside the page's cell content
 * area or runs off it (damage inside the tree; *pc then holds its offset). */
int capsem_cell_chain(uint32_t page_size, uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type, uint32_t i,
                      uint32_t *pc, uint32_t *head, uint32_t *want);

/* The child `i` of an interior page (0x02 or 0x05; `ncell` for the right-most pointer): 0 and
 * *bad set when its cell lies outside the page (a table interior's damage to note; an index
 * interior's is noted for its payload already, by capsem_cell_chain), with *pc its offset. */
uint32_t capsem_cell_child(uint32_t page_size, uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type,
                           uint32_t i, uint32_t ncell, uint32_t *pc, int *bad);

#endif
