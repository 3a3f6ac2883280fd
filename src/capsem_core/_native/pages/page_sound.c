/* One b-tree page's own tests (see page_sound.h). The tests follow SQLite's btreeInitPage,
 * btreeComputeFreeSpace and checkTreePage, and for table leaves what reading a row's columns
 * (OP_Column) refuses. */
#include <string.h>

#include "page_payload.h"
#include "page_sound.h"

#define PREFETCH 8u

/* Mark [at, last] as used; 0 when a cell or freeblock starts there already. */
static int mark(capsem_sound_scratch *s, uint32_t at, uint32_t last) {
    uint64_t bit = 1ull << (at & 63);
    if (s->starts[at >> 6] & bit) return 0;
    s->starts[at >> 6] |= bit;
    s->end_at[at] = (uint16_t)last;
    return 1;
}

/* A table leaf's record (its `local` bytes on the page at `rec`, `payload` in all): its header
 * wholly on the page, no reserved type, the sizes adding up to the payload. */
static int record_sound(const uint8_t *rec, uint32_t local, uint32_t payload, capsem_page_facts *f, int first) {
    uint64_t hsize, t, size, body = 0;
    const uint8_t *end = rec + local;
    unsigned n = varint(rec, end, &hsize);
    if (!n || hsize < n || hsize > local) return 0;
    const uint8_t *p = rec + n, *hend = rec + hsize;
    uint32_t fields = 0;
    while (p < hend) {
        n = varint(p, hend, &t);
        /* 10 and 11 are reserved; a size past the payload is refused before it is cut to 32 bits. */
        if (!n || t == 10 || t == 11 || (t >= 12 && (t - 12) / 2 > payload)) return 0;
        size = serial_size(t);
        body += size;
        if (body > payload) return 0;
        if (fields < CAPSEM_SOUND_MAX_COLUMNS) {
            uint64_t bit = 1ull << fields;
            if (t == 0) {
                f->nulls |= bit;
            } else {
                f->values |= bit;
                if (t <= 9) f->numbers |= bit;
                if (t >= 13 && (t & 1)) f->texts |= bit;
            }
        }
        if (++fields > 0xFFFFu) return 0;
        p += n;
    }
    if (hsize + body != payload) return 0;
    if (first || fields < f->fields_min) f->fields_min = (uint16_t)fields;
    if (first || fields > f->fields_max) f->fields_max = (uint16_t)fields;
    return 1;
}

int capsem_page_sound(uint32_t page_size, uint32_t usable, const uint8_t *page, uint32_t hdr, uint8_t type,
                      uint32_t ncell, capsem_sound_scratch *s, capsem_page_facts *f) {
    memset(f, 0, sizeof *f);
    int leaf = (type & 0x08) != 0, table = (type & 0x01) != 0;
    uint32_t first_cell = hdr + 8 + (leaf ? 0 : 4) + 2 * ncell;
    uint32_t content = get2(page + hdr + 5);
    if (content == 0) content = 65536;
    uint32_t frag = page[hdr + 7];
    if (content < first_cell || content > usable) return 0;
    memset(s->starts, 0, ((usable + 63) / 64) * sizeof *s->starts);

    /* The freeblocks: in ascending order inside the content area, none running off the page,
     * the free bytes they and the header count within the page (btreeComputeFreeSpace). */
    uint32_t nfree = frag + content;
    uint32_t pc = get2(page + hdr + 1);
    if (pc) {
        if (pc < content) return 0;
        for (;;) {
            if (pc > usable - 4) return 0;
            uint32_t next = get2(page + pc), size = get2(page + pc + 2);
            if (size < 4 || pc + size > usable) return 0;
            nfree += size;
            if (!mark(s, pc, pc + size - 1)) return 0;
            if (next == 0) break;
            if (next <= pc + size + 3) return 0;
            pc = next;
        }
    }
    if (nfree > usable || nfree < first_cell) return 0;

    /* The cells: each inside the content area and on the page, keys ascending on a table
     * page, each table leaf's record readable (checkTreePage, OP_Column). */
    const uint8_t *ptr = page + hdr + (leaf ? 8 : 12);
    const uint8_t *page_end = page + page_size;
    int spills = 0;
    uint32_t min_local = (usable - 12) * 32 / 255 - 23;
    uint32_t max_local = type == 0x0D ? usable - 35 : (usable - 12) * 64 / 255 - 23;
    /* Each cell's first bytes are a miss in the CPU's caches (cells lie in key order, not in
     * address order): the ones a few cells ahead are asked for while this one is read. */
    for (uint32_t i = 0; i < ncell && i < PREFETCH; i++) __builtin_prefetch(page + get2(ptr + 2 * i));
    for (uint32_t i = 0; i < ncell; i++) {
        if (i + PREFETCH < ncell) __builtin_prefetch(page + get2(ptr + 2 * (i + PREFETCH)));
        pc = get2(ptr + 2 * i);
        if (pc < content || pc > usable - 4) return 0;
        /* The cell as SQLite parses it (btreeParseCellPtr*): a payload size SQLite would read
         * as another number in 32 bits is refused, as is one past SQLITE_MAX_LENGTH. */
        const uint8_t *q = page + pc;
        uint64_t payload = 0, key = 0;
        unsigned n;
        if (type == 0x05) {
            q += 4;
        } else {
            q += type == 0x02 ? 4 : 0;
            n = varint(q, page_end, &payload);
            if (!n || payload > CAPSEM_SOUND_MAX_PAYLOAD) return 0;
            q += n;
        }
        if (table) {
            n = varint(q, page_end, &key);
            if (!n) return 0;
            q += n;
        }
        uint32_t head = (uint32_t)(q - (page + pc)), local, size;
        if (type == 0x05) {
            local = 0;
            size = head;
        } else if (payload <= max_local) {
            local = (uint32_t)payload;
            size = head + local < 4 ? 4 : head + local;
        } else {
            uint32_t surplus = min_local + (uint32_t)((payload - min_local) % (usable - 4));
            local = surplus <= max_local ? surplus : min_local;
            size = head + local + 4;
        }
        if ((uint64_t)pc + size > usable) return 0;
        spills |= payload > local;
        if (!mark(s, pc, pc + size - 1)) return 0;
        f->rows++;
        if (!table) continue;
        if (i > 0 && (int64_t)key <= f->hi) return 0;
        if (i == 0) f->lo = (int64_t)key;
        f->hi = (int64_t)key;
        if (leaf && !record_sound(q, local, (uint32_t)payload, f, i == 0)) return 0;
    }

    /* Every byte of the content area used once, by a cell or a freeblock, and the rest counted
     * as fragments in the header (checkTreePage's coverage). */
    uint32_t prev = content - 1, frags = 0;
    for (uint32_t w = content >> 6; w < (usable + 63) / 64; w++) {
        uint64_t x = s->starts[w];
        while (x) {
            uint32_t at = w * 64 + (uint32_t)__builtin_ctzll(x);
            x &= x - 1;
            if (at <= prev) return 0;
            frags += at - prev - 1;
            prev = s->end_at[at];
        }
    }
    frags += usable - prev - 1;
    if (frags != frag) return 0;
    return spills ? CAPSEM_SOUND_SPILLS : CAPSEM_SOUND_OK;
}

int64_t capsem_interior_key(const uint8_t *page, uint32_t hdr, uint32_t i) {
    uint32_t pc = get2(page + hdr + 12 + 2 * i);
    uint64_t key = 0;
    (void)varint(page + pc + 4, page + pc + 4 + 9, &key);
    return (int64_t)key;
}
