/* Waiting, with a deadline, for a pool of worker threads to finish: the one wait of the
 * verify kernel and the extent hashing, whose callers return to Python between waits to
 * check for signals and report progress. */
#ifndef CAPSEM_POOL_WAIT_H
#define CAPSEM_POOL_WAIT_H

#include <errno.h>
#include <pthread.h>
#include <time.h>

/* Waits on cond (under lock) until *running is 0 or timeout_ms passed; 1 when it is 0. */
static inline int capsem_pool_wait(pthread_mutex_t *lock, pthread_cond_t *cond, const int *running,
                                   int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(lock);
    while (*running > 0) {
        if (pthread_cond_timedwait(cond, lock, &ts) == ETIMEDOUT) break;
    }
    int done = *running == 0;
    pthread_mutex_unlock(lock);
    return done;
}

#endif
