/* The verify-bodies kernel.
 *
 * Work is split by block: the bodies of one block (a run of the archive-ordered index) are
 * verified by one worker with its own cursor, so each segment is inflated once. A block is
 * inflated only as far as its last referenced span needs, as Capsem's doctor does. A block
 * whose committed extent ends with a FINAL segment may instead be inflated in one libdeflate
 * call (its segments' payloads joined are one raw-deflate stream); every segment hash is
 * then checked on its raw slice, and any failure falls back to the streaming cursor, which
 * names the exact failing segment. Outcomes are written per body into caller arrays at
 * fixed indices, so results do not depend on the number of threads. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include <libdeflate.h>

#include "archive_verify.h"
#include "blake3.h"

#define HASH_BATCH 1024
/* Bodies per batch: every row naming a span hashed in the batch (rows share spans when
 * the writer deduplicated their bodies). */
#define MEMBER_BATCH (4 * HASH_BATCH)
/* The one-call path copies a block's payloads into one buffer; beyond these it streams. */
#define FAST_MAX_COMP (32u << 20)
#define FAST_MAX_SEGMENTS 4096

/* Workers sit side by side in one array: each starts on its own cache line, so one
 * worker's writes to its batch never invalidate the line holding its neighbour's fields. */
typedef struct {
    _Alignas(64) capsem_verify_job *job;
    capsem_cursor *cursor;
    struct libdeflate_decompressor *ld;
    uint8_t *comp;
    size_t comp_cap;
    uint8_t *raw;
    size_t raw_cap;
    /* The distinct spans of the batch, hashed once each ... */
    uint64_t offs[HASH_BATCH];
    uint64_t lens[HASH_BATCH];
    uint8_t out[HASH_BATCH * 32];
    /* ... and the bodies naming them: body index, and which span. */
    size_t member[MEMBER_BATCH];
    uint32_t member_span[MEMBER_BATCH];
    uint64_t seg_start[FAST_MAX_SEGMENTS];
    uint64_t seg_len[FAST_MAX_SEGMENTS];
    const uint8_t *seg_hash[FAST_MAX_SEGMENTS];
    uint8_t seg_out[FAST_MAX_SEGMENTS * 32];
} worker;

struct capsem_verify_job {
    capsem_verify_spec spec;
    size_t nruns;
    size_t *runs; /* nruns + 1 start indices into the bodies */
    atomic_size_t next_run;
    atomic_uint_fast64_t bytes_done;
    atomic_uint_fast64_t bodies_done;
    atomic_int nomem;
    atomic_int stop;
    int nthreads;
    pthread_t *tids;
    worker *workers;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running;
    capsem_error *errors;
    size_t nerrors, errors_cap;
};

static int grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : (1u << 20);
    while (c < need) c *= 2;
    uint8_t *p = realloc(*buf, c);
    if (!p) return 0;
    *buf = p;
    *cap = c;
    return 1;
}

static int32_t record_error(capsem_verify_job *job, const capsem_error *e) {
    pthread_mutex_lock(&job->lock);
    int32_t at = -1;
    if (job->nerrors == job->errors_cap) {
        size_t cap = job->errors_cap ? job->errors_cap * 2 : 16;
        capsem_error *p = realloc(job->errors, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&job->lock);
            atomic_store(&job->nomem, 1);
            return -1;
        }
        job->errors = p;
        job->errors_cap = cap;
    }
    if (job->nerrors < INT32_MAX) {
        job->errors[job->nerrors] = *e;
        at = (int32_t)job->nerrors++;
    }
    pthread_mutex_unlock(&job->lock);
    return at;
}

static size_t find_block(const capsem_verify_spec *s, int64_t off) {
    size_t lo = 0, hi = s->nblocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->blk_offset[mid] < off) lo = mid + 1;
        else hi = mid;
    }
    return (lo < s->nblocks && s->blk_offset[lo] == off) ? lo : (size_t)-1;
}

/* One libdeflate call over a closed block. Returns the raw length it holds, or -1 when the
 * block must take the streaming path (not closed within its extent, too large, or any
 * check failed: the streaming path then names the failure). */
static int64_t inflate_whole(worker *w, uint64_t blk, uint64_t disk_len) {
    const capsem_verify_spec *s = &w->job->spec;
    capsem_extent ext;
    capsem_error e;
    if (capsem_walk_extent(s->base, s->size, blk, disk_len, &ext, &e) != CAPSEM_OK) return -1;
    if (ext.codec != CAPSEM_CODEC_DEFLATE || !ext.final || ext.segments > FAST_MAX_SEGMENTS) return -1;
    /* The walk bounded every header and payload inside [blk, blk + disk_len) <= size. */
    uint64_t at = blk + CAPSEM_BLOCK_HEADER_BYTES, comp_total = 0;
    size_t nseg = 0;
    /* One segment: its payload is the whole stream, read in place. More: the payloads are
     * joined (their headers sit between them in the file). */
    const uint8_t *stream = ext.segments == 1 ? s->base + at + CAPSEM_SEGMENT_HEADER_BYTES : NULL;
    while (nseg < ext.segments) {
        const uint8_t *h = s->base + at;
        uint32_t raw_start = capsem_le32(h + 8), raw_len = capsem_le32(h + 12), comp_len = capsem_le32(h + 16);
        if (comp_total + comp_len > FAST_MAX_COMP) return -1;
        if (!stream) {
            if (!grow(&w->comp, &w->comp_cap, comp_total + comp_len + 1)) return -1;
            memcpy(w->comp + comp_total, h + CAPSEM_SEGMENT_HEADER_BYTES, comp_len);
        }
        comp_total += comp_len;
        w->seg_start[nseg] = raw_start;
        w->seg_len[nseg] = raw_len;
        w->seg_hash[nseg] = h + 20;
        nseg++;
        at += CAPSEM_SEGMENT_HEADER_BYTES + comp_len;
    }
    if (!grow(&w->raw, &w->raw_cap, ext.raw_len + 1)) return -1;
    if (!w->ld) {
        w->ld = libdeflate_alloc_decompressor();
        if (!w->ld) return -1;
    }
    size_t in_used = 0, out_used = 0;
    enum libdeflate_result r = libdeflate_deflate_decompress_ex(w->ld, stream ? stream : w->comp, comp_total, w->raw,
                                                                ext.raw_len, &in_used, &out_used);
    if (r != LIBDEFLATE_SUCCESS || in_used != comp_total || out_used != ext.raw_len) return -1;
    capsem_blake3_hash_many(w->raw, w->seg_start, w->seg_len, nseg, w->seg_out);
    for (size_t k = 0; k < nseg; k++) {
        if (memcmp(w->seg_out + 32 * k, w->seg_hash[k], 32) != 0) return -1;
    }
    return (int64_t)ext.raw_len;
}

/* Hashes the batch's distinct spans, then compares every member body's index digest with
 * its span's: same bytes, same digest, so a span named by several rows is hashed once and
 * each row's own digest is still compared. */
static void hash_batch(worker *w, const uint8_t *raw, size_t spans, size_t members) {
    const capsem_verify_spec *s = &w->job->spec;
    capsem_blake3_hash_many(raw, w->offs, w->lens, spans, w->out);
    for (size_t m = 0; m < members; m++) {
        size_t i = w->member[m];
        const uint8_t *got = w->out + 32 * (size_t)w->member_span[m];
        if (memcmp(got, s->digest + 32 * i, 32) != 0) {
            s->status[i] = CAPSEM_V_BODY_HASH;
            memcpy(s->got + 32 * i, got, 32);
        }
    }
}

/* Page-aligned [a, b) covering [from, to) within the map, for an madvise advice. */
static void advise(const capsem_verify_spec *s, uint64_t from, uint64_t to, int advice, int inner) {
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    if (to > s->size) to = s->size;
    uint64_t a = inner ? (from + page - 1) / page * page : from / page * page;
    uint64_t b = inner ? to / page * page : (to + page - 1) / page * page;
    if (b > a) madvise((void *)(s->base + a), (size_t)(b - a), advice);
}

static void will_need(const capsem_verify_spec *s, uint64_t from, uint64_t to) {
    if (from < to) advise(s, from, to, MADV_WILLNEED, 0);
}

/* Unmap the whole pages of [from, to) from this process once a block is done: the page cache
 * keeps them, but the process's resident size stays flat however large the archive. */
static void drop_pages(const capsem_verify_spec *s, uint64_t from, uint64_t to) {
    /* Only pages wholly inside: a page shared with the next block may be in use by another
     * worker (dropping it would only cost a re-fault, but there is no need). */
    if (from < to) advise(s, from, to, MADV_DONTNEED, 1);
}

static void verify_run(worker *w, size_t lo, size_t hi) {
    capsem_verify_job *job = w->job;
    const capsem_verify_spec *s = &job->spec;
    uint64_t blk = (uint64_t)s->block_offset[lo];
    uint64_t max_end = 0, bytes = 0;
    for (size_t i = lo; i < hi; i++) {
        int64_t off = s->body_offset[i], len = s->body_len[i];
        s->err_index[i] = -1;
        if (off < 0 || len < 0 || off > (int64_t)CAPSEM_MAX_BLOCK_RAW_BYTES ||
            len > (int64_t)CAPSEM_MAX_BLOCK_RAW_BYTES - off) {
            s->status[i] = CAPSEM_V_SPAN;
            continue;
        }
        s->status[i] = CAPSEM_V_OK;
        if ((uint64_t)(off + len) > max_end) max_end = (uint64_t)(off + len);
        bytes += (uint64_t)len;
    }

    const uint8_t *raw = NULL;
    int64_t whole = -1;
    uint64_t whole_end = 0;
    size_t b = s->block_offset[lo] >= 0 ? find_block(s, s->block_offset[lo]) : (size_t)-1;
    if (b != (size_t)-1 && s->blk_disk_len[b] > 0) {
        /* The committed extent is read through once: ask for all of it now rather than page
         * by page as the inflater reaches it (a no-op when it is already cached). */
        will_need(s, blk, blk + (uint64_t)s->blk_disk_len[b]);
        if (s->use_libdeflate && max_end > 0) {
            whole = inflate_whole(w, blk, (uint64_t)s->blk_disk_len[b]);
            whole_end = blk + (uint64_t)s->blk_disk_len[b];
        }
    }

    int failed = 0;
    uint64_t fail_at = 0;
    capsem_status fail_status = CAPSEM_OK;
    int32_t fail_err = -1;
    if (whole >= 0) {
        raw = w->raw;
        /* A closed block holds exactly `whole` raw bytes: a span past it is out of range,
         * as the streaming cursor reports once it meets the FINAL segment. */
        if ((uint64_t)whole < max_end) {
            capsem_error e;
            memset(&e, 0, sizeof e);
            e.status = CAPSEM_E_RANGE;
            e.at = blk;
            e.raw_done = (uint64_t)whole;
            failed = 1;
            fail_at = (uint64_t)whole;
            fail_status = CAPSEM_E_RANGE;
            fail_err = record_error(job, &e);
        }
    } else {
        capsem_cursor_discard(w->cursor);
        for (size_t i = lo; i < hi && !failed; i++) {
            if (s->status[i] != CAPSEM_V_OK) continue;
            uint64_t end = (uint64_t)(s->body_offset[i] + s->body_len[i]);
            if (capsem_cursor_active(w->cursor) && end <= capsem_cursor_held(w->cursor)) continue;
            capsem_error e;
            memset(&e, 0, sizeof e);
            capsem_status st = capsem_cursor_reach(w->cursor, s->base, s->size, blk, end, &e);
            if (st == CAPSEM_E_NOMEM) {
                atomic_store(&job->nomem, 1);
                return;
            }
            if (st != CAPSEM_OK) {
                failed = 1;
                fail_at = e.raw_done;
                fail_status = st;
                fail_err = record_error(job, &e);
            }
        }
        /* Discarding keeps the buffer: the verified prefix before a failure stays readable. */
        raw = capsem_cursor_raw(w->cursor);
    }

    /* Rows in archive order: rows naming one span are adjacent (same offset, same length). */
    size_t spans = 0, members = 0;
    for (size_t i = lo; i < hi; i++) {
        if (s->status[i] != CAPSEM_V_OK) continue;
        uint64_t off = (uint64_t)s->body_offset[i], len = (uint64_t)s->body_len[i];
        if (failed && off + len > fail_at) {
            s->status[i] = (uint8_t)fail_status;
            s->err_index[i] = fail_err;
            continue;
        }
        if (!s->hash_ok[i]) {
            s->status[i] = CAPSEM_V_BAD_HASH_TEXT;
            continue;
        }
        int repeat = spans > 0 && w->offs[spans - 1] == off && w->lens[spans - 1] == len;
        if (!repeat) {
            if (spans == HASH_BATCH) {
                hash_batch(w, raw, spans, members);
                spans = members = 0;
            }
            w->offs[spans] = off;
            w->lens[spans] = len;
            spans++;
        }
        w->member[members] = i;
        w->member_span[members] = (uint32_t)(spans - 1);
        if (++members == MEMBER_BATCH) {
            hash_batch(w, raw, spans, members);
            spans = members = 0;
        }
    }
    if (members) hash_batch(w, raw, spans, members);
    drop_pages(s, blk, whole >= 0 ? whole_end : capsem_cursor_next_segment(w->cursor));
    atomic_fetch_add(&job->bytes_done, bytes);
    atomic_fetch_add(&job->bodies_done, hi - lo);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    capsem_verify_job *job = w->job;
    for (;;) {
        if (atomic_load(&job->nomem) || atomic_load(&job->stop)) break;
        size_t r = atomic_fetch_add(&job->next_run, 1);
        if (r >= job->nruns) break;
        verify_run(w, job->runs[r], job->runs[r + 1]);
    }
    pthread_mutex_lock(&job->lock);
    job->running--;
    pthread_cond_broadcast(&job->cond);
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

static void free_workers(capsem_verify_job *job) {
    if (!job->workers) return;
    for (int t = 0; t < job->nthreads; t++) {
        worker *w = &job->workers[t];
        capsem_cursor_free(w->cursor);
        if (w->ld) libdeflate_free_decompressor(w->ld);
        free(w->comp);
        free(w->raw);
    }
    free(job->workers);
    job->workers = NULL;
}

capsem_verify_job *capsem_verify_start(const capsem_verify_spec *spec) {
    capsem_verify_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->spec = *spec;
    /* Blocks are read in file order (by all workers together): read ahead generously. */
    advise(&job->spec, 0, spec->size, MADV_SEQUENTIAL, 0);
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->cond, NULL);
    size_t n = spec->nbodies, nruns = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || spec->block_offset[i] != spec->block_offset[i - 1]) nruns++;
    }
    job->runs = malloc((nruns + 1) * sizeof *job->runs);
    if (!job->runs) goto fail;
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || spec->block_offset[i] != spec->block_offset[i - 1]) job->runs[r++] = i;
    }
    job->runs[nruns] = n;
    job->nruns = nruns;

    int threads = spec->threads;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    if (threads > 256) threads = 256;
    if ((size_t)threads > nruns) threads = nruns ? (int)nruns : 1;
    job->nthreads = threads;
    job->workers = aligned_alloc(64, (size_t)threads * sizeof *job->workers);
    if (job->workers) memset(job->workers, 0, (size_t)threads * sizeof *job->workers);
    job->tids = calloc((size_t)threads, sizeof *job->tids);
    if (!job->workers || !job->tids) goto fail;
    for (int t = 0; t < threads; t++) {
        job->workers[t].job = job;
        job->workers[t].cursor = capsem_cursor_new();
        if (!job->workers[t].cursor) goto fail;
    }
    int started = 0;
    pthread_mutex_lock(&job->lock);
    for (int t = 0; t < threads; t++) {
        if (pthread_create(&job->tids[t], NULL, worker_main, &job->workers[t]) != 0) break;
        started++;
        job->running++;
    }
    pthread_mutex_unlock(&job->lock);
    if (started == 0) goto fail;
    job->nthreads = started;
    return job;
fail:
    free_workers(job);
    free(job->tids);
    free(job->runs);
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->cond);
    free(job);
    return NULL;
}

int capsem_verify_wait(capsem_verify_job *job, int timeout_ms, uint64_t *bytes_done, uint64_t *bodies_done) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&job->lock);
    while (job->running > 0) {
        if (pthread_cond_timedwait(&job->cond, &job->lock, &ts) == ETIMEDOUT) break;
    }
    int done = job->running == 0;
    pthread_mutex_unlock(&job->lock);
    if (bytes_done) *bytes_done = atomic_load(&job->bytes_done);
    if (bodies_done) *bodies_done = atomic_load(&job->bodies_done);
    return done;
}

int capsem_verify_finish(capsem_verify_job *job) {
    for (int t = 0; t < job->nthreads; t++) pthread_join(job->tids[t], NULL);
    return atomic_load(&job->nomem) ? -1 : 0;
}

void capsem_verify_cancel(capsem_verify_job *job) { atomic_store(&job->stop, 1); }

size_t capsem_verify_error_count(const capsem_verify_job *job) { return job->nerrors; }

const capsem_error *capsem_verify_error(const capsem_verify_job *job, size_t i) {
    return i < job->nerrors ? &job->errors[i] : NULL;
}

void capsem_verify_free(capsem_verify_job *job) {
    if (!job) return;
    free_workers(job);
    free(job->tids);
    free(job->runs);
    free(job->errors);
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->cond);
    free(job);
}
