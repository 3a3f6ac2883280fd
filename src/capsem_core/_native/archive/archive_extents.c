/* Fingerprints of committed extents (see archive_extents.h).
 *
 * Runs of consecutive extents are taken from an atomic counter by up to `threads` workers,
 * each hashing whole extents (an extent is at most a block: 16 MiB raw, a little more on
 * disk), so a worker the scheduler holds back leaves the rest to the others. Each extent is
 * read ahead before it is hashed and a run's pages dropped from the process after it, so
 * the resident size stays flat however large the archive; every read of the map is under
 * the SIGBUS guard. Outcomes go to fixed indices: the result does not depend on the thread
 * count. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "archive_extents.h"
#include "archive_format.h"
#include "archive_file.h"
#include "archive_guard.h"
#include "pool_wait.h"
#include "blake3.h"

#define MAX_THREADS 256

struct capsem_extents_job {
    capsem_extents_spec spec;
    atomic_size_t next;
    atomic_uint_fast64_t bytes_done;
    atomic_int stop;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running;
    int nthreads;
    size_t group; /* consecutive extents taken at a time */
    pthread_t tids[MAX_THREADS];
};

/* Consecutive extents a worker takes at once: a run of its own, whose pages it drops in one
 * call when the run is done (a span reaching into extents another worker is still reading
 * would make that worker fault them in again); small enough that every worker gets several. */
#define GROUP_MAX 16

/* The hashes of the segment headers in [at + block header, end), fed in order; 0 when they
 * do not chain exactly to end (the archive check reports why; here it only marks the digest
 * as not describing a well-formed extent). */
static int segment_digest(const uint8_t *base, uint64_t at, uint64_t end, uint8_t out[32]) {
    capsem_blake3_hasher h;
    capsem_blake3_hasher_init(&h);
    int ok = end - at >= CAPSEM_BLOCK_HEADER_BYTES;
    uint64_t raw = 0;
    if (ok) at += CAPSEM_BLOCK_HEADER_BYTES;
    while (ok && at < end) {
        capsem_segment_header sh;
        if (end - at < CAPSEM_SEGMENT_HEADER_BYTES ||
            capsem_parse_segment_header(base + at, CAPSEM_SEGMENT_HEADER_BYTES, (uint32_t)raw, &sh) != CAPSEM_OK) {
            ok = 0;
            break;
        }
        capsem_blake3_hasher_update(&h, sh.hash, 32);
        raw += sh.raw_len;
        uint64_t next = at + CAPSEM_SEGMENT_HEADER_BYTES;
        if (end - next < sh.comp_len) {
            ok = 0;
            break;
        }
        at = next + sh.comp_len;
    }
    capsem_blake3_hasher_finalize(&h, out, 32);
    return ok;
}

static void hash_one(capsem_extents_job *job, size_t i, capsem_drop_batch *dropped) {
    const capsem_extents_spec *s = &job->spec;
    int64_t off = s->offset[i], len = s->length[i];
    if (off < 0 || len < 0 || (uint64_t)off > s->size || (uint64_t)len > s->size - (uint64_t)off) {
        s->status[i] = CAPSEM_EXTENT_PAST_END;
        return;
    }
    uint64_t a = (uint64_t)off, b = a + (uint64_t)len;
    capsem_map_advise(s->base, s->size, a, b, ADVICE_WILLNEED, 0);
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        s->status[i] = CAPSEM_EXTENT_SHRANK;
        return;
    }
    capsem_guard_range(s->base, s->size);
    capsem_guard_armed = 1;
    capsem_blake3_hash(s->base + a, (size_t)(b - a), s->disk_hash + 32 * i);
    int chained = segment_digest(s->base, a, b, s->segments + 32 * i);
    capsem_guard_armed = 0;
    s->status[i] = chained ? CAPSEM_EXTENT_HASHED : CAPSEM_EXTENT_UNCHAINED;
    capsem_drop_batch_add(dropped, s->base, s->size, a, b);
    atomic_fetch_add(&job->bytes_done, b - a);
}

static void *worker_main(void *arg) {
    capsem_extents_job *job = arg;
    capsem_drop_batch dropped = {0, 0};
    for (;;) {
        if (atomic_load(&job->stop)) break;
        size_t lo = atomic_fetch_add(&job->next, job->group);
        if (lo >= job->spec.n) break;
        size_t hi = job->spec.n - lo < job->group ? job->spec.n : lo + job->group;
        for (size_t i = lo; i < hi && !atomic_load(&job->stop); i++) hash_one(job, i, &dropped);
        capsem_drop_batch_flush(&dropped, job->spec.base, job->spec.size);
    }
    pthread_mutex_lock(&job->lock);
    job->running--;
    pthread_cond_broadcast(&job->cond);
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

capsem_extents_job *capsem_extents_start(const capsem_extents_spec *spec) {
    capsem_extents_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->spec = *spec;
    for (size_t i = 0; i < spec->n; i++) spec->status[i] = CAPSEM_EXTENT_SKIPPED;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->cond, NULL);
    int threads = spec->threads;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if ((size_t)threads > spec->n) threads = spec->n ? (int)spec->n : 1;
    job->group = spec->n / ((size_t)threads * 8);
    if (job->group < 1) job->group = 1;
    if (job->group > GROUP_MAX) job->group = GROUP_MAX;
    pthread_mutex_lock(&job->lock);
    for (int t = 0; t < threads; t++) {
        if (pthread_create(&job->tids[t], NULL, worker_main, job) != 0) break;
        job->nthreads++;
        job->running++;
    }
    pthread_mutex_unlock(&job->lock);
    if (job->nthreads == 0) {
        /* No thread could start: hash here (the caller waits either way). */
        job->running = 1;
        worker_main(job);
    }
    return job;
}

int capsem_extents_wait(capsem_extents_job *job, int timeout_ms, uint64_t *bytes_done) {
    int done = capsem_pool_wait(&job->lock, &job->cond, &job->running, timeout_ms);
    if (bytes_done) *bytes_done = atomic_load(&job->bytes_done);
    return done;
}

void capsem_extents_cancel(capsem_extents_job *job) { atomic_store(&job->stop, 1); }

void capsem_extents_free(capsem_extents_job *job) {
    if (!job) return;
    for (int t = 0; t < job->nthreads; t++) pthread_join(job->tids[t], NULL);
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->cond);
    free(job);
}
