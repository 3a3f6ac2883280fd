/* Opening and mapping session.bodies (facts §4.1). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive_file.h"

static int map_size(capsem_archive_file *f, uint64_t size) {
    if (f->map) {
        munmap((void *)f->map, (size_t)f->size);
        f->map = NULL;
        f->size = 0;
    }
    if (size == 0) return 0;
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, f->fd, 0);
    if (p == MAP_FAILED) return errno ? errno : EIO;
    f->map = p;
    f->size = size;
    return 0;
}

capsem_open_status capsem_file_open(capsem_archive_file *f, const char *path, int *errno_out) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    *errno_out = 0;
    struct stat st;
    if (lstat(path, &st) != 0) {
        *errno_out = errno;
        return CAPSEM_OPEN_IO;
    }
    if (S_ISLNK(st.st_mode)) return CAPSEM_OPEN_SYMLINK;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        *errno_out = errno;
        return errno == ELOOP ? CAPSEM_OPEN_SYMLINK : CAPSEM_OPEN_IO;
    }
    if (fstat(fd, &st) != 0) {
        *errno_out = errno;
        close(fd);
        return CAPSEM_OPEN_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return CAPSEM_OPEN_NOT_REGULAR;
    }
    f->fd = fd;
    f->dev = (uint64_t)st.st_dev;
    f->ino = (uint64_t)st.st_ino;
    int e = map_size(f, (uint64_t)st.st_size);
    if (e) {
        *errno_out = e;
        capsem_file_close(f);
        return CAPSEM_OPEN_IO;
    }
    return CAPSEM_OPEN_OK;
}

int capsem_file_refresh(capsem_archive_file *f) {
    struct stat st;
    if (f->fd < 0) return EBADF;
    if (fstat(f->fd, &st) != 0) return errno;
    if ((uint64_t)st.st_size == f->size) return 0;
    /* Shrinking is remapped too: touching mapped pages past a new end would fault. */
    return map_size(f, (uint64_t)st.st_size);
}

void capsem_file_close(capsem_archive_file *f) {
    if (f->map) munmap((void *)f->map, (size_t)f->size);
    f->map = NULL;
    f->size = 0;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

int capsem_file_replaced(const capsem_archive_file *f, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 1;
    return (uint64_t)st.st_dev != f->dev || (uint64_t)st.st_ino != f->ino;
}

void capsem_map_advise(const uint8_t *base, uint64_t size, uint64_t from, uint64_t to, int advice, int inner) {
    if (advice == CAPSEM_ADVICE_NONE) return;
    long page_size = sysconf(_SC_PAGESIZE);
    uint64_t page = page_size > 0 ? (uint64_t)page_size : 4096;
    if (to > size) to = size;
    if (from >= to) return;
    uint64_t a = inner ? (from + page - 1) / page * page : from / page * page;
    uint64_t b = inner ? to / page * page : (to + page - 1) / page * page;
    if (b > a) madvise((void *)(base + a), (size_t)(b - a), advice);
}

void capsem_map_drop(const uint8_t *base, uint64_t size, uint64_t from, uint64_t to) {
    if (to <= from) return;
    uint64_t a = from > CAPSEM_FAULT_SPAN ? from - CAPSEM_FAULT_SPAN : 0;
    uint64_t b = to > UINT64_MAX - CAPSEM_FAULT_SPAN ? UINT64_MAX : to + CAPSEM_FAULT_SPAN;
    capsem_map_advise(base, size, a, b, ADVICE_DONTNEED, 0);
}

void capsem_drop_batch_flush(capsem_drop_batch *d, const uint8_t *base, uint64_t size) {
    if (d->hi > d->lo) capsem_map_drop(base, size, d->lo, d->hi);
    d->lo = d->hi = 0;
}

void capsem_drop_batch_add(capsem_drop_batch *d, const uint8_t *base, uint64_t size, uint64_t from, uint64_t to) {
    if (to <= from) return;
    if (d->hi > d->lo) {
        uint64_t lo = from < d->lo ? from : d->lo, hi = to > d->hi ? to : d->hi;
        if (hi - lo > CAPSEM_DROP_BATCH) {
            capsem_drop_batch_flush(d, base, size); /* beyond the span's reach: start another */
        } else {
            d->lo = lo;
            d->hi = hi;
            if (hi - lo == CAPSEM_DROP_BATCH) capsem_drop_batch_flush(d, base, size);
            return;
        }
    }
    d->lo = from;
    d->hi = to;
    if (to - from >= CAPSEM_DROP_BATCH) capsem_drop_batch_flush(d, base, size);
}
