/* Fingerprints of committed extents, for the verification record (--incremental): BLAKE3 of
 * an extent's on-disk bytes, and BLAKE3 of its segment headers' hashes in order, for many
 * extents of one map across a pthread pool. Nothing is inflated: proving a block unchanged
 * costs one hash of its compressed bytes. No Python objects. */
#ifndef CAPSEM_ARCHIVE_EXTENTS_H
#define CAPSEM_ARCHIVE_EXTENTS_H

#include <stddef.h>
#include <stdint.h>

/* Per-extent outcome. */
#define CAPSEM_EXTENT_HASHED 0u
#define CAPSEM_EXTENT_PAST_END 1u   /* [offset, offset + length) is not inside the map */
#define CAPSEM_EXTENT_SHRANK 2u     /* the file shrank under the map while it was hashed */
#define CAPSEM_EXTENT_UNCHAINED 3u  /* bytes hashed, but its segment headers do not chain to its end */
#define CAPSEM_EXTENT_SKIPPED 4u    /* cancelled before this extent was reached */

typedef struct capsem_extents_job capsem_extents_job;

typedef struct {
    const uint8_t *base; /* the archive map; nothing past size is read */
    uint64_t size;
    size_t n;
    const int64_t *offset; /* extent i: [offset[i], offset[i] + length[i]) */
    const int64_t *length;
    uint8_t *disk_hash;   /* n * 32: BLAKE3 of the extent's bytes */
    uint8_t *segments;    /* n * 32: BLAKE3 of the 32-byte hashes of its segment headers, in order */
    uint8_t *status;      /* n: CAPSEM_EXTENT_* */
    int threads;          /* 0: one per core */
} capsem_extents_spec;

/* Starts the workers (the calling thread hashes alone when no thread can start). NULL when
 * out of memory. */
capsem_extents_job *capsem_extents_start(const capsem_extents_spec *spec);
/* Waits up to timeout_ms; 1 when every extent is done. *bytes_done is read meanwhile. */
int capsem_extents_wait(capsem_extents_job *job, int timeout_ms, uint64_t *bytes_done);
/* Asks the workers to stop after the extent each is hashing (an interrupt). */
void capsem_extents_cancel(capsem_extents_job *job);
/* Joins the workers and frees the job. */
void capsem_extents_free(capsem_extents_job *job);

#endif
