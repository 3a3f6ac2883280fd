/* Many records, each compressed into a gzip member of its own (a WARC file's records: one
 * member per record, so a reader can seek to any of them), across a pthread pool.
 *
 * A record is three pieces laid end to end: its header bytes, its body (a span of a caller's
 * buffer, never copied by the caller) and a trailer shared by every record. Each worker owns
 * one libdeflate compressor and one assembly buffer; records are taken from an atomic
 * counter and each is compressed into its own slot of one output buffer (slots sized by
 * libdeflate_gzip_compress_bound), then the members are moved together in input order. Every
 * offset and length is checked against its buffer before anything is read. No Python
 * objects. */
#ifndef CAPSEM_WARC_GZIP_H
#define CAPSEM_WARC_GZIP_H

#include <stddef.h>
#include <stdint.h>

/* A record (header + body + trailer) larger than this is refused: far above any body the
 * archive can hold (16 MiB) with any header a caller should write. */
#define CAPSEM_GZIP_MAX_RECORD_BYTES ((uint64_t)256 << 20)
#define CAPSEM_GZIP_MAX_LEVEL 12
#define CAPSEM_GZIP_MAX_THREADS 256

/* What capsem_gzip_check and capsem_gzip_wait report. */
#define CAPSEM_GZIP_OK 0
#define CAPSEM_GZIP_E_HEADS 1     /* a header span is not inside the header bytes, or runs backwards */
#define CAPSEM_GZIP_E_BODY 2      /* a body span is not inside the body buffer */
#define CAPSEM_GZIP_E_RECORD 3    /* a record is larger than CAPSEM_GZIP_MAX_RECORD_BYTES */
#define CAPSEM_GZIP_E_OUT 4       /* the output buffer is smaller than the members may need */
#define CAPSEM_GZIP_E_NOMEM 5     /* a compressor or an assembly buffer could not be had */
#define CAPSEM_GZIP_E_BOUND 6     /* libdeflate did not fit a member in its bound (never expected) */
#define CAPSEM_GZIP_E_CANCELLED 7 /* stopped by capsem_gzip_cancel before every record was done */

typedef struct {
    size_t n;                     /* records */
    const uint8_t *heads;         /* every header, end to end */
    uint64_t heads_len;
    const int64_t *head_offsets;  /* n + 1: header i is heads[head_offsets[i], head_offsets[i + 1]) */
    const uint8_t *bodies;        /* the buffer the bodies lie in */
    uint64_t bodies_len;
    const int64_t *body_offsets;  /* n: body i is bodies[body_offsets[i], + body_lengths[i]) */
    const int64_t *body_lengths;
    const uint8_t *trailer;       /* appended to every record */
    uint64_t trailer_len;
    uint8_t *out;                 /* the members, end to end in input order, once done */
    uint64_t out_len;
    int64_t *sizes;               /* n: each member's size */
} capsem_gzip_spec;

/* The workers' compressors and assembly buffers, kept from batch to batch. */
typedef struct capsem_gzip_pool capsem_gzip_pool;
typedef struct capsem_gzip_job capsem_gzip_job;

/* A pool of `threads` workers (1..CAPSEM_GZIP_MAX_THREADS) compressing at `level` (0..12);
 * NULL when out of memory or either is outside its range. */
capsem_gzip_pool *capsem_gzip_pool_new(int level, int threads);
void capsem_gzip_pool_free(capsem_gzip_pool *pool);

/* CAPSEM_GZIP_OK when every span of `spec` lies in its buffer and every record is in bounds;
 * else the error, with the first record at fault in *at. *need: output bytes the members may
 * take (the sum of their gzip bounds), which spec->out_len must reach. */
int capsem_gzip_check(const capsem_gzip_spec *spec, uint64_t *need, size_t *at);

/* Starts compressing the records of a checked spec on the pool's workers (the pool is busy
 * until capsem_gzip_finish). NULL when out of memory. */
capsem_gzip_job *capsem_gzip_start(capsem_gzip_pool *pool, const capsem_gzip_spec *spec);
/* Waits up to timeout_ms; 1 when every worker is done. */
int capsem_gzip_wait(capsem_gzip_job *job, int timeout_ms);
/* Asks the workers to stop after the record each is compressing (an interrupt). */
void capsem_gzip_cancel(capsem_gzip_job *job);
/* Joins the workers; on success moves the members together in input order (*total: their
 * bytes) and returns CAPSEM_GZIP_OK, else the first error (with its record in *at). Frees
 * the job. */
int capsem_gzip_finish(capsem_gzip_job *job, uint64_t *total, size_t *at);

#endif
