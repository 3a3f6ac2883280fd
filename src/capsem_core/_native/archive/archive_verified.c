/* Verified segments and the reads they serve (see archive_verified.h). */
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "archive_verified.h"
#include "big_alloc.h"

/* zlib's stream inflates a byte in about four times libdeflate's time (2.6 against 0.65 ns a
 * byte on the large bench sample): a span ending past a quarter of its segments' raw bytes is
 * cheaper read by inflating those segments whole with libdeflate. Measured over 10,000 random
 * reads there, any ratio from 2 to 6 gives the same time within 3%; 1 (zlib always) takes
 * 1.6x as long, libdeflate always 1.5x. */
#define ZLIB_PER_LIBDEFLATE 4u

typedef struct {
    uint64_t at_plus_one; /* 0: an empty slot */
    uint8_t head[CAPSEM_SEGMENT_HEADER_BYTES];
} slot;

struct capsem_verified {
    slot *slots;
    size_t nslots, count, max_slots;
    uint8_t *buf; /* the scratch raw bytes a read returns */
    size_t buf_cap;
    z_stream z;
    int z_ready;
};

#define MIN_SLOTS 64u

capsem_verified *capsem_verified_new(size_t max_bytes) {
    capsem_verified *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    size_t max_slots = MIN_SLOTS;
    while (max_slots * 2 * sizeof(slot) <= max_bytes && max_slots < ((size_t)1 << 30)) max_slots *= 2;
    v->max_slots = max_slots;
    return v;
}

void capsem_verified_free(capsem_verified *v) {
    if (!v) return;
    if (v->z_ready) inflateEnd(&v->z);
    free(v->slots);
    capsem_big_free(v->buf, v->buf_cap);
    free(v);
}

void capsem_verified_clear(capsem_verified *v) {
    if (v->slots) memset(v->slots, 0, v->nslots * sizeof(slot));
    v->count = 0;
}

size_t capsem_verified_count(const capsem_verified *v) { return v->count; }

size_t capsem_verified_bytes(const capsem_verified *v) { return v->nslots * sizeof(slot) + v->buf_cap; }

void capsem_verified_release_buffer(capsem_verified *v) {
    capsem_big_free(v->buf, v->buf_cap);
    v->buf = NULL;
    v->buf_cap = 0;
}

static size_t slot_of(const capsem_verified *v, uint64_t at) {
    return (size_t)((at * 0x9E3779B97F4A7C15ull) >> 17) & (v->nslots - 1);
}

static slot *find(const capsem_verified *v, uint64_t at) {
    if (!v->nslots) return NULL;
    for (size_t i = slot_of(v, at);; i = (i + 1) & (v->nslots - 1)) {
        if (v->slots[i].at_plus_one == 0) return NULL;
        if (v->slots[i].at_plus_one == at + 1) return &v->slots[i];
    }
}

static void put(capsem_verified *v, uint64_t at, const uint8_t *head) {
    slot *s = find(v, at);
    if (s) {
        memcpy(s->head, head, CAPSEM_SEGMENT_HEADER_BYTES);
        return;
    }
    /* At most three quarters full: grow while the bound allows, else start over empty. */
    if ((v->count + 1) * 4 > v->nslots * 3) {
        size_t want = v->nslots ? v->nslots * 2 : MIN_SLOTS;
        slot *old = v->slots;
        size_t old_n = v->nslots;
        slot *fresh = want <= v->max_slots ? calloc(want, sizeof(slot)) : NULL;
        if (!fresh) {
            capsem_verified_clear(v);
            if (!v->nslots) return;
        } else {
            v->slots = fresh;
            v->nslots = want;
            v->count = 0;
            for (size_t i = 0; i < old_n; i++)
                if (old[i].at_plus_one) put(v, old[i].at_plus_one - 1, old[i].head);
            free(old);
        }
    }
    size_t i = slot_of(v, at);
    while (v->slots[i].at_plus_one) i = (i + 1) & (v->nslots - 1);
    v->slots[i].at_plus_one = at + 1;
    memcpy(v->slots[i].head, head, CAPSEM_SEGMENT_HEADER_BYTES);
    v->count++;
}

/* The deflate block's header at block_offset, bounded by the view: 1 when it is one. */
static int deflate_block(const uint8_t *base, uint64_t size, uint64_t block_offset) {
    uint8_t codec = 0;
    return block_offset <= size && size - block_offset >= CAPSEM_BLOCK_HEADER_BYTES &&
           capsem_parse_block_header(base + block_offset, CAPSEM_BLOCK_HEADER_BYTES, &codec) == CAPSEM_OK &&
           codec == CAPSEM_CODEC_DEFLATE;
}

/* The segment header at `at` (bounded by the view, chained to raw_start) and its payload's
 * bounds: 1 when it parses and its payload lies in the view. */
static int segment_at(const uint8_t *base, uint64_t size, uint64_t at, uint64_t raw_start, capsem_segment_header *h) {
    if (at > size || size - at < CAPSEM_SEGMENT_HEADER_BYTES) return 0;
    if (capsem_parse_segment_header(base + at, CAPSEM_SEGMENT_HEADER_BYTES, (uint32_t)raw_start, h) != CAPSEM_OK)
        return 0;
    return size - (at + CAPSEM_SEGMENT_HEADER_BYTES) >= h->comp_len;
}

void capsem_verified_note(capsem_verified *v, const uint8_t *base, uint64_t size, uint64_t block_offset,
                          uint64_t upto) {
    if (!deflate_block(base, size, block_offset)) return;
    uint64_t at = block_offset + CAPSEM_BLOCK_HEADER_BYTES, raw = 0;
    capsem_segment_header h;
    uint8_t head[CAPSEM_SEGMENT_HEADER_BYTES];
    while (at < upto && segment_at(base, size, at, raw, &h)) {
        /* Copied out first: a fault reading the map then never leaves a slot half written. */
        memcpy(head, base + at, sizeof head);
        put(v, at, head);
        raw += h.raw_len;
        at += CAPSEM_SEGMENT_HEADER_BYTES + (uint64_t)h.comp_len;
    }
}

/* zlib's stream over the segments from `at`, stopped once `end` raw bytes are out. */
static int inflate_prefix(capsem_verified *v, const uint8_t *base, uint64_t size, uint64_t at, uint64_t end) {
    if (!capsem_inflate_grow(&v->buf, &v->buf_cap, (size_t)end)) return 0;
    int zr = v->z_ready ? inflateReset(&v->z) : inflateInit2(&v->z, -15);
    if (zr != Z_OK) return 0;
    v->z_ready = 1;
    uint64_t raw = 0;
    while (raw < end) {
        capsem_segment_header h;
        if (!segment_at(base, size, at, raw, &h)) return 0;
        uint64_t want = end - raw < h.raw_len ? end - raw : h.raw_len;
        v->z.next_in = (Bytef *)(base + at + CAPSEM_SEGMENT_HEADER_BYTES);
        v->z.avail_in = h.comp_len;
        v->z.next_out = v->buf + raw;
        v->z.avail_out = (uInt)want;
        for (;;) {
            uInt in_before = v->z.avail_in, out_before = v->z.avail_out;
            int r = inflate(&v->z, Z_SYNC_FLUSH);
            if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) return 0;
            if (r != Z_OK || v->z.avail_out == 0 || v->z.avail_in == 0) break;
            if (v->z.avail_in == in_before && v->z.avail_out == out_before) break;
        }
        /* A verified segment gives its declared bytes; anything else is a changed file. */
        if (v->z.avail_out != 0) return 0;
        if (want == h.raw_len && v->z.avail_in != 0) return 0;
        raw += want;
        at += CAPSEM_SEGMENT_HEADER_BYTES + (uint64_t)h.comp_len;
    }
    return 1;
}

const uint8_t *capsem_verified_read(capsem_verified *v, capsem_inflater *fast, const uint8_t *base, uint64_t size,
                                    uint64_t block_offset, uint64_t end, uint64_t *segments) {
    *segments = 0;
    if (end == 0 || end > CAPSEM_MAX_BLOCK_RAW_BYTES || !deflate_block(base, size, block_offset)) return NULL;
    uint64_t first = block_offset + CAPSEM_BLOCK_HEADER_BYTES, at = first, raw = 0, n = 0;
    capsem_segment_header h;
    while (raw < end) {
        slot *s = find(v, at);
        if (!s || !segment_at(base, size, at, raw, &h) ||
            memcmp(s->head, base + at, CAPSEM_SEGMENT_HEADER_BYTES) != 0)
            return NULL;
        raw += h.raw_len;
        n++;
        if (raw < end && (h.flags & CAPSEM_SEGMENT_FINAL)) return NULL;
        at += CAPSEM_SEGMENT_HEADER_BYTES + (uint64_t)h.comp_len;
    }
    if (fast && end * ZLIB_PER_LIBDEFLATE > raw) {
        capsem_inflate_end got;
        if (!capsem_inflate_segments(fast, base, size, first, 0, end, &v->buf, &v->buf_cap, NULL, NULL, 0, &got) ||
            got.held < end)
            return NULL;
    } else if (!inflate_prefix(v, base, size, first, end)) {
        return NULL;
    }
    *segments = n;
    return v->buf;
}
