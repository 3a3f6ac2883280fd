/* The verify-bodies kernel: every indexed body read back through its segments' hashes and
 * its own, in archive order, block by block across a pthread pool. No Python objects. */
#ifndef CAPSEM_ARCHIVE_VERIFY_H
#define CAPSEM_ARCHIVE_VERIFY_H

#include <pthread.h>
#include <stdint.h>

#include "archive_reader.h"

/* Per-body outcomes (CAPSEM_V_*) are in status.h, beside the archive statuses. */

typedef struct capsem_verify_job capsem_verify_job;

/* Working buffers a caller lends to run after run of the kernel (a bulk read in batches):
 * each worker takes one slot's block buffer, cursor and inflater buffers at start and gives
 * them back when the job is freed, so a batch does not map and fault a block's worth of
 * fresh pages per worker. One job at a time may borrow them. */
typedef struct capsem_verify_buffers capsem_verify_buffers;
capsem_verify_buffers *capsem_verify_buffers_new(void);
void capsem_verify_buffers_free(capsem_verify_buffers *b);

typedef struct {
    /* The archive bytes (a fixed map: verification never looks past size). */
    const uint8_t *base;
    uint64_t size;
    /* body_blocks, ordered by block_offset: each run's committed extent is read ahead. */
    size_t nblocks;
    const int64_t *blk_offset;
    const int64_t *blk_disk_len;
    /* event_body_blobs in archive order (block_offset, body_offset). */
    size_t nbodies;
    const int64_t *block_offset;
    const int64_t *body_offset;
    const int64_t *body_len;
    const uint8_t *digest;  /* nbodies * 32 */
    const uint8_t *hash_ok; /* nbodies */
    /* Outputs, nbodies each: outcome, index into the error list (-1 none), and the digest
     * the bytes hashed to (written only for body-hash mismatches). */
    uint8_t *status;
    int32_t *err_index;
    uint8_t *got;
    /* Optional (NULL: verify only): every body that verifies is copied to out + out_offset[i]
     * (nbodies offsets; the caller sized out so that each slot of body_len bytes fits), so a
     * bulk read is this same pass plus one copy per body. */
    uint8_t *out;
    const int64_t *out_offset;
    /* Optional instead of out (NULL: out and out_offset): body i's own destination, holding
     * body_len[i] bytes (Ledger.bodies: each body straight into the bytes object it becomes). */
    uint8_t *const *out_at;
    int threads;
    int use_libdeflate;
    /* The segment headers the archive check's walk already parsed and checked (chain, sync
     * tails, extent ends), or NULL to parse them here: block b's segments are
     * segs[seg_first[b] .. seg_first[b + 1]). */
    const capsem_segment_ref *segs;
    const int64_t *seg_first; /* nblocks + 1 */
    /* Buffers to borrow (NULL: the job allocates its own and frees them). */
    capsem_verify_buffers *lend;
} capsem_verify_spec;

/* Starts the workers. NULL when out of memory or no thread could start. */
capsem_verify_job *capsem_verify_start(const capsem_verify_spec *spec);
/* Waits up to timeout_ms; 1 when every worker has finished. Progress is read meanwhile. */
int capsem_verify_wait(capsem_verify_job *job, int timeout_ms, uint64_t *bytes_done, uint64_t *bodies_done);
/* Joins the workers. Returns 0, or -1 when a worker ran out of memory. The error list
 * stays owned by the job until capsem_verify_free. */
int capsem_verify_finish(capsem_verify_job *job);
/* Asks the workers to stop after their current block (an interrupt). */
void capsem_verify_cancel(capsem_verify_job *job);
size_t capsem_verify_error_count(const capsem_verify_job *job);
const capsem_error *capsem_verify_error(const capsem_verify_job *job, size_t i);
void capsem_verify_free(capsem_verify_job *job);

#endif
