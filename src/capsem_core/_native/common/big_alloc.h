/* Working arrays that may grow large (a scan's columns, a hash table's slots): from a few
 * MiB up, mapped anonymously in whole 2 MiB units (returned to the system when freed, and
 * grown in place by mremap where there is one); smaller ones from the C heap. They are not
 * offered for huge pages: with the kernel's usual THP "defrag=madvise", each such fault may
 * compact memory first, and a fresh capsem-ledger check of a million-body ledger spent up to
 * 0.5 s more in the kernel that way (its median 1.82 s against 1.63 s without). Every block
 * is zeroed and freed with the size it has. */
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
