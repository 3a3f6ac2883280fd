/* One b-tree page held to every test SQLite's per-table quick_check applies to a single page,
 * and what the tests between pages need of it (fileformat2 §1.5-1.6).
 *
 * `PRAGMA quick_check(TABLE)` on a read-only connection checks the table's trees page by page
 * (the header, the freeblock list, every cell's place and size, the bytes of the page used
 * exactly once, the fragmented-byte count, the rowid order), then between pages (child depth,
 * key ranges, overflow chain lengths) and every row's NOT NULL columns (CHECK constraints are
 * not loaded on a read-only connection, so it tests none). A page that passes here passes all
 * of SQLite's tests of one page; the tests are stricter where that is simpler (freeblocks of at
 * least 4 bytes, record headers whose sizes add up to the payload exactly, no reserved serial
 * types), so a page SQLite would fault never passes. The page map (page_map.c) adds the tests
 * between pages; a tree whose every test passes needs no quick_check of its own. */
#ifndef CAPSEM_PAGE_SOUND_H
#define CAPSEM_PAGE_SOUND_H

#include <stdint.h>

/* The records' columns the facts keep one bit each of (the rest: a table with more columns is
 * left to SQLite). */
#define CAPSEM_SOUND_MAX_COLUMNS 64
/* SQLite's default SQLITE_MAX_LENGTH: a longer payload is an error when a row is read. */
#define CAPSEM_SOUND_MAX_PAYLOAD 1000000000u

/* What the tests between pages need of one page: its cell count (`rows`). Table pages: the
 * first and last key (the rowids of a leaf, the keys of an interior page). Table leaves:
 * the fewest and most fields of a record, and which of the first 64 fields hold, in some
 * record, NULL (`nulls`), any value (`values`), a number (`numbers`: an integer or a real)
 * and a text (`texts`). */
typedef struct {
    int64_t lo, hi;
    uint64_t nulls, values, numbers, texts;
    uint32_t rows;
    uint16_t fields_min, fields_max;
} capsem_page_facts;

/* Scratch for one page's test: a bit per byte of the page where a cell or freeblock starts,
 * and where each ends. */
typedef struct {
    uint64_t starts[1024];
    uint16_t end_at[65536];
} capsem_sound_scratch;

#define CAPSEM_SOUND_OK 1     /* passed; no cell's payload spills into an overflow chain */
#define CAPSEM_SOUND_SPILLS 2 /* passed; some cell's payload spills */

/* CAPSEM_SOUND_OK or _SPILLS when the b-tree page (`type` 0x02, 0x05, 0x0A or 0x0D; its header
 * at `hdr`; `ncell` at most (page_size - 8) / 6) passes (facts set), else 0. */
int capsem_page_sound(uint32_t page_size, uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type,
                      uint32_t ncell, capsem_sound_scratch *s, capsem_page_facts *f);

/* Key `i` of a table interior page that passed capsem_page_sound. */
int64_t capsem_interior_key(const uint8_t *page, uint32_t hdr, uint32_t i);

#endif
