/* Working arrays that may grow large (a scan's columns, a hash table's slots): from a few
 * MiB up, mapped anonymously in whole 2 MiB units (returned to the system when freed, and
 * grown in place by mremap where there is one); smaller ones from the C heap. Every block
 * is zeroed and freed with the size it has.
 *
 * Only tables read at random (capsem_big_alloc_table: the text codes' slots and entries) are
 * offered huge pages, where a TLB miss per probe is what they save. Arrays filled in order
 * are not: with the kernel's usual THP "defrag=madvise" each such fault may compact memory
 * first, and for them that costs more than the faults it saves (docs/performance.md, "Huge
 * pages for working arrays"). */
#ifndef CAPSEM_BIG_ALLOC_H
#define CAPSEM_BIG_ALLOC_H

#include <stddef.h>

/* `size` zeroed bytes, or NULL. */
void *capsem_big_alloc(size_t size);
/* The same, offered huge pages when large (a table probed at random). */
void *capsem_big_alloc_table(size_t size);
/* Offer a block of `size` bytes huge pages when it is large (after a capsem_big_realloc of a
 * table, which may have moved it from the C heap). */
void capsem_big_offer_huge(void *p, size_t size);
/* Grow (or shrink) a block from capsem_big_alloc of `old` bytes to `size`, keeping its bytes;
 * NULL (the old block untouched) when memory ran out. */
void *capsem_big_realloc(void *p, size_t old, size_t size);
void capsem_big_free(void *p, size_t size);

#endif
