/* zlib's rules walked ahead of the verify kernel (see archive_rules_ahead.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "archive_deflate_rules.h"
#include "archive_format.h"
#include "archive_inflate.h"
#include "archive_rules_ahead.h"
#include "big_alloc.h"

/* A stored block header in a byte-aligned position: BFINAL/BTYPE byte, LEN, NLEN. */
#define STORED_HEAD 5u
#define END_DATA CAPSEM_INFLATE_END_DATA

struct capsem_rules_ahead {
    int fd;
    capsem_segment_ref *refs;
    size_t n;
    atomic_int stop;
    pthread_t thread;
    int joined;
};

/* [off, off + len) of fd into buf; 1 when all of it was read. */
static int read_all(int fd, uint8_t *buf, uint64_t off, size_t len) {
    while (len) {
        ssize_t got = pread(fd, buf, len, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return 0;
        buf += got;
        off += (uint64_t)got;
        len -= (size_t)got;
    }
    return 1;
}

static void *run(void *arg) {
    capsem_rules_ahead *r = arg;
    /* A non-final payload is walked as the kernel hands it to libdeflate: followed by a final
     * stored block of END_DATA bytes (their values are skipped by length, so zeros do). The
     * kernel's input also starts with a stored block holding the window; the walk keeps no
     * state across blocks and skips a stored block by its length, so the verdict is this
     * one's. */
    static const uint8_t end_head[STORED_HEAD] = {0x01, END_DATA, 0x00, (uint8_t)~END_DATA, 0xFF};
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < r->n && !atomic_load_explicit(&r->stop, memory_order_relaxed); i++) {
        capsem_segment_ref *ref = &r->refs[i];
        if (ref->codec != CAPSEM_CODEC_DEFLATE) continue;
        int final = (ref->flags & CAPSEM_SEGMENT_FINAL) != 0;
        size_t len = ref->comp_len, need = len + (final ? 0 : STORED_HEAD + END_DATA);
        if (!capsem_inflate_grow(&buf, &cap, need)) break;
        if (!read_all(r->fd, buf, ref->at + CAPSEM_SEGMENT_HEADER_BYTES, len)) continue;
        if (!final) {
            memcpy(buf + len, end_head, STORED_HEAD);
            memset(buf + len + STORED_HEAD, 0, END_DATA);
        }
        ref->zlib_ok = (uint8_t)capsem_deflate_zlib_accepts(buf, need);
    }
    capsem_big_free(buf, cap);
    return NULL;
}

capsem_rules_ahead *capsem_rules_ahead_start(int fd, capsem_segment_ref *refs, size_t n, int *err) {
    capsem_rules_ahead *r = calloc(1, sizeof *r);
    if (!r) {
        *err = ENOMEM;
        return NULL;
    }
    r->refs = refs;
    r->n = n;
    r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        *err = errno;
        free(r);
        return NULL;
    }
    int e = pthread_create(&r->thread, NULL, run, r);
    if (e != 0) {
        close(r->fd);
        free(r);
        *err = e;
        return NULL;
    }
    return r;
}

void capsem_rules_ahead_wait(capsem_rules_ahead *r) {
    if (r && !r->joined) {
        pthread_join(r->thread, NULL);
        r->joined = 1;
    }
}

void capsem_rules_ahead_finish(capsem_rules_ahead *r) {
    if (!r) return;
    atomic_store(&r->stop, 1);
    capsem_rules_ahead_wait(r);
    close(r->fd);
    free(r);
}
