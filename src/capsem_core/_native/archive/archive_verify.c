/* The verify-bodies kernel.
 *
 * Work is split by block: the bodies of one block (a run of the archive-ordered index) are
 * verified by one worker with its own cursor, so each segment is inflated once. A block is
 * inflated only as far as its last referenced span needs, as Capsem's doctor does. With
 * libdeflate each deflate segment is inflated by its own call with the streaming reader's
 * per-segment checks, and every segment hash is checked on its raw slice (archive_inflate.c);
 * any failure falls back to the streaming cursor (zlib / zstd), which names the exact failing
 * segment. Outcomes are written per body into caller arrays at fixed indices, so results do
 * not depend on the number of threads. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/random.h> /* getentropy: glibc >= 2.25, macOS >= 10.12, the BSDs */
#include <unistd.h>

#include <libdeflate.h>

#include "archive_file.h"
#include "archive_guard.h"
#include "archive_inflate.h"
#include "big_alloc.h"
#include "pool_wait.h"

#include "archive_verify.h"
#include "blake3.h"

#define HASH_BATCH 1024
/* Bodies per batch: every row naming a span hashed in the batch (rows share spans when
 * the writer deduplicated their bodies). */
#define MEMBER_BATCH (4 * HASH_BATCH)
#define END_DATA CAPSEM_INFLATE_END_DATA

/* Workers sit side by side in one array: each starts on its own cache line, so one
 * worker's writes to its batch never invalidate the line holding its neighbour's fields. */
typedef struct {
    _Alignas(64) capsem_verify_job *job;
    capsem_cursor *cursor;
    uint8_t *raw;
    size_t raw_cap;
    /* The distinct spans of the batch, hashed once each ... */
    uint64_t offs[HASH_BATCH];
    uint64_t lens[HASH_BATCH];
    uint8_t out[HASH_BATCH * 32];
    /* ... and the bodies naming them: body index, and which span. */
    size_t member[MEMBER_BATCH];
    uint32_t member_span[MEMBER_BATCH];
    capsem_inflater fast;
    /* cursor, raw and fast's buffers came from spec.lend and go back there. */
    int borrowed;
} worker;

struct capsem_verify_job {
    capsem_verify_spec spec;
    /* What the stored block ending a non-final segment's libdeflate input holds: drawn at
     * random per job, so no payload can be written to decode it as its own data. */
    uint8_t end_data[END_DATA];
    size_t nruns;
    size_t *runs; /* nruns + 1 start indices into the bodies */
    atomic_size_t next_run;
    atomic_uint_fast64_t bytes_done;
    atomic_uint_fast64_t bodies_done;
    atomic_int nomem;
    atomic_int stop;
    int nthreads;  /* threads started, each joined by capsem_verify_finish */
    int nworkers;  /* workers allocated (may exceed nthreads when a thread failed to start) */
    pthread_t *tids;
    worker *workers;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running;
    capsem_error *errors;
    size_t nerrors, errors_cap;
};

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

/* The block at blk inflated by capsem_inflate_segments until it holds `need` raw bytes or
 * its FINAL segment is read (the segments the streaming cursor would read); 0 on any failure
 * (the block then takes the cursor, which names the failing segment). With the walk's
 * segment table (spec.segs) the headers are taken from it, not parsed again; past the
 * table's end the block falls back. */
static int inflate_segments(worker *w, size_t b, uint64_t blk, uint64_t need, uint64_t *held_out,
                            uint64_t *next_out) {
    const capsem_verify_spec *s = &w->job->spec;
    uint8_t codec = 0;
    if (blk > s->size || s->size - blk < CAPSEM_BLOCK_HEADER_BYTES) return 0;
    if (capsem_parse_block_header(s->base + blk, CAPSEM_BLOCK_HEADER_BYTES, &codec) != CAPSEM_OK) return 0;
    if (codec != CAPSEM_CODEC_DEFLATE) return 0;
    const capsem_segment_ref *ref = NULL, *ref_end = NULL;
    if (s->segs && b != (size_t)-1) {
        ref = s->segs + s->seg_first[b];
        ref_end = s->segs + s->seg_first[b + 1];
    }
    capsem_inflate_end end;
    if (!capsem_inflate_segments(&w->fast, s->base, s->size, blk + CAPSEM_BLOCK_HEADER_BYTES, 0, need, &w->raw,
                                 &w->raw_cap, ref, ref_end, 1, &end))
        return 0;
    *held_out = end.held;
    *next_out = end.next;
    return 1;
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
        } else if (s->out || s->out_at) {
            /* Only verified bytes ever reach the caller's buffer. */
            uint32_t k = w->member_span[m];
            memcpy(s->out_at ? s->out_at[i] : s->out + s->out_offset[i], raw + w->offs[k], (size_t)w->lens[k]);
        }
    }
}

static void advise(const capsem_verify_spec *s, uint64_t from, uint64_t to, int advice, int inner) {
    capsem_map_advise(s->base, s->size, from, to, advice, inner);
}

static void will_need(const capsem_verify_spec *s, uint64_t from, uint64_t to) {
    if (from < to) advise(s, from, to, ADVICE_WILLNEED, 0);
}

/* Unmap the pages of [from, to) from this process once a block is done, and those the kernel
 * mapped around its faults (capsem_map_drop): the page cache keeps them, but the process's
 * resident size stays flat however large the archive. A page shared with a neighbouring block
 * another worker is reading only faults back in. On macOS the advice only deactivates the
 * pages; the system reclaims them as it needs. */
static void drop_pages(const capsem_verify_spec *s, uint64_t from, uint64_t to) {
    capsem_map_drop(s->base, s->size, from, to);
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
    size_t b = s->block_offset[lo] >= 0 ? find_block(s, s->block_offset[lo]) : (size_t)-1;
    if (b != (size_t)-1 && s->blk_disk_len[b] > 0) {
        /* The committed extent is read through once: ask for all of it now rather than page
         * by page as the inflater reaches it (a no-op when it is already cached). */
        will_need(s, blk, blk + (uint64_t)s->blk_disk_len[b]);
    }
    int fast = 0;
    uint64_t fast_held = 0, fast_next = 0;
    if (s->use_libdeflate && max_end > 0) fast = inflate_segments(w, b, blk, max_end, &fast_held, &fast_next);

    int failed = 0;
    uint64_t fail_at = 0;
    capsem_status fail_status = CAPSEM_OK;
    int32_t fail_err = -1;
    if (fast) {
        raw = w->raw;
        /* Short of max_end only after the FINAL segment: a span past it is out of range, as
         * the streaming cursor reports once it meets the FINAL segment. */
        if (fast_held < max_end) {
            capsem_error e;
            memset(&e, 0, sizeof e);
            e.status = CAPSEM_E_RANGE;
            e.at = blk;
            e.raw_done = fast_held;
            failed = 1;
            fail_at = fast_held;
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
    drop_pages(s, blk, fast ? fast_next : capsem_cursor_next_segment(w->cursor));
    atomic_fetch_add(&job->bytes_done, bytes);
    atomic_fetch_add(&job->bodies_done, hi - lo);
}

/* verify_run with the fault guard armed: if session.bodies is cut short under the map, the
 * run's bodies are reported truncated instead of the process dying. */
static void verify_run_guarded(worker *w, size_t lo, size_t hi) {
    capsem_verify_job *job = w->job;
    const capsem_verify_spec *s = &job->spec;
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        capsem_cursor_discard(w->cursor);
        capsem_error e;
        memset(&e, 0, sizeof e);
        e.status = CAPSEM_E_TRUNCATED;
        e.at = (uint64_t)s->block_offset[lo];
        snprintf(e.detail, sizeof e.detail, "the file shrank while it was read");
        int32_t idx = record_error(job, &e);
        for (size_t i = lo; i < hi; i++) {
            s->status[i] = (uint8_t)CAPSEM_E_TRUNCATED;
            s->err_index[i] = idx;
        }
        atomic_fetch_add(&job->bodies_done, hi - lo);
        return;
    }
    capsem_guard_range(s->base, s->size);
    capsem_guard_armed = 1;
    verify_run(w, lo, hi);
    capsem_guard_armed = 0;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    capsem_verify_job *job = w->job;
    for (;;) {
        if (atomic_load(&job->nomem) || atomic_load(&job->stop)) break;
        size_t r = atomic_fetch_add(&job->next_run, 1);
        if (r >= job->nruns) break;
        verify_run_guarded(w, job->runs[r], job->runs[r + 1]);
    }
    pthread_mutex_lock(&job->lock);
    job->running--;
    pthread_cond_broadcast(&job->cond);
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

/* What of a worker outlives its job when lent: its cursor and its buffers. */
typedef struct {
    capsem_cursor *cursor;
    uint8_t *raw;
    size_t raw_cap;
    struct libdeflate_decompressor *ld;
    uint8_t *comp;
    size_t comp_cap;
} lent;

#define MAX_WORKERS 256

struct capsem_verify_buffers {
    lent slot[MAX_WORKERS];
};

capsem_verify_buffers *capsem_verify_buffers_new(void) { return calloc(1, sizeof(capsem_verify_buffers)); }

void capsem_verify_buffers_free(capsem_verify_buffers *b) {
    if (!b) return;
    for (int t = 0; t < MAX_WORKERS; t++) {
        lent *l = &b->slot[t];
        capsem_cursor_free(l->cursor);
        if (l->ld) libdeflate_free_decompressor(l->ld);
        capsem_big_free(l->comp, l->comp_cap);
        capsem_big_free(l->raw, l->raw_cap);
    }
    free(b);
}

/* Worker t takes slot t's buffers (a cursor it must have: a new one when the slot has none). */
static int borrow(capsem_verify_job *job, int t) {
    worker *w = &job->workers[t];
    lent *l = job->spec.lend ? &job->spec.lend->slot[t] : NULL;
    if (l) {
        w->cursor = l->cursor;
        w->raw = l->raw;
        w->raw_cap = l->raw_cap;
        w->fast.ld = l->ld;
        w->fast.comp = l->comp;
        w->fast.comp_cap = l->comp_cap;
        memset(l, 0, sizeof *l);
        w->borrowed = 1;
    }
    if (!w->cursor) w->cursor = capsem_cursor_new();
    return w->cursor != NULL;
}

static void free_workers(capsem_verify_job *job) {
    if (!job->workers) return;
    for (int t = 0; t < job->nworkers; t++) {
        worker *w = &job->workers[t];
        if (w->borrowed) {
            /* Back to the lender, whatever the job did with them (they are only buffers). */
            job->spec.lend->slot[t] = (lent){w->cursor, w->raw, w->raw_cap, w->fast.ld, w->fast.comp, w->fast.comp_cap};
            continue;
        }
        capsem_cursor_free(w->cursor);
        capsem_inflater_clear(&w->fast);
        capsem_big_free(w->raw, w->raw_cap);
    }
    free(job->workers);
    job->workers = NULL;
}

capsem_verify_job *capsem_verify_start(const capsem_verify_spec *spec) {
    capsem_verify_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->spec = *spec;
    if (getentropy(job->end_data, END_DATA) != 0) job->spec.use_libdeflate = 0;
    /* Blocks are read in file order (by all workers together): read ahead generously. */
    advise(&job->spec, 0, spec->size, ADVICE_SEQUENTIAL, 0);
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
    if (threads > MAX_WORKERS) threads = MAX_WORKERS;
    if ((size_t)threads > nruns) threads = nruns ? (int)nruns : 1;
    job->workers = aligned_alloc(64, (size_t)threads * sizeof *job->workers);
    if (job->workers) {
        memset(job->workers, 0, (size_t)threads * sizeof *job->workers);
        job->nworkers = threads;
    }
    job->tids = calloc((size_t)threads, sizeof *job->tids);
    if (!job->workers || !job->tids) goto fail;
    for (int t = 0; t < threads; t++) {
        job->workers[t].job = job;
        if (!borrow(job, t)) goto fail;
        memcpy(job->workers[t].fast.end_data, job->end_data, END_DATA);
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
    int done = capsem_pool_wait(&job->lock, &job->cond, &job->running, timeout_ms);
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
