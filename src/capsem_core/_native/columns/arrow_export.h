/* Arrow structures built by this module, and who frees what (arrow_abi.h says the rules).
 *
 * Every ArrowArray node handed out (a record batch's struct array, each column, each union
 * child) holds one reference on the `cs_mem` that owns the buffers, and the node's own small
 * allocations (its buffer and child pointer arrays). Releasing a node releases the children
 * still in it, frees its allocations and drops its reference; the buffers go with the last
 * reference. So a consumer may keep one column and drop the rest of a batch, as the
 * specification allows, and each buffer lives exactly as long as some node still uses it.
 *
 * A `cs_mem` owns either malloc'd buffers (a scan's batches: freed without the GIL, from
 * whatever thread releases the last node) or, through its `drop` callback, something else
 * (a BodyBatch's Python buffer, whose reference the callback drops under the GIL). */
#ifndef CAPSEM_ARROW_EXPORT_H
#define CAPSEM_ARROW_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_abi.h"

typedef struct cs_mem cs_mem;
struct cs_mem {
    long refs;                  /* atomic */
    void (*drop)(cs_mem *);     /* NULL: free ptrs[] and the cs_mem itself */
    void *owner;                /* for `drop` */
    size_t n, cap;
    void **ptrs;
};

/* A cs_mem owning nothing yet (one reference, the caller's), or NULL. */
cs_mem *cs_mem_new(void);
/* Hand a malloc'd buffer to `m` (freed with it). 0, or -1 when memory ran out (then the
 * buffer is freed here). */
int cs_mem_take(cs_mem *m, void *p);
void cs_mem_ref(cs_mem *m);
void cs_mem_unref(cs_mem *m);

/* Fill `out` as a node of `length` values with `nbuf` buffers (at most 3) and `nkids`
 * children, referencing `m`. The children are zeroed structures the caller fills through
 * cs_array_child. 0, or -1 when memory ran out (`out` then stays released). */
int cs_array_node(struct ArrowArray *out, cs_mem *m, int64_t length, int64_t null_count, int nbuf,
                  const void *b0, const void *b1, const void *b2, int nkids);
struct ArrowArray *cs_array_child(struct ArrowArray *parent, int i);

/* Fill `out` as a schema node of `format` (copied) named `name` (copied; NULL for none) with
 * `nkids` zeroed children to fill through cs_schema_child. 0 or -1. */
int cs_schema_node(struct ArrowSchema *out, const char *format, const char *name, int64_t flags, int nkids);
struct ArrowSchema *cs_schema_child(struct ArrowSchema *parent, int i);

/* A deep copy of schema `src` into `out` (for a stream's get_schema, each call its own). */
int cs_schema_copy(const struct ArrowSchema *src, struct ArrowSchema *out);

/* The four callbacks of a stream this module hands out. */
typedef struct {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
} cs_stream_ops;

/* Fill `out` as a live stream of `ops` on `private_data`. */
void cs_stream_init(struct ArrowArrayStream *out, const cs_stream_ops *ops, void *private_data);

/* A stream of the one batch `array` (moved in: `array` is left released) of schema `schema`
 * (moved in too), for data already built whole. 0 or -1. */
int cs_stream_of_one(struct ArrowSchema *schema, struct ArrowArray *array, struct ArrowArrayStream *out);

/* Release `a` / `s` if it is live (release not NULL; NULL is none). */
void cs_array_release(struct ArrowArray *a);
void cs_schema_release(struct ArrowSchema *s);
void cs_stream_release(struct ArrowArrayStream *s);

#endif
