/* A bounded window of a read-only file map's resident pages, for one reader of session.db's
 * pages (the page map's walk, one records scan).
 *
 * A map's pages stay in the process once touched (its resident size, what an OOM killer
 * counts) until they are unmapped or dropped; a walk over every page of a 6 GB session.db
 * would keep 6 GB resident. The reader notes each page it reads here; the map is cut into
 * chunks of 2 MiB, the most the kernel maps on one fault (a large folio of the page cache, up
 * to a page table's span, where the filesystem keeps them: XFS, ext4 on recent kernels; else
 * 64 KiB around the fault), and once the reader has touched `limit` chunks since the last
 * drop, every chunk it touched is dropped from the process (madvise(MADV_DONTNEED) on the
 * runs of adjacent chunks: the page cache keeps the pages, a later read faults them back in).
 * So one reader keeps at most `limit` chunks mapped (3 when `limit` is smaller), however large
 * the file and in whatever order its trees lie. (Chunks of 64 KiB left the rest of each folio
 * mapped: a reader going from tree to tree kept 150 MiB of a 3 GB session.db resident past its
 * window.)
 *
 * A drop keeps two chunks in the window: the one just touched, which the reader is about to
 * read, and the one the reader pinned (`capsem_window_pin`: a leaf whose cells it reads between
 * reads of other pages). Dropped, either would be faulted straight back in without the window
 * knowing, and stay mapped for good.
 *
 * Dropping never changes what is read: the map is read-only and shared, so a page dropped
 * under another reader (another thread's window on the same map) is only faulted back in.
 * Where the system has no MADV_DONTNEED nothing is dropped. Header-only: its users (page_map.c,
 * page_records.c, the overflow reads of page_payload.h, the column scans' scan_leaves.c)
 * include it. */
#ifndef CAPSEM_PAGE_WINDOW_H
#define CAPSEM_PAGE_WINDOW_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define CAPSEM_WINDOW_CHUNK_SHIFT 21u
#define CAPSEM_WINDOW_CHUNK (1u << CAPSEM_WINDOW_CHUNK_SHIFT)
/* The default resident window of one reader (PageFile's unless it is given another). */
#define CAPSEM_WINDOW_DEFAULT_BYTES (32u << 20)

typedef struct {
    const uint8_t *base;
    uint64_t size;     /* bytes mapped */
    uint64_t *seen;    /* one bit per chunk: touched since the last drop */
    uint32_t *touched; /* those chunks, in the order first touched */
    uint32_t ntouched, limit;
    uint32_t pinned;   /* the pinned chunk + 1 (0: none) */
    uint64_t drops;    /* drops so far (for tests and tuning) */
} capsem_page_window;

#define CAPSEM_WINDOW_NONE UINT32_MAX

static int capsem_window_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Drop every chunk touched since the last drop but `keep` and the pinned one (those stay in the
 * window), one madvise per run of adjacent chunks. */
static __attribute__((noinline, unused)) void capsem_window_drop_but(capsem_page_window *w, uint32_t keep) {
    if (!w->ntouched) return;
    qsort(w->touched, w->ntouched, sizeof *w->touched, capsem_window_cmp);
    long ps = sysconf(_SC_PAGESIZE);
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096u;
    uint64_t mapped = (w->size + page - 1) / page * page;
    uint32_t pin = w->pinned ? w->pinned - 1 : CAPSEM_WINDOW_NONE;
    uint32_t kept[2], nkept = 0;
    for (uint32_t i = 0; i < w->ntouched;) {
        uint32_t first = w->touched[i];
        if (first == keep || first == pin) {
            kept[nkept++] = first;
            i++;
            continue;
        }
        uint32_t last = first;
        while (++i < w->ntouched && w->touched[i] == last + 1 && w->touched[i] != keep && w->touched[i] != pin)
            last = w->touched[i];
        for (uint32_t c = first; c <= last; c++) w->seen[c >> 6] &= ~(1ull << (c & 63));
#if defined(MADV_DONTNEED)
        uint64_t from = (uint64_t)first << CAPSEM_WINDOW_CHUNK_SHIFT;
        uint64_t to = ((uint64_t)last + 1) << CAPSEM_WINDOW_CHUNK_SHIFT;
        if (to > mapped) to = mapped;
        if (from < to) madvise((void *)(w->base + from), (size_t)(to - from), MADV_DONTNEED);
#endif
    }
    w->ntouched = 0;
    for (uint32_t k = 0; k < nkept; k++) w->touched[w->ntouched++] = kept[k];
    w->drops++;
}

/* Drop every chunk touched since the last drop, the pinned one too. */
static __attribute__((unused)) void capsem_window_drop(capsem_page_window *w) {
    w->pinned = 0;
    capsem_window_drop_but(w, CAPSEM_WINDOW_NONE);
}

/* A window over the map [base, base + size) keeping at most `bytes` resident (rounded to
 * whole chunks, at least one); 0, or -1 when memory ran out (then the window is inert:
 * nothing is tracked or dropped, and the reader reads as before). */
static __attribute__((unused)) int capsem_window_init(capsem_page_window *w, const uint8_t *base, uint64_t size,
                                                       uint64_t bytes) {
    uint64_t chunks = (size >> CAPSEM_WINDOW_CHUNK_SHIFT) + 1;
    uint64_t limit = bytes >> CAPSEM_WINDOW_CHUNK_SHIFT;
    if (limit < 1) limit = 1;
    if (limit > chunks) limit = chunks;
    w->base = base;
    w->size = size;
    w->ntouched = 0;
    w->pinned = 0;
    w->drops = 0;
    w->limit = (uint32_t)limit;
    w->seen = calloc((size_t)((chunks + 63) / 64), sizeof *w->seen);
    /* room for `limit` chunks, or the three a drop may keep and the one touched after it */
    w->touched = malloc((size_t)(limit < 3 ? 3 : limit) * sizeof *w->touched);
    if (chunks > UINT32_MAX || !w->seen || !w->touched) {
        free(w->seen);
        free(w->touched);
        w->seen = NULL;
        w->touched = NULL;
        return -1;
    }
    return 0;
}

/* Drop what the reader still holds and free the window. */
static __attribute__((unused)) void capsem_window_end(capsem_page_window *w) {
    if (w->seen) capsem_window_drop(w);
    free(w->seen);
    free(w->touched);
    w->seen = NULL;
    w->touched = NULL;
}

/* Note the page at byte `offset` of the map (< size) as read: its chunk joins the window. */
static inline void capsem_window_touch(capsem_page_window *w, uint64_t offset) {
    if (!w || !w->seen) return;
    uint64_t c = offset >> CAPSEM_WINDOW_CHUNK_SHIFT;
    uint64_t bit = 1ull << (c & 63);
    if (w->seen[c >> 6] & bit) return;
    w->seen[c >> 6] |= bit;
    w->touched[w->ntouched++] = (uint32_t)c;
    if (w->ntouched >= w->limit) capsem_window_drop_but(w, (uint32_t)c);
}

/* Touch the page at `offset` and pin its chunk (in place of the one pinned before): no drop
 * takes it until another is pinned or the window ends. */
static inline void capsem_window_pin(capsem_page_window *w, uint64_t offset) {
    if (!w || !w->seen) return;
    w->pinned = (uint32_t)(offset >> CAPSEM_WINDOW_CHUNK_SHIFT) + 1;
    capsem_window_touch(w, offset);
}

#endif
