/* A deflate block's segments inflated with libdeflate, one call per segment, each behind its
 * window (see archive_inflate.c). Shared by the verify kernel and the reader's cursor: both
 * try it first and fall back to the streaming cursor (zlib), which names a failing segment. */
#ifndef CAPSEM_ARCHIVE_INFLATE_H
#define CAPSEM_ARCHIVE_INFLATE_H

#include <stddef.h>
#include <stdint.h>

#include "archive_reader.h"

/* Raw bytes in the final stored block appended to a non-final payload; a raw buffer needs
 * this much room past the last segment's raw bytes. */
#define CAPSEM_INFLATE_END_DATA 16u
/* Segment hashes checked together (hash_many spreads short segments over SIMD lanes). */
#define CAPSEM_INFLATE_MAX_SEGMENTS 4096

struct libdeflate_decompressor;

typedef struct capsem_inflater_s {
    struct libdeflate_decompressor *ld;
    uint8_t *comp; /* window + payload + end block of one segment */
    size_t comp_cap;
    /* What the stored block ending a non-final segment's input holds: random, chosen by
     * the owner, so no payload can be written to decode it as its own data. */
    uint8_t end_data[CAPSEM_INFLATE_END_DATA];
    uint64_t seg_start[CAPSEM_INFLATE_MAX_SEGMENTS];
    uint64_t seg_len[CAPSEM_INFLATE_MAX_SEGMENTS];
    const uint8_t *seg_hash[CAPSEM_INFLATE_MAX_SEGMENTS];
    uint8_t seg_out[CAPSEM_INFLATE_MAX_SEGMENTS * 32];
} capsem_inflater;

/* Grow *buf (of *cap bytes, from big_alloc) to hold `need` bytes: by at least a quarter, in
 * 256 KiB steps, never past one block's need when `need` is within it. 0 when out of memory. */
int capsem_inflate_grow(uint8_t **buf, size_t *cap, size_t need);

/* A zeroed inflater with fresh random end data; NULL when no memory or no entropy. */
capsem_inflater *capsem_inflater_new(void);
void capsem_inflater_free(capsem_inflater *f);
/* Release what the inflater allocated lazily (an inflater inside another struct). */
void capsem_inflater_clear(capsem_inflater *f);

/* What capsem_inflate_segments read: raw bytes held, the file offset after the last
 * segment, whether that segment was FINAL, and how many segments it inflated. */
typedef struct {
    uint64_t held;
    uint64_t next;
    int final;
    uint64_t segments;
} capsem_inflate_end;

/* The segments of a deflate block from file offset `at` (a segment header), whose raw bytes
 * [0, held) are already in *raw, inflated until `need` raw bytes are held or a FINAL segment
 * is read. *raw grows (realloc; *raw_cap its size) to at most held + 16 MiB + END_DATA.
 * `ref`..`ref_end`: the walk's segment table for this block from `at` on (headers taken from
 * it, not parsed), or NULL. 1 on success with *out filled: every segment checked as the
 * streaming cursor checks it, its hash included unless `hashes` is 0 (segments this reader
 * verified before: archive_verified.h). 0 on any failure (nothing in *out; the raw bytes past
 * held may have been overwritten): the caller takes the streaming cursor. */
int capsem_inflate_segments(capsem_inflater *f, const uint8_t *base, uint64_t size, uint64_t at, uint64_t held,
                            uint64_t need, uint8_t **raw, size_t *raw_cap, const capsem_segment_ref *ref,
                            const capsem_segment_ref *ref_end, int hashes, capsem_inflate_end *out);

/* Whether a payload that must hold nothing and end its block's stream (an empty FINAL
 * deflate segment's) does: a complete raw-deflate stream of exactly `len` bytes, through its
 * final block, that zlib accepts and that yields no byte. No body's span reaches such a
 * segment, so no inflate of the kernel's ever reads it: the extent walk asks this instead.
 * 1 when it does, 0 when not, -1 when it could not be told (no memory). */
int capsem_inflate_empty_final(const uint8_t *in, size_t len);

#endif
