/* Working arrays that may grow large (a scan's columns, a hash table's slots): from a few
 * MiB up, mapped anonymously in whole 2 MiB units and offered to the kernel for huge pages,
 * so a million-row array costs a few page faults instead of thousands and random reads into
 * a large table miss the TLB far less (where huge pages are off, or on macOS, they are
 * ordinary pages); smaller ones from the C heap. Every block is zeroed and freed with the
 * size it has. */
#ifndef CAPSEM_BIG_ALLOC_H
#define CAPSEM_BIG_ALLOC_H

#include <stddef.h>

/* `size` zeroed bytes, or NULL. */
void *capsem_big_alloc(size_t size);
/* Grow (or shrink) a block from capsem_big_alloc of `old` bytes to `size`, keeping its bytes;
 * NULL (the old block untouched) when memory ran out. */
void *capsem_big_realloc(void *p, size_t old, size_t size);
void capsem_big_free(void *p, size_t size);

#endif
