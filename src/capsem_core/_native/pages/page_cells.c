/* B-tree cells as SQLite parses them (see page_cells.h; fileformat2 §1.6). */
#include <string.h>

#include "page_cells.h"

static inline uint32_t get2(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t get4(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* SQLite's payload-size varint: at most 9 bytes, 7 bits each, kept in 32 bits. Returns the
 * bytes read, or 0 when the varint runs off the page (`end`). */
static unsigned payload_varint(const uint8_t *p, const uint8_t *end, uint32_t *out) {
    uint32_t v = 0;
    for (unsigned i = 0; i < 9; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80) || i == 8) {
            *out = v;
            return i + 1;
        }
    }
    return 0;
}

/* The length of a 64-bit varint (a rowid): 1 to 9 bytes, or 0 when it runs off the page. */
static unsigned varint_len(const uint8_t *p, const uint8_t *end) {
    for (unsigned i = 0; i < 9; i++) {
        if (p + i >= end) return 0;
        if (!(p[i] & 0x80) || i == 8) return i + 1;
    }
    return 0;
}

int capsem_parse_cell(uint32_t page_size, uint32_t usable, uint8_t type, const uint8_t *page, uint32_t pc,
                      capsem_cell *c) {
    const uint8_t *end = page + page_size;
    const uint8_t *cell = page + pc, *q = cell;
    uint32_t min_local = (usable - 12) * 32 / 255 - 23;
    uint32_t max_local;
    unsigned n;
    if (type == 0x05) { /* table interior: child pointer, rowid */
        n = varint_len(cell + 4, end);
        if (!n) return -1;
        c->size = 4 + n;
        c->payload = c->local = 0;
        return 0;
    }
    if (type == 0x0D) { /* table leaf: payload size, rowid, payload */
        max_local = usable - 35;
        n = payload_varint(q, end, &c->payload);
        if (!n) return -1;
        q += n;
        n = varint_len(q, end);
        if (!n) return -1;
        q += n;
    } else { /* index: (child pointer,) payload size, payload */
        max_local = (usable - 12) * 64 / 255 - 23;
        q += type == 0x02 ? 4 : 0;
        n = payload_varint(q, end, &c->payload);
        if (!n) return -1;
        q += n;
    }
    uint32_t head = (uint32_t)(q - cell);
    if (c->payload <= max_local) {
        c->local = c->payload;
        c->size = c->payload + head < 4 ? 4 : c->payload + head;
    } else {
        uint32_t surplus = min_local + (c->payload - min_local) % (usable - 4);
        c->local = surplus <= max_local ? surplus : min_local;
        c->size = head + c->local + 4;
    }
    return 0;
}

int capsem_cells_cannot_spill(uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type, uint32_t ncell,
                              uint64_t *starts) {
    uint32_t least = (usable - 12) * 32 / 255 - 23 + 5;
    uint32_t content = get2(page + hdr + 5);
    if (content == 0) content = 65536;
    const uint8_t *ptr = page + hdr + ((type & 0x08) ? 8 : 12);
    uint64_t *bits = starts;
    size_t words = (usable + 63) / 64;
    memset(bits, 0, words * sizeof *bits);
    for (uint32_t i = 0; i < ncell; i++) {
        uint32_t at = get2(ptr + 2 * i);
        if (at < content || at > usable - 4) return 0;
        uint64_t bit = 1ull << (at & 63);
        if (bits[at >> 6] & bit) return 0;
        bits[at >> 6] |= bit;
    }
    uint32_t above = usable;
    for (size_t w = words; w-- > (content >> 6);) {
        uint64_t x = bits[w];
        while (x) {
            unsigned hi = 63u - (unsigned)__builtin_clzll(x);
            uint32_t at = (uint32_t)(w * 64 + hi);
            if (above - at >= least) return 0;
            above = at;
            x &= ~(1ull << hi);
        }
    }
    return 1;
}


/* The cell at pc parses and lies within the usable area (SQLite's cell checks). */
static int cell_fits(uint32_t page_size, uint32_t usable, const uint8_t *page, uint8_t type, uint32_t pc,
                     uint32_t content, capsem_cell *c) {
    return pc >= content && pc <= usable - 4 && capsem_parse_cell(page_size, usable, type, page, pc, c) == 0 &&
           (uint64_t)pc + c->size <= usable;
}

int capsem_cell_chain(uint32_t page_size, uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type, uint32_t i,
                      uint32_t *pc, uint32_t *head, uint32_t *want) {
    uint32_t content = get2(page + hdr + 5);
    if (content == 0) content = 65536;
    /* A payload whose size varint is one or two bytes and within the page's local limit never
     * spills: most cells of a ledger's tables and indexes are decided by those bytes. */
    uint32_t max_local = type == 0x0D ? usable - 35 : (usable - 12) * 64 / 255 - 23;
    uint32_t skip = type == 0x02 ? 4 : 0;
    const uint8_t *ptr = page + hdr + ((type & 0x08) ? 8 : 12);
    *pc = get2(ptr + 2 * i);
    uint32_t at = *pc + skip;
    if (at >= content + skip && at + 1 < usable) {
        uint32_t b0 = page[at], b1 = page[at + 1];
        uint32_t payload = b0 < 0x80 ? b0 : b1 < 0x80 ? ((b0 & 0x7f) << 7) | b1 : max_local + 1;
        if (payload <= max_local) return 0;
    }
    capsem_cell c;
    if (!cell_fits(page_size, usable, page, type, *pc, content, &c)) return -1;
    if (c.payload <= c.local) return 0;
    *want = (c.payload - c.local + usable - 5) / (usable - 4); /* SQLite's u32 sum */
    *head = get4(page + *pc + c.size - 4);
    return 1;
}

uint32_t capsem_cell_child(uint32_t page_size, uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type,
                           uint32_t i, uint32_t ncell, uint32_t *pc, int *bad) {
    *bad = 0;
    *pc = 0;
    if (i >= ncell) return get4(page + hdr + 8);
    uint32_t content = get2(page + hdr + 5);
    if (content == 0) content = 65536;
    capsem_cell c;
    *pc = get2(page + hdr + 12 + 2 * i);
    if (!cell_fits(page_size, usable, page, type, *pc, content, &c)) {
        *bad = 1;
        return 0;
    }
    return get4(page + *pc);
}
