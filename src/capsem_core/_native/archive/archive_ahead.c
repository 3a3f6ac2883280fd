/* Read-ahead of a ledger's files (see archive_ahead.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "archive_ahead.h"

typedef struct {
    int fd;
    uint64_t size;
} ahead_file;

struct capsem_ahead {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int started, stop;
    uint64_t limit, done;
    ahead_file files[CAPSEM_AHEAD_MAX_FILES];
    unsigned nfiles, next; /* files handed over; the next one the thread takes */
};

/* Ask for [off, off + len) of fd. */
static void ask(int fd, uint64_t off, uint64_t len) {
#if defined(POSIX_FADV_WILLNEED)
    posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
#else
    (void)fd;
    (void)off;
    (void)len;
#endif
}

/* Wait until [off, off + len) of fd is read: its last byte is read once its page is. */
static void wait_for(int fd, uint64_t off, uint64_t len) {
    unsigned char byte;
    if (len) (void)pread(fd, &byte, 1, (off_t)(off + len - 1));
}

static int stopping(capsem_ahead *a) {
    pthread_mutex_lock(&a->lock);
    int stop = a->stop;
    pthread_mutex_unlock(&a->lock);
    return stop;
}

static void *run(void *arg) {
    capsem_ahead *a = arg;
    for (;;) {
        pthread_mutex_lock(&a->lock);
        while (!a->stop && a->next == a->nfiles) pthread_cond_wait(&a->cond, &a->lock);
        if (a->stop) {
            pthread_mutex_unlock(&a->lock);
            return NULL;
        }
        ahead_file f = a->files[a->next++];
        pthread_mutex_unlock(&a->lock);
        uint64_t flight[CAPSEM_AHEAD_DEPTH];
        unsigned head = 0, count = 0;
        for (uint64_t off = 0; off < f.size && !stopping(a); off += CAPSEM_AHEAD_CHUNK) {
            uint64_t len = f.size - off < CAPSEM_AHEAD_CHUNK ? f.size - off : CAPSEM_AHEAD_CHUNK;
            pthread_mutex_lock(&a->lock);
            int over = a->done + len > a->limit;
            if (!over) a->done += len;
            pthread_mutex_unlock(&a->lock);
            if (over) break;
            if (count == CAPSEM_AHEAD_DEPTH) { /* the oldest chunk in flight read before another is asked */
                uint64_t oldest = flight[head];
                wait_for(f.fd, oldest, f.size - oldest < CAPSEM_AHEAD_CHUNK ? f.size - oldest : CAPSEM_AHEAD_CHUNK);
                head = (head + 1) % CAPSEM_AHEAD_DEPTH;
                count--;
            }
            ask(f.fd, off, len);
            flight[(head + count) % CAPSEM_AHEAD_DEPTH] = off;
            count++;
        }
    }
}

capsem_ahead *capsem_ahead_new(uint64_t limit) {
    capsem_ahead *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    a->limit = limit;
    return a;
}

int capsem_ahead_add(capsem_ahead *a, int fd, uint64_t size) {
    pthread_mutex_lock(&a->lock);
    int err = 0;
#if !defined(POSIX_FADV_WILLNEED)
    /* Nothing to ask the system for: a thread would only wait on reads for nothing. */
    (void)fd;
    (void)size;
    err = ENOTSUP;
#else
    if (a->stop || a->nfiles == CAPSEM_AHEAD_MAX_FILES) {
        err = EMFILE;
    } else {
        int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (copy < 0) {
            err = errno;
        } else {
            a->files[a->nfiles++] = (ahead_file){copy, size};
            if (!a->started) {
                err = pthread_create(&a->thread, NULL, run, a);
                a->started = err == 0;
            }
            pthread_cond_broadcast(&a->cond);
        }
    }
#endif
    pthread_mutex_unlock(&a->lock);
    return err;
}

uint64_t capsem_ahead_done(capsem_ahead *a) {
    pthread_mutex_lock(&a->lock);
    uint64_t done = a->done;
    pthread_mutex_unlock(&a->lock);
    return done;
}

void capsem_ahead_free(capsem_ahead *a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->stop = 1;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    if (a->started) pthread_join(a->thread, NULL);
    for (unsigned i = 0; i < a->nfiles; i++) close(a->files[i].fd);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    free(a);
}
