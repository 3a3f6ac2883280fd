/* A deflate block's segments, one libdeflate call each (about three times zlib's streaming
 * inflate here), with the streaming cursor's per-segment checks: exactly raw_len bytes out,
 * every compressed byte consumed, the stream ended iff FINAL; then every segment hash.
 *
 * libdeflate has no preset dictionary, but a raw-deflate stream may begin with a stored
 * block, so a segment after raw byte 0 is inflated behind a non-final stored block holding
 * the window (the last min(32 KiB, raw_start) raw bytes), written back over themselves in
 * the raw buffer. A non-final payload gets a final stored block of END_DATA random bytes
 * appended, which must come out as they went in after exactly raw_len bytes: the whole input
 * is consumed with a stream end and those bytes last only when the payload itself ends
 * byte-aligned at a block boundary before any final block (a crafted Huffman block running
 * on into a known tail could decode it as its own data; random bytes it cannot), which is
 * exactly the state the cursor's inflater must be left in for the next segment to decode
 * the same way. libdeflate also decodes a few constructs zlib refuses (symbols deflate leaves
 * undefined, more codes than zlib allows), so each input it decoded is then walked under
 * zlib's rules (archive_deflate_rules.c) and refused unless they hold (unless the walk's
 * table says they were found to hold already, archive_rules_ahead.c). So success here means
 * the cursor reads the same bytes, and failure that the cursor decides. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h> /* getentropy: glibc >= 2.25, macOS >= 10.12, the BSDs */

#include <libdeflate.h>

#include "archive_deflate_rules.h"
#include "archive_inflate.h"
#include "big_alloc.h"
#include "blake3.h"

/* The deflate window: the raw bytes a segment's matches may reach back into. */
#define DICT_MAX 32768u
/* A stored block header in a byte-aligned position: BFINAL/BTYPE byte, LEN, NLEN. */
#define STORED_HEAD 5u
#define END_DATA CAPSEM_INFLATE_END_DATA

capsem_inflater *capsem_inflater_new(void) {
    capsem_inflater *f = calloc(1, sizeof *f);
    if (f && getentropy(f->end_data, END_DATA) != 0) {
        free(f);
        return NULL;
    }
    return f;
}

void capsem_inflater_clear(capsem_inflater *f) {
    if (!f) return;
    if (f->ld) libdeflate_free_decompressor(f->ld);
    capsem_big_free(f->comp, f->comp_cap);
    f->ld = NULL;
    f->comp = NULL;
    f->comp_cap = 0;
}

void capsem_inflater_free(capsem_inflater *f) {
    capsem_inflater_clear(f);
    free(f);
}

/* Buffers grow by at least a quarter (a block of many segments grows a few times, not once
 * a segment) but to little more than they need, in 256 KiB steps and never past what one
 * block can need (16 MiB raw, a segment's window and framing on top): the reader's block
 * cache counts capacity against its budget, so a buffer doubled past its block would hold
 * fewer blocks. Large buffers are mapped (big_alloc), so growing one moves no bytes. */
#define GROW_STEP ((size_t)256 << 10)
#define GROW_LIMIT ((size_t)CAPSEM_MAX_BLOCK_RAW_BYTES + GROW_STEP)

int capsem_inflate_grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap + *cap / 4;
    if (c < need) c = need;
    c = (c + GROW_STEP - 1) / GROW_STEP * GROW_STEP;
    if (c > GROW_LIMIT && need <= GROW_LIMIT) c = GROW_LIMIT;
    uint8_t *p = capsem_big_realloc(*buf, *cap, c);
    if (!p) return 0;
    *buf = p;
    *cap = c;
    return 1;
}

/* Compares the hashes of the last nseg segments inflated (their raw slices of raw). */
static int hashes_match(capsem_inflater *f, const uint8_t *raw, size_t nseg) {
    capsem_blake3_hash_many(raw, f->seg_start, f->seg_len, nseg, f->seg_out);
    for (size_t k = 0; k < nseg; k++) {
        if (memcmp(f->seg_out + 32 * k, f->seg_hash[k], 32) != 0) return 0;
    }
    return 1;
}

int capsem_inflate_segments(capsem_inflater *f, const uint8_t *base, uint64_t size, uint64_t at, uint64_t held,
                            uint64_t need, uint8_t **raw, size_t *raw_cap, const capsem_segment_ref *ref,
                            const capsem_segment_ref *ref_end, int hashes, capsem_inflate_end *out) {
    /* BFINAL 1, BTYPE 00 (stored), LEN = END_DATA, NLEN = ~LEN. */
    static const uint8_t end_head[STORED_HEAD] = {0x01, END_DATA, 0x00, (uint8_t)~END_DATA, 0xFF};
    if (!f->ld) {
        f->ld = libdeflate_alloc_decompressor();
        if (!f->ld) return 0;
    }
    size_t nseg = 0;
    uint64_t segments = 0;
    int final = 0;
    while (held < need && !final) {
        capsem_segment_header h;
        int zlib_ok = 0; /* zlib's rules already walked over this payload (archive_rules_ahead.h) */
        if (ref) {
            if (ref == ref_end || ref->at != at) return 0;
            zlib_ok = ref->zlib_ok;
            h.raw_len = ref->raw_len;
            h.comp_len = ref->comp_len;
            h.flags = ref->flags;
            ref++;
        }
        if (at > size || size - at < CAPSEM_SEGMENT_HEADER_BYTES) return 0;
        if (!ref && capsem_parse_segment_header(base + at, CAPSEM_SEGMENT_HEADER_BYTES, (uint32_t)held, &h) != CAPSEM_OK)
            return 0;
        uint64_t payload_at = at + CAPSEM_SEGMENT_HEADER_BYTES;
        if (size - payload_at < h.comp_len) return 0;
        const uint8_t *payload = base + payload_at;
        final = (h.flags & CAPSEM_SEGMENT_FINAL) != 0;
        /* The walk checked every non-final payload's sync tail. */
        if (!ref && !final && !capsem_has_sync_tail(payload, h.comp_len)) return 0;
        /* held + raw_len <= 16 MiB by the header bounds; the end data lands after raw_len. */
        size_t end = final ? 0 : END_DATA;
        if (!capsem_inflate_grow(raw, raw_cap, held + h.raw_len + END_DATA)) return 0;
        size_t dict = held < DICT_MAX ? (size_t)held : DICT_MAX;
        const uint8_t *in = payload;
        size_t in_len = h.comp_len;
        if (dict || !final) {
            /* comp_len <= raw_len + 64 KiB <= 16 MiB + 64 KiB, so at most 5 + 32 KiB + that + 21. */
            if (!capsem_inflate_grow(&f->comp, &f->comp_cap, STORED_HEAD + dict + h.comp_len + STORED_HEAD + END_DATA)) return 0;
            size_t n = 0;
            if (dict) {
                f->comp[0] = 0x00; /* BFINAL 0, BTYPE 00 (stored), then LEN and NLEN little-endian */
                f->comp[1] = (uint8_t)dict;
                f->comp[2] = (uint8_t)(dict >> 8);
                f->comp[3] = (uint8_t)~dict;
                f->comp[4] = (uint8_t)(~dict >> 8);
                memcpy(f->comp + STORED_HEAD, *raw + held - dict, dict);
                n = STORED_HEAD + dict;
            }
            memcpy(f->comp + n, payload, h.comp_len);
            n += h.comp_len;
            if (!final) {
                memcpy(f->comp + n, end_head, STORED_HEAD);
                memcpy(f->comp + n + STORED_HEAD, f->end_data, END_DATA);
                n += STORED_HEAD + END_DATA;
            }
            in = f->comp;
            in_len = n;
        }
        /* A stream that stops early (a final block inside a non-final payload) leaves input
         * over; one that runs past its raw_len does not fit the output. */
        size_t in_used = 0, out_used = 0;
        enum libdeflate_result r = libdeflate_deflate_decompress_ex(f->ld, in, in_len, *raw + held - dict,
                                                                    dict + h.raw_len + end, &in_used, &out_used);
        if (r != LIBDEFLATE_SUCCESS || in_used != in_len || out_used != dict + h.raw_len + end) return 0;
        if (end && memcmp(*raw + held + h.raw_len, f->end_data, END_DATA) != 0) return 0;
        if (!zlib_ok && !capsem_deflate_zlib_accepts(in, in_len)) return 0;
        /* Segments verified before (hashes 0) are inflated again, not hashed again. */
        if (hashes) {
            if (nseg == CAPSEM_INFLATE_MAX_SEGMENTS) {
                if (!hashes_match(f, *raw, nseg)) return 0;
                nseg = 0;
            }
            f->seg_start[nseg] = held;
            f->seg_len[nseg] = h.raw_len;
            f->seg_hash[nseg] = base + at + 20;
            nseg++;
        }
        segments++;
        held += h.raw_len;
        at = payload_at + h.comp_len;
    }
    if (nseg && !hashes_match(f, *raw, nseg)) return 0;
    out->held = held;
    out->next = at;
    out->final = final;
    out->segments = segments;
    return 1;
}

/* capsem_inflate_empty_final's decompressor: one per thread (the extent walk runs on the
 * caller's), made on first use and freed when the thread ends. */
static pthread_key_t empty_key;
static pthread_once_t empty_once = PTHREAD_ONCE_INIT;
static int empty_key_made;

static void empty_free(void *d) { libdeflate_free_decompressor(d); }

static void empty_init(void) { empty_key_made = pthread_key_create(&empty_key, empty_free) == 0; }

int capsem_inflate_empty_final(const uint8_t *in, size_t len) {
    pthread_once(&empty_once, empty_init);
    if (!empty_key_made) return -1;
    struct libdeflate_decompressor *d = pthread_getspecific(empty_key);
    if (!d) {
        d = libdeflate_alloc_decompressor();
        if (!d) return -1;
        if (pthread_setspecific(empty_key, d) != 0) {
            libdeflate_free_decompressor(d);
            return -1;
        }
    }
    size_t used_in = 0, used_out = 0;
    uint8_t none[1];
    enum libdeflate_result r = libdeflate_deflate_decompress_ex(d, in, len, none, 0, &used_in, &used_out);
    return r == LIBDEFLATE_SUCCESS && used_in == len && used_out == 0 && capsem_deflate_zlib_accepts(in, len);
}
