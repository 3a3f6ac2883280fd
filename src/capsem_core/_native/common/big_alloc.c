/* Large working arrays (see big_alloc.h). Below BIG bytes a block is the C heap's. Which a
 * block is follows from its size, so the caller passes the size back. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "big_alloc.h"

#define UNIT ((size_t)2 << 20)
#define BIG ((size_t)4 << 20)

static size_t rounded(size_t size) { return (size + UNIT - 1) / UNIT * UNIT; }
static int is_big(size_t size) { return size >= BIG; }

void *capsem_big_alloc(size_t size) {
    if (!is_big(size)) return calloc(1, size ? size : 1);
    size_t n = rounded(size);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void capsem_big_offer_huge(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    if (p && is_big(size)) madvise(p, rounded(size), MADV_HUGEPAGE);
#else
    (void)p;
    (void)size;
#endif
}

void *capsem_big_alloc_table(size_t size) {
    void *p = capsem_big_alloc(size);
    capsem_big_offer_huge(p, size);
    return p;
}

void *capsem_big_realloc(void *p, size_t old, size_t size) {
    if (!p) return capsem_big_alloc(size);
    if (!is_big(old) && !is_big(size)) {
        void *q = realloc(p, size ? size : 1);
        if (q && size > old) memset((char *)q + old, 0, size - old);
        return q;
    }
#if defined(MREMAP_MAYMOVE)
    if (is_big(old) && is_big(size)) {
        void *q = mremap(p, rounded(old), rounded(size), MREMAP_MAYMOVE);
        return q == MAP_FAILED ? NULL : q;
    }
#endif
    void *q = capsem_big_alloc(size);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    capsem_big_free(p, old);
    return q;
}

void capsem_big_free(void *p, size_t size) {
    if (!p) return;
    if (is_big(size))
        munmap(p, rounded(size));
    else
        free(p);
}
