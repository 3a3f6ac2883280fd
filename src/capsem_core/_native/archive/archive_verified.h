/* The segments a reader has verified, and the read of a span that lies wholly in them.
 *
 * Capsem's reader protocol checks two things for every body: each segment it inflates is
 * exactly its declared length and hashes to its header's BLAKE3, and the body's bytes hash
 * to the index row's body_hash. A segment verified once need not be hashed again for a later
 * body: the bytes a later read returns are still checked against the body hash. So a reader
 * remembers the segments it has verified (by file offset and exact 52 header bytes: a header
 * changed since is a different segment), and a random read whose span lies in remembered
 * segments inflates the block from its start only up to the span's end (zlib's stream stops
 * there), or, where the span ends late in its segments, inflates those whole with libdeflate
 * (about four times zlib's speed), in neither case hashing the segments again. Anything
 * unexpected, or a segment not remembered, answers "not here" and the caller takes the
 * block cursor, which verifies and names the failing segment as before. */
#ifndef CAPSEM_ARCHIVE_VERIFIED_H
#define CAPSEM_ARCHIVE_VERIFIED_H

#include <stddef.h>
#include <stdint.h>

#include "archive_inflate.h"

typedef struct capsem_verified capsem_verified;

/* Remembers at most what fits in max_bytes (64 bytes a segment; at least 64 segments); a
 * full table is emptied, not grown. NULL when out of memory. */
capsem_verified *capsem_verified_new(size_t max_bytes);
void capsem_verified_free(capsem_verified *v);
/* Forget every segment (after a read of remembered segments failed). */
void capsem_verified_clear(capsem_verified *v);
/* Segments remembered now. */
size_t capsem_verified_count(const capsem_verified *v);
/* Memory held: the table and the scratch buffer the reads inflate into. */
size_t capsem_verified_bytes(const capsem_verified *v);
/* Give the scratch buffer back (the next read maps a new one). */
void capsem_verified_release_buffer(capsem_verified *v);

/* Remember the segments of the deflate block at block_offset from its first up to file offset
 * `upto` (just past the last segment a cursor verified; capsem_cursor_next_segment). */
void capsem_verified_note(capsem_verified *v, const uint8_t *base, uint64_t size, uint64_t block_offset,
                          uint64_t upto);

/* The raw bytes [0, end) of the deflate block at block_offset, when every segment up to the
 * one holding byte end - 1 is remembered: a pointer into the scratch buffer (valid until the
 * next call), *segments the segments inflated. NULL otherwise, and on any failure. */
const uint8_t *capsem_verified_read(capsem_verified *v, capsem_inflater *fast, const uint8_t *base, uint64_t size,
                                    uint64_t block_offset, uint64_t end, uint64_t *segments);

#endif
