/* An open session.bodies file and its memory map, refreshed when the file grows (a writer
 * may append while we read) and never read past the mapped size. */
#ifndef CAPSEM_ARCHIVE_FILE_H
#define CAPSEM_ARCHIVE_FILE_H

#include <stdint.h>
#include <sys/types.h>

typedef struct {
    int fd;
    const uint8_t *map;
    uint64_t size; /* bytes mapped (the file size at the last refresh) */
    uint64_t dev;
    uint64_t ino;
} capsem_archive_file;

typedef enum {
    CAPSEM_OPEN_OK = 0,
    CAPSEM_OPEN_SYMLINK = 1,     /* the path is a symlink: refused */
    CAPSEM_OPEN_NOT_REGULAR = 2, /* a directory, device, fifo ... */
    CAPSEM_OPEN_IO = 3,          /* errno says why */
} capsem_open_status;

/* lstat (refusing a symlink), open O_RDONLY|O_NOFOLLOW|O_CLOEXEC|O_NONBLOCK, require a regular
 * file, record (st_dev, st_ino) and map the whole file. *errno_out is set on CAPSEM_OPEN_IO. */
capsem_open_status capsem_file_open(capsem_archive_file *f, const char *path, int *errno_out);

/* fstat and re-map when the size changed. Returns 0 or an errno. The old map pointer is
 * invalid afterwards. */
int capsem_file_refresh(capsem_archive_file *f);

void capsem_file_close(capsem_archive_file *f);

/* madvise advice, where the system defines it: advice only changes speed and resident size,
 * never what is read, so where one is missing (CAPSEM_ADVICE_NONE) nothing is asked. */
#include <sys/mman.h>
#define CAPSEM_ADVICE_NONE (-1)
#if defined(MADV_WILLNEED)
#define ADVICE_WILLNEED MADV_WILLNEED
#else
#define ADVICE_WILLNEED CAPSEM_ADVICE_NONE
#endif
#if defined(MADV_DONTNEED)
#define ADVICE_DONTNEED MADV_DONTNEED
#else
#define ADVICE_DONTNEED CAPSEM_ADVICE_NONE
#endif
#if defined(MADV_SEQUENTIAL)
#define ADVICE_SEQUENTIAL MADV_SEQUENTIAL
#else
#define ADVICE_SEQUENTIAL CAPSEM_ADVICE_NONE
#endif

/* madvise(advice) on the pages of [from, to) within a map of `size` bytes at base: the pages
 * covering it, or with `inner` only the pages wholly inside it (a page shared with a
 * neighbouring extent another thread may be reading is left alone). */
void capsem_map_advise(const uint8_t *base, uint64_t size, uint64_t from, uint64_t to, int advice, int inner);

/* Drop the pages a reader of [from, to) left in the process, once it is done with them: the
 * pages covering it and CAPSEM_FAULT_SPAN on each side, where the kernel maps pages from the
 * page cache around each fault (a neighbouring extent's; another thread still reading one
 * only faults it back in). Without the margins each extent's first fault would leave up to a
 * span of the extent before it mapped for good, a third of a small-body archive. */
#define CAPSEM_FAULT_SPAN (64u << 10)
void capsem_map_drop(const uint8_t *base, uint64_t size, uint64_t from, uint64_t to);

/* The ranges one reader finishes, merged into one span and dropped (capsem_map_drop) once it
 * covers CAPSEM_DROP_BATCH bytes, when a range lies beyond that reach, and at the end: each
 * madvise(MADV_DONTNEED) in a threaded process flushes the other cores' TLBs, so a drop per
 * finished extent cost more than the memory it gave back. A span may cover a range another
 * thread is still reading; that range only faults back in. */
#define CAPSEM_DROP_BATCH (32u << 20)
typedef struct {
    uint64_t lo, hi; /* empty when lo == hi */
} capsem_drop_batch;
void capsem_drop_batch_add(capsem_drop_batch *d, const uint8_t *base, uint64_t size, uint64_t from, uint64_t to);
void capsem_drop_batch_flush(capsem_drop_batch *d, const uint8_t *base, uint64_t size);

/* 1 when the path no longer names the file we opened (renamed over, deleted, unreadable). */
int capsem_file_replaced(const capsem_archive_file *f, const char *path);

#endif
