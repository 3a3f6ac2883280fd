/* The block cursor: Capsem's read protocol (facts §4.2) over a caller's view of the file.
 * Every segment header is bounded before its payload is touched; the payload is inflated
 * into raw_len + 1 bytes so an overlong segment shows; the segment hash is checked before
 * its bytes count as held. A caller may hand it an inflater (capsem_cursor_reach_with): a
 * deflate block's segments are then tried with libdeflate first (archive_inflate.c), and the
 * zlib stream takes over where that fails, so a failure is named as zlib names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>
#include <zstd.h>

#include "archive_inflate.h"
#include "big_alloc.h"
#include "archive_reader.h"
#include "blake3.h"

/* BLAKE3 of no bytes: the hash an empty segment's header carries. */
static const uint8_t EMPTY_HASH[32] = {0xaf, 0x13, 0x49, 0xb9, 0xf5, 0xf9, 0xa1, 0xa6, 0xa0, 0x40, 0x4d,
                                       0xea, 0x36, 0xdc, 0xc9, 0x49, 0x9b, 0xcb, 0x25, 0xc9, 0xad, 0xc1,
                                       0x12, 0xb7, 0xcc, 0x9a, 0x93, 0xca, 0xe4, 0x1f, 0x32, 0x62};

/* Blocks are at most 16 MiB raw, so no zstd window needs to be larger; a frame that asks
 * for more is refused instead of sizing an allocation from hostile bytes. */
#define CAPSEM_ZSTD_WINDOW_LOG_MAX 24

struct capsem_cursor {
    int active;
    int finished;
    uint8_t codec;
    uint64_t block_offset;
    uint64_t next_segment;
    uint64_t held;
    uint8_t *raw;
    size_t raw_cap;
    z_stream z;
    int z_ready;
    /* The zlib stream is not at `held` (libdeflate read the segments before it): reset it
     * and give it the window before it inflates the next segment. */
    int z_stale;
    ZSTD_DCtx *zd;
    uint64_t blocks_inflated;
    uint64_t segments_inflated;
};

static void set_error(capsem_error *err, capsem_status st, uint64_t at, const char *detail) {
    if (!err) return;
    err->status = st;
    err->at = at;
    err->hash_mismatch = 0;
    if (detail) {
        snprintf(err->detail, sizeof err->detail, "%s", detail);
    } else {
        err->detail[0] = 0;
    }
}

capsem_cursor *capsem_cursor_new(void) {
    capsem_cursor *c = calloc(1, sizeof *c);
    return c;
}

void capsem_cursor_free(capsem_cursor *c) {
    if (!c) return;
    if (c->z_ready) inflateEnd(&c->z);
    if (c->zd) ZSTD_freeDCtx(c->zd);
    capsem_big_free(c->raw, c->raw_cap);
    free(c);
}

void capsem_cursor_discard(capsem_cursor *c) {
    c->active = 0;
    c->finished = 0;
    c->held = 0;
}

const uint8_t *capsem_cursor_raw(const capsem_cursor *c) { return c->raw; }
uint64_t capsem_cursor_held(const capsem_cursor *c) { return c->active ? c->held : 0; }
int capsem_cursor_active(const capsem_cursor *c) { return c->active; }
uint64_t capsem_cursor_block(const capsem_cursor *c) { return c->block_offset; }
int capsem_cursor_finished(const capsem_cursor *c) { return c->active && c->finished; }
uint64_t capsem_cursor_next_segment(const capsem_cursor *c) { return c->next_segment; }
uint64_t capsem_cursor_blocks_inflated(const capsem_cursor *c) { return c->blocks_inflated; }
size_t capsem_cursor_capacity(const capsem_cursor *c) { return c->raw_cap; }
uint64_t capsem_cursor_segments_inflated(const capsem_cursor *c) { return c->segments_inflated; }

/* Room for `need` bytes; need is bounded by the caller to 16 MiB + 1. */
static int reserve(capsem_cursor *c, size_t need) {
    if (need <= c->raw_cap) return 1;
    size_t cap = c->raw_cap ? c->raw_cap : (64u << 10);
    while (cap < need) cap *= 2;
    if (cap > (size_t)CAPSEM_MAX_BLOCK_RAW_BYTES + 1) cap = (size_t)CAPSEM_MAX_BLOCK_RAW_BYTES + 1;
    if (cap < need) return 0;
    uint8_t *p = capsem_big_realloc(c->raw, c->raw_cap, cap);
    if (!p) return 0;
    c->raw = p;
    c->raw_cap = cap;
    return 1;
}

/* The 8-byte block header at block_offset, bounded by the view. */
static capsem_status block_header(const uint8_t *base, uint64_t size, uint64_t block_offset, uint8_t *codec,
                                  capsem_error *err) {
    if (block_offset > size || size - block_offset < CAPSEM_BLOCK_HEADER_BYTES) {
        set_error(err, CAPSEM_E_BLOCK_HEADER, block_offset, NULL);
        return CAPSEM_E_BLOCK_HEADER;
    }
    capsem_status st = capsem_parse_block_header(base + block_offset, CAPSEM_BLOCK_HEADER_BYTES, codec);
    if (st != CAPSEM_OK) {
        set_error(err, st, block_offset, NULL);
        if (err) err->codec = *codec;
    }
    return st;
}

static capsem_status start_block(capsem_cursor *c, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                 capsem_error *err) {
    capsem_cursor_discard(c);
    uint8_t codec = 0;
    capsem_status st = block_header(base, size, block_offset, &codec, err);
    if (st != CAPSEM_OK) return st;
    if (codec == CAPSEM_CODEC_DEFLATE) {
        int zr = c->z_ready ? inflateReset(&c->z) : inflateInit2(&c->z, -15);
        if (zr != Z_OK) {
            set_error(err, CAPSEM_E_NOMEM, block_offset, "zlib could not start an inflater");
            return CAPSEM_E_NOMEM;
        }
        c->z_ready = 1;
        c->z_stale = 0;
    } else {
        if (!c->zd) {
            c->zd = ZSTD_createDCtx();
            if (!c->zd) {
                set_error(err, CAPSEM_E_NOMEM, block_offset, "zstd could not start a decoder");
                return CAPSEM_E_NOMEM;
            }
        }
        ZSTD_DCtx_reset(c->zd, ZSTD_reset_session_and_parameters);
        ZSTD_DCtx_setParameter(c->zd, ZSTD_d_windowLogMax, CAPSEM_ZSTD_WINDOW_LOG_MAX);
    }
    c->active = 1;
    c->finished = 0;
    c->codec = codec;
    c->block_offset = block_offset;
    c->next_segment = block_offset + CAPSEM_BLOCK_HEADER_BYTES;
    c->held = 0;
    c->blocks_inflated++;
    return CAPSEM_OK;
}

/* Inflate one segment payload into out[0 .. raw_len + 1). Sets *produced and *ended. */
static capsem_status inflate_deflate(capsem_cursor *c, const uint8_t *payload, uint32_t comp_len, uint8_t *out,
                                     uint32_t raw_len, uint64_t at, uint64_t *produced, int *ended,
                                     uint64_t *unconsumed, capsem_error *err) {
    z_stream *z = &c->z;
    z->next_in = (Bytef *)payload;
    z->avail_in = comp_len;
    z->next_out = out;
    z->avail_out = raw_len + 1;
    int ret;
    for (;;) {
        uInt in_before = z->avail_in, out_before = z->avail_out;
        ret = inflate(z, Z_SYNC_FLUSH);
        if (ret == Z_STREAM_END) break;
        if (ret == Z_BUF_ERROR) break; /* no progress possible: input or output exhausted */
        if (ret != Z_OK) {
            char msg[140];
            snprintf(msg, sizeof msg, "%s", z->msg ? z->msg : (ret == Z_MEM_ERROR ? "out of memory" : "invalid data"));
            set_error(err, ret == Z_MEM_ERROR ? CAPSEM_E_NOMEM : CAPSEM_E_INFLATE, at, msg);
            return ret == Z_MEM_ERROR ? CAPSEM_E_NOMEM : CAPSEM_E_INFLATE;
        }
        if (z->avail_in == 0 || z->avail_out == 0) break;
        if (z->avail_in == in_before && z->avail_out == out_before) break;
    }
    *produced = (uint64_t)(raw_len + 1) - z->avail_out;
    *ended = ret == Z_STREAM_END;
    *unconsumed = z->avail_in;
    return CAPSEM_OK;
}

static capsem_status inflate_zstd(capsem_cursor *c, const uint8_t *payload, uint32_t comp_len, uint8_t *out,
                                  uint32_t raw_len, uint64_t at, uint64_t *produced, int *ended,
                                  uint64_t *unconsumed, capsem_error *err) {
    ZSTD_inBuffer in = {payload, comp_len, 0};
    ZSTD_outBuffer ob = {out, (size_t)raw_len + 1, 0};
    size_t r = 1;
    for (;;) {
        size_t in_before = in.pos, out_before = ob.pos;
        r = ZSTD_decompressStream(c->zd, &ob, &in);
        if (ZSTD_isError(r)) {
            set_error(err, CAPSEM_E_INFLATE, at, ZSTD_getErrorName(r));
            return CAPSEM_E_INFLATE;
        }
        if (r == 0) break; /* the frame is complete and flushed */
        if (ob.pos == ob.size) break;
        if (in.pos == in_before && ob.pos == out_before) break;
    }
    *produced = ob.pos;
    *ended = r == 0;
    *unconsumed = in.size - in.pos;
    return CAPSEM_OK;
}

/* One more segment at c->next_segment. TRUNCATED leaves the cursor untouched. */
static capsem_status next_segment(capsem_cursor *c, const uint8_t *base, uint64_t size, capsem_error *err) {
    uint64_t at = c->next_segment;
    if (at > size || size - at < CAPSEM_SEGMENT_HEADER_BYTES) {
        set_error(err, CAPSEM_E_TRUNCATED, c->block_offset, NULL);
        return CAPSEM_E_TRUNCATED;
    }
    capsem_segment_header h;
    capsem_status st = capsem_parse_segment_header(base + at, CAPSEM_SEGMENT_HEADER_BYTES, (uint32_t)c->held, &h);
    if (st != CAPSEM_OK) {
        char d[120];
        snprintf(d, sizeof d, "flags=%#x raw_start=%u raw_len=%u comp_len=%u, expected raw_start %u",
                 base[at + 4], capsem_le32(base + at + 8), capsem_le32(base + at + 12), capsem_le32(base + at + 16),
                 (unsigned)c->held);
        set_error(err, CAPSEM_E_SEGMENT, at, d);
        return CAPSEM_E_SEGMENT;
    }
    uint64_t payload_at = at + CAPSEM_SEGMENT_HEADER_BYTES;
    if (size - payload_at < h.comp_len) {
        set_error(err, CAPSEM_E_TRUNCATED, c->block_offset, NULL);
        return CAPSEM_E_TRUNCATED;
    }
    const uint8_t *payload = base + payload_at;
    int final = (h.flags & CAPSEM_SEGMENT_FINAL) != 0;
    if (c->codec == CAPSEM_CODEC_DEFLATE && !final && !capsem_has_sync_tail(payload, h.comp_len)) {
        set_error(err, CAPSEM_E_SEGMENT, at, "the payload does not end on a sync flush");
        return CAPSEM_E_SEGMENT;
    }
    /* held + raw_len <= 16 MiB by the header bounds, so this reserve is bounded. */
    if (!reserve(c, (size_t)c->held + h.raw_len + 1)) {
        set_error(err, CAPSEM_E_NOMEM, at, "no memory for the block's raw bytes");
        return CAPSEM_E_NOMEM;
    }
    if (c->codec == CAPSEM_CODEC_DEFLATE && c->z_stale) {
        /* A sync-flushed segment starts byte-aligned on a deflate block boundary, so a reset
         * stream with the last 32 KiB as its dictionary decodes it as the running one would. */
        uInt dict = c->held < 32768u ? (uInt)c->held : 32768u;
        if (inflateReset(&c->z) != Z_OK || (dict && inflateSetDictionary(&c->z, c->raw + c->held - dict, dict) != Z_OK)) {
            set_error(err, CAPSEM_E_INFLATE, at, "zlib could not take the block's window");
            return CAPSEM_E_INFLATE;
        }
        c->z_stale = 0;
    }
    uint8_t *out = c->raw + c->held;
    uint64_t produced = 0, unconsumed = 0;
    int ended = 0;
    st = c->codec == CAPSEM_CODEC_DEFLATE
             ? inflate_deflate(c, payload, h.comp_len, out, h.raw_len, at, &produced, &ended, &unconsumed, err)
             : inflate_zstd(c, payload, h.comp_len, out, h.raw_len, at, &produced, &ended, &unconsumed, err);
    if (st != CAPSEM_OK) return st;
    c->segments_inflated++;
    if (unconsumed != 0 || produced != h.raw_len || ended != final) {
        char d[150];
        if (produced != h.raw_len) {
            snprintf(d, sizeof d, "the segment inflates to %s%llu bytes, its header says %u",
                     produced > h.raw_len ? "more than " : "", (unsigned long long)(produced > h.raw_len ? h.raw_len : produced),
                     h.raw_len);
        } else if (unconsumed) {
            snprintf(d, sizeof d, "%llu of its %u compressed bytes are left over", (unsigned long long)unconsumed,
                     h.comp_len);
        } else {
            snprintf(d, sizeof d, final ? "the FINAL segment does not end the stream"
                                        : "the stream ends in a segment that is not FINAL");
        }
        set_error(err, CAPSEM_E_INTEGRITY, at, d);
        return CAPSEM_E_INTEGRITY;
    }
    uint8_t digest[32];
    capsem_blake3_hash(out, h.raw_len, digest);
    if (memcmp(digest, h.hash, 32) != 0) {
        static const char hexd[] = "0123456789abcdef";
        char d[200] = "header says ";
        char *p = d + strlen(d);
        for (int i = 0; i < 32; i++) { *p++ = hexd[h.hash[i] >> 4]; *p++ = hexd[h.hash[i] & 15]; }
        memcpy(p, ", bytes hash to ", 16);
        p += 16;
        for (int i = 0; i < 32; i++) { *p++ = hexd[digest[i] >> 4]; *p++ = hexd[digest[i] & 15]; }
        *p = 0;
        set_error(err, CAPSEM_E_INTEGRITY, at, d);
        if (err) err->hash_mismatch = 1;
        return CAPSEM_E_INTEGRITY;
    }
    c->held += h.raw_len;
    c->next_segment = payload_at + h.comp_len;
    c->finished = final;
    return CAPSEM_OK;
}

static capsem_status reach(capsem_cursor *c, capsem_inflater *fast, const uint8_t *base, uint64_t size,
                           uint64_t block_offset, uint64_t end, capsem_error *err) {
    if (err) err->raw_done = 0;
    if (end > CAPSEM_MAX_BLOCK_RAW_BYTES) {
        set_error(err, CAPSEM_E_RANGE, block_offset, NULL);
        return CAPSEM_E_RANGE;
    }
    if (!c->active || c->block_offset != block_offset) {
        capsem_status st = start_block(c, base, size, block_offset, err);
        if (st != CAPSEM_OK) {
            capsem_cursor_discard(c);
            return st;
        }
    }
    if (fast && c->codec == CAPSEM_CODEC_DEFLATE && !c->finished && c->held < end) {
        capsem_inflate_end got;
        if (capsem_inflate_segments(fast, base, size, c->next_segment, c->held, end, &c->raw, &c->raw_cap, NULL, NULL, 1,
                                    &got)) {
            c->held = got.held;
            c->next_segment = got.next;
            c->finished = got.final;
            c->segments_inflated += got.segments;
            c->z_stale = 1;
        }
    }
    while (c->held < end) {
        if (c->finished) {
            set_error(err, CAPSEM_E_RANGE, block_offset, NULL);
            if (err) err->raw_done = c->held;
            return CAPSEM_E_RANGE;
        }
        if (err) err->raw_done = c->held;
        capsem_status st = next_segment(c, base, size, err);
        if (st != CAPSEM_OK && err) err->raw_done = c->held;
        if (st == CAPSEM_E_TRUNCATED) return st;
        if (st != CAPSEM_OK) {
            capsem_cursor_discard(c);
            return st;
        }
    }
    return CAPSEM_OK;
}

void capsem_segment_table_truncate(capsem_segment_table *t, size_t n) {
    if (n < t->n) t->n = n;
}

void capsem_segment_table_free(capsem_segment_table *t) {
    free(t->refs);
    t->refs = NULL;
    t->n = t->cap = 0;
}

static int table_append(capsem_segment_table *t, uint64_t at, const capsem_segment_header *h, uint8_t codec) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        capsem_segment_ref *p = realloc(t->refs, cap * sizeof *p);
        if (!p) return 0;
        t->refs = p;
        t->cap = cap;
    }
    t->refs[t->n++] = (capsem_segment_ref){at, h->raw_len, h->comp_len, h->flags, codec, 0};
    return 1;
}

capsem_status capsem_walk_extent(const uint8_t *base, uint64_t size, uint64_t block_offset, uint64_t disk_len,
                                 capsem_extent *out, capsem_error *err, capsem_segment_table *table) {
    memset(out, 0, sizeof *out);
    uint8_t codec = 0;
    capsem_status st = block_header(base, size, block_offset, &codec, err);
    if (st != CAPSEM_OK) return st;
    out->codec = codec;
    if (disk_len < CAPSEM_BLOCK_HEADER_BYTES + CAPSEM_SEGMENT_HEADER_BYTES) {
        set_error(err, CAPSEM_E_SEGMENT, block_offset + CAPSEM_BLOCK_HEADER_BYTES,
                  "the extent ends before its first segment header does");
        return CAPSEM_E_SEGMENT;
    }
    if (disk_len > UINT64_MAX - block_offset) {
        /* A segment error names a segment: the first one, which the extent cannot hold. */
        set_error(err, CAPSEM_E_SEGMENT, block_offset + CAPSEM_BLOCK_HEADER_BYTES, "the extent's length overflows");
        return CAPSEM_E_SEGMENT;
    }
    uint64_t end = block_offset + disk_len;
    uint64_t at = block_offset + CAPSEM_BLOCK_HEADER_BYTES;
    uint64_t raw = 0;
    while (at < end) {
        if (out->final) {
            set_error(err, CAPSEM_E_SEGMENT, at, "a segment follows the FINAL one");
            return CAPSEM_E_SEGMENT;
        }
        if (end - at < CAPSEM_SEGMENT_HEADER_BYTES) {
            set_error(err, CAPSEM_E_SEGMENT, at, "the extent ends inside a segment header");
            return CAPSEM_E_SEGMENT;
        }
        if (at > size || size - at < CAPSEM_SEGMENT_HEADER_BYTES) {
            set_error(err, CAPSEM_E_TRUNCATED, block_offset, NULL);
            return CAPSEM_E_TRUNCATED;
        }
        capsem_segment_header h;
        if (capsem_parse_segment_header(base + at, CAPSEM_SEGMENT_HEADER_BYTES, (uint32_t)raw, &h) != CAPSEM_OK) {
            char d[120];
            snprintf(d, sizeof d, "flags=%#x raw_start=%u raw_len=%u comp_len=%u, expected raw_start %llu",
                     base[at + 4], capsem_le32(base + at + 8), capsem_le32(base + at + 12),
                     capsem_le32(base + at + 16), (unsigned long long)raw);
            set_error(err, CAPSEM_E_SEGMENT, at, d);
            return CAPSEM_E_SEGMENT;
        }
        uint64_t payload_at = at + CAPSEM_SEGMENT_HEADER_BYTES;
        if (end - payload_at < h.comp_len) {
            set_error(err, CAPSEM_E_SEGMENT, at, "the extent ends inside this segment's payload");
            return CAPSEM_E_SEGMENT;
        }
        if (size - payload_at < h.comp_len) {
            set_error(err, CAPSEM_E_TRUNCATED, block_offset, NULL);
            return CAPSEM_E_TRUNCATED;
        }
        int final = (h.flags & CAPSEM_SEGMENT_FINAL) != 0;
        if (codec == CAPSEM_CODEC_DEFLATE && !final && !capsem_has_sync_tail(base + payload_at, h.comp_len)) {
            set_error(err, CAPSEM_E_SEGMENT, at, "the payload does not end on a sync flush");
            return CAPSEM_E_SEGMENT;
        }
        if (h.raw_len == 0 &&
            (memcmp(h.hash, EMPTY_HASH, 32) != 0 ||
             (codec == CAPSEM_CODEC_DEFLATE && final &&
              capsem_inflate_empty_final(base + payload_at, h.comp_len) == 0)) &&
            out->empty_faults++ == 0) {
            out->empty_fault_at = at;
        }
        if (table && !table_append(table, at, &h, codec)) {
            set_error(err, CAPSEM_E_NOMEM, block_offset, NULL);
            return CAPSEM_E_NOMEM;
        }
        raw += h.raw_len;
        out->segments++;
        out->final = final;
        at = payload_at + h.comp_len;
    }
    out->raw_len = raw;
    return CAPSEM_OK;
}

capsem_status capsem_cursor_reach(capsem_cursor *c, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                  uint64_t end, capsem_error *err) {
    return reach(c, NULL, base, size, block_offset, end, err);
}

capsem_status capsem_cursor_reach_with(capsem_cursor *c, capsem_inflater *fast, const uint8_t *base, uint64_t size,
                                       uint64_t block_offset, uint64_t end, capsem_error *err) {
    return reach(c, fast, base, size, block_offset, end, err);
}
