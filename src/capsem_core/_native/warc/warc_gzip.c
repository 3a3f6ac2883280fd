/* Records into gzip members across a pthread pool (see warc_gzip.h).
 *
 * Records are taken from an atomic counter, so a worker the scheduler holds back leaves the
 * rest to the others; each member lands in a slot of its own (the prefix sums of the
 * records' gzip bounds), so the output does not depend on the thread count or the order the
 * workers finish in. Once every worker is done the members are moved down over the slack
 * their bounds left, in input order: one memmove each, forward, never overlapping a member
 * not yet moved. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

#include "big_alloc.h"
#include "pool_wait.h"
#include "warc_gzip.h"

typedef struct {
    struct libdeflate_compressor *compressor;
    uint8_t *scratch; /* one record assembled: header, body, trailer */
    size_t scratch_cap;
} gzip_worker;

struct capsem_gzip_pool {
    int level;
    int nworkers;
    gzip_worker workers[];
};

struct capsem_gzip_job {
    capsem_gzip_spec spec;
    capsem_gzip_pool *pool;
    uint64_t *slot;  /* n + 1: member i may use out[slot[i], slot[i + 1]) */
    atomic_size_t next;
    atomic_int stop;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running;
    int nthreads;
    int error;       /* the first failure (under lock) */
    size_t error_at;
    pthread_t tids[CAPSEM_GZIP_MAX_THREADS];
};

capsem_gzip_pool *capsem_gzip_pool_new(int level, int threads) {
    if (level < 0 || level > CAPSEM_GZIP_MAX_LEVEL || threads < 1 || threads > CAPSEM_GZIP_MAX_THREADS)
        return NULL;
    capsem_gzip_pool *pool = calloc(1, sizeof *pool + (size_t)threads * sizeof(gzip_worker));
    if (!pool) return NULL;
    pool->level = level;
    pool->nworkers = threads;
    for (int t = 0; t < threads; t++) {
        pool->workers[t].compressor = libdeflate_alloc_compressor(level);
        if (!pool->workers[t].compressor) {
            capsem_gzip_pool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void capsem_gzip_pool_free(capsem_gzip_pool *pool) {
    if (!pool) return;
    for (int t = 0; t < pool->nworkers; t++) {
        libdeflate_free_compressor(pool->workers[t].compressor);
        capsem_big_free(pool->workers[t].scratch, pool->workers[t].scratch_cap);
    }
    free(pool);
}

/* Record i's header span, or 0 when it is not inside the header bytes. */
static int head_span(const capsem_gzip_spec *s, size_t i, uint64_t *at, uint64_t *len) {
    int64_t a = s->head_offsets[i], b = s->head_offsets[i + 1];
    if (a < 0 || b < a || (uint64_t)b > s->heads_len) return 0;
    *at = (uint64_t)a;
    *len = (uint64_t)(b - a);
    return 1;
}

static int body_span(const capsem_gzip_spec *s, size_t i, uint64_t *at, uint64_t *len) {
    int64_t a = s->body_offsets[i], n = s->body_lengths[i];
    if (a < 0 || n < 0 || (uint64_t)a > s->bodies_len || (uint64_t)n > s->bodies_len - (uint64_t)a) return 0;
    *at = (uint64_t)a;
    *len = (uint64_t)n;
    return 1;
}

int capsem_gzip_check(const capsem_gzip_spec *s, uint64_t *need, size_t *at) {
    uint64_t total = 0;
    *need = 0;
    *at = 0;
    if (s->trailer_len > CAPSEM_GZIP_MAX_RECORD_BYTES) return CAPSEM_GZIP_E_RECORD;
    for (size_t i = 0; i < s->n; i++) {
        uint64_t ha = 0, hl = 0, ba = 0, bl = 0;
        *at = i;
        if (!head_span(s, i, &ha, &hl)) return CAPSEM_GZIP_E_HEADS;
        if (!body_span(s, i, &ba, &bl)) return CAPSEM_GZIP_E_BODY;
        /* Each term is bounded first, so the sum cannot wrap. */
        if (hl > CAPSEM_GZIP_MAX_RECORD_BYTES || bl > CAPSEM_GZIP_MAX_RECORD_BYTES ||
            hl + bl + s->trailer_len > CAPSEM_GZIP_MAX_RECORD_BYTES)
            return CAPSEM_GZIP_E_RECORD;
        total += libdeflate_gzip_compress_bound(NULL, (size_t)(hl + bl + s->trailer_len));
    }
    *at = 0;
    *need = total;
    return s->out_len < total ? CAPSEM_GZIP_E_OUT : CAPSEM_GZIP_OK;
}

static void fail(capsem_gzip_job *job, int error, size_t i) {
    pthread_mutex_lock(&job->lock);
    if (!job->error || i < job->error_at) {
        job->error = error;
        job->error_at = i;
    }
    pthread_mutex_unlock(&job->lock);
    atomic_store(&job->stop, 1);
}

static void compress_one(capsem_gzip_job *job, gzip_worker *w, size_t i) {
    const capsem_gzip_spec *s = &job->spec;
    uint64_t ha = 0, hl = 0, ba = 0, bl = 0;
    head_span(s, i, &ha, &hl); /* checked by capsem_gzip_check */
    body_span(s, i, &ba, &bl);
    size_t len = (size_t)(hl + bl + s->trailer_len);
    const uint8_t *in = s->bodies + ba;
    if (hl != 0 || s->trailer_len != 0) {
        /* libdeflate compresses one contiguous input: the record is assembled first. */
        if (w->scratch_cap < len) {
            capsem_big_free(w->scratch, w->scratch_cap);
            w->scratch_cap = 0;
            w->scratch = capsem_big_alloc(len);
            if (!w->scratch) {
                fail(job, CAPSEM_GZIP_E_NOMEM, i);
                return;
            }
            w->scratch_cap = len;
        }
        memcpy(w->scratch, s->heads + ha, (size_t)hl);
        memcpy(w->scratch + hl, s->bodies + ba, (size_t)bl);
        memcpy(w->scratch + hl + bl, s->trailer, (size_t)s->trailer_len);
        in = w->scratch;
    }
    uint64_t room = job->slot[i + 1] - job->slot[i];
    size_t got = libdeflate_gzip_compress(w->compressor, in, len, s->out + job->slot[i], (size_t)room);
    if (got == 0) {
        fail(job, CAPSEM_GZIP_E_BOUND, i);
        return;
    }
    s->sizes[i] = (int64_t)got;
}

typedef struct {
    capsem_gzip_job *job;
    gzip_worker *w;
} worker_arg;

static void *worker_main(void *arg) {
    capsem_gzip_job *job = ((worker_arg *)arg)->job;
    gzip_worker *w = ((worker_arg *)arg)->w;
    free(arg);
    for (;;) {
        if (atomic_load(&job->stop)) break;
        size_t i = atomic_fetch_add(&job->next, 1);
        if (i >= job->spec.n) break;
        compress_one(job, w, i);
    }
    pthread_mutex_lock(&job->lock);
    job->running--;
    pthread_cond_broadcast(&job->cond);
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

capsem_gzip_job *capsem_gzip_start(capsem_gzip_pool *pool, const capsem_gzip_spec *spec) {
    capsem_gzip_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->spec = *spec;
    job->pool = pool;
    job->slot = malloc((spec->n + 1) * sizeof *job->slot);
    if (!job->slot) {
        free(job);
        return NULL;
    }
    job->slot[0] = 0;
    for (size_t i = 0; i < spec->n; i++) {
        uint64_t hl = (uint64_t)(spec->head_offsets[i + 1] - spec->head_offsets[i]);
        size_t len = (size_t)(hl + (uint64_t)spec->body_lengths[i] + spec->trailer_len);
        job->slot[i + 1] = job->slot[i] + libdeflate_gzip_compress_bound(NULL, len);
        spec->sizes[i] = -1;
    }
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->cond, NULL);
    int threads = pool->nworkers;
    if ((size_t)threads > spec->n) threads = spec->n ? (int)spec->n : 1;
    pthread_mutex_lock(&job->lock);
    for (int t = 0; t < threads; t++) {
        worker_arg *arg = malloc(sizeof *arg);
        if (!arg) break;
        *arg = (worker_arg){job, &pool->workers[t]};
        if (pthread_create(&job->tids[t], NULL, worker_main, arg) != 0) {
            free(arg);
            break;
        }
        job->nthreads++;
        job->running++;
    }
    pthread_mutex_unlock(&job->lock);
    if (job->nthreads == 0) {
        /* No thread could start: compress here (the caller waits either way). */
        worker_arg *arg = malloc(sizeof *arg);
        if (!arg) {
            capsem_gzip_finish(job, NULL, NULL);
            return NULL;
        }
        *arg = (worker_arg){job, &pool->workers[0]};
        job->running = 1;
        worker_main(arg);
    }
    return job;
}

int capsem_gzip_wait(capsem_gzip_job *job, int timeout_ms) {
    return capsem_pool_wait(&job->lock, &job->cond, &job->running, timeout_ms);
}

void capsem_gzip_cancel(capsem_gzip_job *job) { atomic_store(&job->stop, 1); }

int capsem_gzip_finish(capsem_gzip_job *job, uint64_t *total, size_t *at) {
    for (int t = 0; t < job->nthreads; t++) pthread_join(job->tids[t], NULL);
    const capsem_gzip_spec *s = &job->spec;
    int rc = job->error;
    size_t where = job->error_at;
    if (!rc) {
        for (size_t i = 0; i < s->n; i++) {
            if (s->sizes[i] < 0) {
                rc = CAPSEM_GZIP_E_CANCELLED;
                where = i;
                break;
            }
        }
    }
    uint64_t pos = 0;
    if (!rc) {
        for (size_t i = 0; i < s->n; i++) {
            if (pos != job->slot[i]) memmove(s->out + pos, s->out + job->slot[i], (size_t)s->sizes[i]);
            pos += (uint64_t)s->sizes[i];
        }
    }
    if (total) *total = pos;
    if (at) *at = where;
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->cond);
    free(job->slot);
    free(job);
    return rc;
}
