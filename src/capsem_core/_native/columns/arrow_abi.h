/* The Arrow C data interface and C stream interface: the three structures through which
 * columns cross from this module to pyarrow, polars, DuckDB or any other consumer in the
 * process, with no Arrow library linked. Their layout and the guard macros are fixed by the
 * specification (Arrow's "C data interface" and "C stream interface"): a consumer compiled
 * against its own copy reads ours, and the guards keep two copies from clashing.
 *
 * Ownership, as the specification words it: whoever holds a structure whose `release` is not
 * NULL must call it exactly once; `release` frees what the producer allocated (children
 * included, unless a consumer moved one out, which it marks by setting that child's
 * `release` to NULL) and then sets `release` to NULL itself. */
#ifndef CAPSEM_ARROW_ABI_H
#define CAPSEM_ARROW_ABI_H

#include <stdint.h>

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

#endif
