/* Read-ahead of a ledger's files (see archive_ahead.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/sendfile.h>
#endif

#include "archive_ahead.h"

typedef struct {
    int fd;
    uint64_t size;
    capsem_stream_gate *gate; /* held; closed when the thread leaves the file */
} ahead_file;

struct capsem_ahead {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int started, stop;
    uint64_t limit, done, passed;
    ahead_file files[CAPSEM_AHEAD_MAX_FILES];
    unsigned nfiles, next; /* files handed over; the next one the thread takes */
    int sink;              /* /dev/null, written to by sendfile(2); -1: chunks are asked for by advice */
};

/* Read [off, off + len) of fd into the page cache by sendfile(2) into the sink: a read fills
 * the page cache with large folios, which a reader's map fault maps whole, where WILLNEED
 * fills it a page at a time (a million-body check from a cold cache: 2.00 s against 2.30 s,
 * 2.9 s of CPU against 3.8 s, medians of six paired rounds). The kernel's own read-ahead keeps
 * the disk busy ahead of the call; nothing is copied to the process. 0 when the range went
 * through (or the file ended before it), -1 when sendfile cannot read this file. */
static int read_through(int sink, int fd, uint64_t off, uint64_t len) {
#if defined(__linux__)
    off_t at = (off_t)off;
    while (len) {
        ssize_t n = sendfile(sink, fd, &at, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) return 0; /* the file is shorter than it was: nothing more to read */
        len -= (uint64_t)n;
    }
    return 0;
#else
    (void)sink;
    (void)fd;
    (void)off;
    (void)len;
    return -1;
#endif
}

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

/* Whether [off, off + len) of fd is in the page cache already, by one byte of every
 * CAPSEM_AHEAD_SAMPLE bytes and its last, each read with RWF_NOWAIT (which fails rather than
 * wait on the disk). A chunk read by an earlier reader is then passed over: asking for it
 * again would cost a lookup per page for nothing, a 1.6 GB session.db's worth per warm check
 * (2-3% of one). A hole between samples is faulted in by its reader, as without the
 * read-ahead. Where the system cannot tell, no. The thread stops looking at a file's first
 * missing chunk and streams the rest as a cold file (looking on through a cold file was
 * slower in two paired runs of ten, by 0.1-0.2 s in 2.5 s). */
static int cached(int fd, uint64_t off, uint64_t len) {
#if defined(RWF_NOWAIT)
    unsigned char byte;
    struct iovec v = {&byte, 1};
    for (uint64_t at = off;; at += CAPSEM_AHEAD_SAMPLE) {
        if (at >= off + len) at = off + len - 1;
        if (preadv2(fd, &v, 1, (off_t)at, RWF_NOWAIT) != 1) return 0;
        if (at == off + len - 1) return 1;
    }
#else
    (void)fd;
    (void)off;
    (void)len;
    return 0;
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
        int probing = 1; /* until the first chunk found missing: from there on, a cold file */
        int reading = a->sink >= 0; /* by sendfile, until it fails on this file */
        for (uint64_t off = 0; off < f.size && !stopping(a); off += CAPSEM_AHEAD_CHUNK) {
            uint64_t len = f.size - off < CAPSEM_AHEAD_CHUNK ? f.size - off : CAPSEM_AHEAD_CHUNK;
            int there = probing && cached(f.fd, off, len); /* then neither asked for nor counted */
            probing = there;
            pthread_mutex_lock(&a->lock);
            int over = !there && a->done + len > a->limit;
            if (!over) {
                if (!there) a->done += len;
                a->passed += len;
            }
            pthread_mutex_unlock(&a->lock);
            if (over) break;
            if (there || (reading && read_through(a->sink, f.fd, off, len) == 0)) {
                if (f.gate) capsem_gate_advance(f.gate, off + len);
                continue;
            }
            reading = 0;
            if (count == CAPSEM_AHEAD_DEPTH) { /* the oldest chunk in flight read before another is asked */
                uint64_t oldest = flight[head];
                wait_for(f.fd, oldest, f.size - oldest < CAPSEM_AHEAD_CHUNK ? f.size - oldest : CAPSEM_AHEAD_CHUNK);
                head = (head + 1) % CAPSEM_AHEAD_DEPTH;
                count--;
            }
            ask(f.fd, off, len);
            flight[(head + count) % CAPSEM_AHEAD_DEPTH] = off;
            count++;
            /* Asked for, not yet read: a reader past here waits on the disk's answer to the
             * advice, not on a read of its own. */
            if (f.gate) capsem_gate_advance(f.gate, off + len);
        }
        if (f.gate) capsem_gate_close(f.gate);
    }
}

capsem_ahead *capsem_ahead_new(uint64_t limit, int advice_only) {
    capsem_ahead *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    a->limit = limit;
    a->sink = -1;
#if defined(__linux__)
    if (!advice_only) a->sink = open("/dev/null", O_WRONLY | O_CLOEXEC);
#else
    (void)advice_only;
#endif
    return a;
}

int capsem_ahead_add(capsem_ahead *a, int fd, uint64_t size, capsem_stream_gate *gate) {
    pthread_mutex_lock(&a->lock);
    int err = 0;
    int taken = 0;
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
            if (gate) capsem_gate_hold(gate);
            a->files[a->nfiles++] = (ahead_file){copy, size, gate};
            taken = 1;
            if (!a->started) {
                err = pthread_create(&a->thread, NULL, run, a);
                a->started = err == 0;
                taken = a->started; /* no thread: no file handed over will be read */
            }
            pthread_cond_broadcast(&a->cond);
        }
    }
#endif
    pthread_mutex_unlock(&a->lock);
    if (!taken && gate) capsem_gate_close(gate); /* never read here: nobody waits for it */
    return err;
}

uint64_t capsem_ahead_done(capsem_ahead *a) {
    pthread_mutex_lock(&a->lock);
    uint64_t done = a->done;
    pthread_mutex_unlock(&a->lock);
    return done;
}

uint64_t capsem_ahead_passed(capsem_ahead *a) {
    pthread_mutex_lock(&a->lock);
    uint64_t passed = a->passed;
    pthread_mutex_unlock(&a->lock);
    return passed;
}

void capsem_ahead_free(capsem_ahead *a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->stop = 1;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    if (a->started) pthread_join(a->thread, NULL);
    for (unsigned i = 0; i < a->nfiles; i++) {
        close(a->files[i].fd);
        if (a->files[i].gate) {
            capsem_gate_close(a->files[i].gate); /* the files the thread never reached */
            capsem_gate_drop(a->files[i].gate);
        }
    }
    if (a->sink >= 0) close(a->sink);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    free(a);
}
