/* The block cursor of a session.bodies reader (Capsem's reader protocol, format version 2).
 *
 * A cursor holds one block: its offset, one inflate stream (zlib raw deflate or zstd), the
 * raw bytes inflated so far and the file offset of the next segment header. Bytes come from
 * a caller-owned view [base, base + size) of the file; the cursor never looks past size. */
#ifndef CAPSEM_ARCHIVE_READER_H
#define CAPSEM_ARCHIVE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "archive_format.h"

/* What went wrong, where: `at` is the block offset for block-level kinds and the segment's
 * file offset for segment-level ones (as in Capsem, whose texts say "block" for both). */
typedef struct {
    capsem_status status;
    uint64_t at;
    uint8_t codec;
    /* The segment's bytes hashed to something other than its header's digest. */
    uint8_t hash_mismatch;
    /* Raw bytes of the block the cursor held, all verified, when the error happened. */
    uint64_t raw_done;
    /* Detail for the message: the inflater's own words, or which check failed. */
    char detail[200];
} capsem_error;

typedef struct capsem_cursor capsem_cursor;

capsem_cursor *capsem_cursor_new(void);
void capsem_cursor_free(capsem_cursor *c);

/* Forget the open block (its inflater state is unknown after an error). */
void capsem_cursor_discard(capsem_cursor *c);

/* Make the cursor hold at least `end` raw bytes of the block at block_offset, starting a
 * new block (restarting the inflater) when the cursor is on another one. On success the
 * bytes are at capsem_cursor_raw(c)[0 .. held). Errors other than CAPSEM_E_TRUNCATED
 * discard the cursor. CAPSEM_E_TRUNCATED leaves the cursor as it was before the segment
 * that did not fit, so a caller whose view of a growing file was stale may widen the view
 * and call again. */
capsem_status capsem_cursor_reach(capsem_cursor *c, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                  uint64_t end, capsem_error *err);
/* capsem_cursor_reach, with a deflate block's segments tried with libdeflate first through
 * `fast` (NULL: the zlib stream only). The bytes held and every error are the same. */
struct capsem_inflater_s;
capsem_status capsem_cursor_reach_with(capsem_cursor *c, struct capsem_inflater_s *fast, const uint8_t *base,
                                       uint64_t size, uint64_t block_offset, uint64_t end, capsem_error *err);

const uint8_t *capsem_cursor_raw(const capsem_cursor *c);
uint64_t capsem_cursor_held(const capsem_cursor *c);
int capsem_cursor_active(const capsem_cursor *c);
uint64_t capsem_cursor_block(const capsem_cursor *c);
int capsem_cursor_finished(const capsem_cursor *c);
/* File offset just past the last segment the cursor read (kept after a discard). */
uint64_t capsem_cursor_next_segment(const capsem_cursor *c);
uint64_t capsem_cursor_blocks_inflated(const capsem_cursor *c);
/* Bytes the cursor's raw buffer holds allocated (what a cache of cursors counts). */
size_t capsem_cursor_capacity(const capsem_cursor *c);
uint64_t capsem_cursor_segments_inflated(const capsem_cursor *c);

/* Structure of a committed extent [block_offset, block_offset + disk_len), headers only:
 * every segment header bounded and chained, the extent ending exactly on a segment end,
 * nothing after a FINAL segment, non-final deflate payloads ending on a sync flush.
 * `empty_faults` counts the empty segments (raw_len 0) that are not what an empty segment
 * is, `empty_fault_at` the first one's offset: a hash other than BLAKE3 of no bytes, or a
 * FINAL deflate payload that is not a whole stream yielding nothing. No body reaches such a
 * segment, so no read fails on it; the check reports it, every other reader reads on. */
typedef struct {
    uint8_t codec;
    uint64_t raw_len;
    uint64_t segments;
    int final;
    uint64_t empty_faults;
    uint64_t empty_fault_at;
} capsem_extent;

/* The segment headers a walk parsed, kept so the verify kernel need not parse them again:
 * each segment's file offset and the header fields the kernel uses, its block's codec, and
 * whether zlib's rules were found to hold for its payload already (archive_rules_ahead.h:
 * 1 only there; the kernel walks them itself where it is 0). */
typedef struct {
    uint64_t at; /* file offset of the segment header */
    uint32_t raw_len;
    uint32_t comp_len;
    uint8_t flags;
    uint8_t codec;
    uint8_t zlib_ok;
} capsem_segment_ref;

typedef struct {
    capsem_segment_ref *refs;
    size_t n, cap;
} capsem_segment_table;

/* Drops every ref from `n` on (a walk that failed part-way leaves none of its block's). */
void capsem_segment_table_truncate(capsem_segment_table *t, size_t n);
void capsem_segment_table_free(capsem_segment_table *t);

/* `table` may be NULL; otherwise every segment walked is appended to it (CAPSEM_E_NOMEM
 * when it cannot grow). */
capsem_status capsem_walk_extent(const uint8_t *base, uint64_t size, uint64_t block_offset, uint64_t disk_len,
                                 capsem_extent *out, capsem_error *err, capsem_segment_table *table);

#endif
