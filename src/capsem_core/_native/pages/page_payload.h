/* What reading one row's payload needs (see page_records.h): SQLite's varints, serial types
 * and integers (fileformat2 §2.1), and a payload's bytes, local or on its overflow chain
 * (§1.6), every page number and length bounded before use. Internal to the pages module. */
#ifndef CAPSEM_PAGE_PAYLOAD_H
#define CAPSEM_PAGE_PAYLOAD_H

#include <stdint.h>
#include <string.h>

#include "page_map.h"
#include "page_window.h"
#include "stream_gate.h"

/* The mapped file a scan reads, and how many of its pages it has read (a tree that loops
 * would read more than the file holds). `window`, when not NULL, is told of every page read
 * (page_window.h: the scan keeps a bounded part of the map resident). `follow`, when not
 * NULL, is the gate of a read-ahead streaming the file: a page it has not read yet is
 * waited for (stream_gate.h), until `cancel` is set. */
typedef struct {
    const uint8_t *map;
    capsem_page_header h;
    uint64_t pages;
    capsem_page_window *window;
    capsem_stream_gate *follow;
    volatile const int *cancel;
} capsem_rec_file;

/* One row's payload: its local bytes on the page, then its overflow chain, read forwards. */
typedef struct {
    const uint8_t *local;
    uint32_t nlocal, payload;
    uint32_t next;       /* the next overflow page to read */
    uint32_t chain_at;   /* payload offset of the next overflow page's content */
    uint32_t left;       /* overflow pages the payload still needs */
} payload;

static inline uint32_t get2(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t get4(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline const uint8_t *capsem_rec_page(const capsem_rec_file *f, uint32_t pgno) {
    return f->map + (uint64_t)(pgno - 1) * f->h.page_size;
}

/* Page `pgno`, about to be read: behind the stream it follows, and noted in its window. */
static inline const uint8_t *capsem_rec_read(const capsem_rec_file *f, uint32_t pgno) {
    capsem_gate_wait(f->follow, (uint64_t)pgno * f->h.page_size, f->cancel);
    capsem_window_touch(f->window, (uint64_t)(pgno - 1) * f->h.page_size);
    return capsem_rec_page(f, pgno);
}

/* SQLite's 64-bit varint at p (at most 9 bytes, not past end): bytes read, 0 when it runs off. */
static unsigned varint_long(const uint8_t *p, const uint8_t *end, uint64_t *out);

static inline unsigned varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    if (p < end && p[0] < 0x80) { /* most serial types, sizes and rowids of a ledger's rows */
        *out = p[0];
        return 1;
    }
    return varint_long(p, end, out);
}

static __attribute__((noinline)) unsigned varint_long(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (unsigned i = 0; i < 9; i++) {
        if (p + i >= end) return 0;
        if (i == 8) {
            *out = (v << 8) | p[i];
            return 9;
        }
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    return 0;
}

/* Bytes [off, off + len) of the payload (off + len <= payload, off not before what was read
 * last): a pointer to them on the page, or copied from the overflow chain into `dst`. NULL
 * when the chain is not as long as the payload says. */
static const uint8_t *chain_bytes(capsem_rec_file *f, payload *p, uint32_t off, uint32_t len, uint8_t *dst);

static inline const uint8_t *capsem_payload_bytes(capsem_rec_file *f, payload *p, uint32_t off, uint32_t len,
                                                  uint8_t *dst) {
    if (off + len <= p->nlocal) return p->local + off;
    return chain_bytes(f, p, off, len, dst);
}

static __attribute__((noinline)) const uint8_t *chain_bytes(capsem_rec_file *f, payload *p, uint32_t off,
                                                             uint32_t len, uint8_t *dst) {
    uint32_t have = 0;
    if (off < p->nlocal) {
        have = p->nlocal - off;
        memcpy(dst, p->local + off, have);
    }
    uint32_t per = f->h.usable - 4;
    while (have < len) {
        uint32_t at = off + have; /* the next byte wanted, in the chain */
        while (at >= p->chain_at + per) { /* skip pages wholly before it */
            if (!p->left || p->next < 2 || p->next > f->h.page_count || ++f->pages > f->h.page_count) return NULL;
            p->next = get4(capsem_rec_read(f, p->next));
            p->chain_at += per;
            p->left--;
        }
        if (!p->left || p->next < 2 || p->next > f->h.page_count || at < p->chain_at) return NULL;
        const uint8_t *content = capsem_rec_read(f, p->next) + 4;
        uint32_t from = at - p->chain_at, n = per - from;
        if (n > len - have) n = len - have;
        memcpy(dst + have, content + from, n);
        have += n;
    }
    return dst;
}

/* The payload of the table-leaf cell at `pc` of `page` (its size and rowid varints, its local
 * bytes and where its overflow chain starts): 0 when the cell does not fit the page as SQLite
 * lays it out (fileformat2 §1.6's local-size rule). */
static inline int capsem_cell_payload(const uint8_t *page, uint32_t pc, uint32_t usable, uint64_t *rowid,
                                      payload *p) {
    const uint8_t *end = page + usable, *q = page + pc;
    uint64_t psize;
    unsigned n = varint(q, end, &psize);
    if (!n || psize > 0x7FFFFFFFu) return 0;
    q += n;
    n = varint(q, end, rowid);
    if (!n) return 0;
    q += n;
    uint32_t max_local = usable - 35, min_local = (usable - 12) * 32 / 255 - 23;
    *p = (payload){q, (uint32_t)psize, (uint32_t)psize, 0, 0, 0};
    if (psize > max_local) {
        uint32_t surplus = min_local + (uint32_t)((psize - min_local) % (usable - 4));
        p->nlocal = surplus <= max_local ? surplus : min_local;
        if (q + p->nlocal + 4 > end) return 0;
        p->next = get4(q + p->nlocal);
        p->chain_at = p->nlocal;
        p->left = (uint32_t)((psize - p->nlocal + usable - 5) / (usable - 4));
    } else if (q + psize > end) {
        return 0;
    }
    return 1;
}

static inline uint32_t serial_size(uint64_t t);

/* The integer of serial type t (1-6, 8, 9) whose big-endian bytes are at b. */
static inline int64_t capsem_serial_int(const uint8_t *b, uint64_t t) {
    if (t == 8) return 0;
    if (t == 9) return 1;
    unsigned n = serial_size(t);
    uint64_t v = (b[0] & 0x80) ? ~0ull : 0;
    for (unsigned k = 0; k < n; k++) v = (v << 8) | b[k];
    return (int64_t)v;
}

/* The content size of serial types 0-127, the one-byte ones. */
static const uint8_t SMALL_SIZE[128] = {
    0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0,
#define S2(n) (n), (n)
    S2(0), S2(1), S2(2), S2(3), S2(4), S2(5), S2(6), S2(7), S2(8), S2(9), S2(10), S2(11), S2(12), S2(13), S2(14),
    S2(15), S2(16), S2(17), S2(18), S2(19), S2(20), S2(21), S2(22), S2(23), S2(24), S2(25), S2(26), S2(27), S2(28),
    S2(29), S2(30), S2(31), S2(32), S2(33), S2(34), S2(35), S2(36), S2(37), S2(38), S2(39), S2(40), S2(41), S2(42),
    S2(43), S2(44), S2(45), S2(46), S2(47), S2(48), S2(49), S2(50), S2(51), S2(52), S2(53), S2(54), S2(55), S2(56),
    S2(57),
#undef S2
};

static inline uint32_t serial_size(uint64_t t) {
    static const uint8_t fixed[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};
    return t < 12 ? fixed[t] : (uint32_t)((t - 12) / 2);
}

#endif
