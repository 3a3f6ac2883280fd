/* The gate between a file's read-ahead and its readers (see stream_gate.h). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "stream_gate.h"

/* How often a waiter looks at its cancel flag: the stream advances every chunk (a few ms from
 * a disk), so a waiter is normally woken long before this. */
#define CANCEL_POLL_NS 20000000L

capsem_stream_gate *capsem_gate_new(void) {
    capsem_stream_gate *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    if (pthread_mutex_init(&g->lock, NULL) != 0) {
        free(g);
        return NULL;
    }
    if (pthread_cond_init(&g->moved, NULL) != 0) {
        pthread_mutex_destroy(&g->lock);
        free(g);
        return NULL;
    }
    atomic_store(&g->open, 1);
    atomic_store(&g->refs, 1);
    return g;
}

void capsem_gate_hold(capsem_stream_gate *g) {
    atomic_fetch_add(&g->refs, 1);
}

void capsem_gate_drop(capsem_stream_gate *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->moved);
    free(g);
}

void capsem_gate_advance(capsem_stream_gate *g, uint64_t passed) {
    pthread_mutex_lock(&g->lock);
    if (passed > atomic_load(&g->passed)) atomic_store_explicit(&g->passed, passed, memory_order_release);
    pthread_cond_broadcast(&g->moved);
    pthread_mutex_unlock(&g->lock);
}

void capsem_gate_close(capsem_stream_gate *g) {
    pthread_mutex_lock(&g->lock);
    atomic_store_explicit(&g->open, 0, memory_order_release);
    pthread_cond_broadcast(&g->moved);
    pthread_mutex_unlock(&g->lock);
}

uint64_t capsem_gate_passed(capsem_stream_gate *g) {
    return atomic_load(&g->passed);
}

int capsem_gate_open(capsem_stream_gate *g) {
    return atomic_load(&g->open);
}

uint64_t capsem_gate_waits(capsem_stream_gate *g) {
    return atomic_load(&g->waits);
}

void capsem_gate_wait_slow(capsem_stream_gate *g, uint64_t end, volatile const int *cancel) {
    atomic_fetch_add(&g->waits, 1);
    pthread_mutex_lock(&g->lock);
    while (atomic_load(&g->passed) < end && atomic_load(&g->open) && !(cancel && *cancel)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += CANCEL_POLL_NS;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        int rc = pthread_cond_timedwait(&g->moved, &g->lock, &ts);
        if (rc != 0 && rc != ETIMEDOUT) break; /* a wait that cannot be made is not made */
    }
    pthread_mutex_unlock(&g->lock);
}
