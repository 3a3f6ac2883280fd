/* Arrow structures built by this module (see arrow_export.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arrow_export.h"

cs_mem *cs_mem_new(void) {
    cs_mem *m = calloc(1, sizeof *m);
    if (m) m->refs = 1;
    return m;
}

int cs_mem_take(cs_mem *m, void *p) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        void **ptrs = realloc(m->ptrs, cap * sizeof *ptrs);
        if (!ptrs) {
            free(p);
            return -1;
        }
        m->ptrs = ptrs;
        m->cap = cap;
    }
    m->ptrs[m->n++] = p;
    return 0;
}

void cs_mem_ref(cs_mem *m) { __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED); }

void cs_mem_unref(cs_mem *m) {
    if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (m->drop) {
        m->drop(m); /* frees m too */
        return;
    }
    for (size_t i = 0; i < m->n; i++) free(m->ptrs[i]);
    free(m->ptrs);
    free(m);
}

/* A node's children: `n` zeroed structures of `size` bytes and the array of pointers to them
 * that Arrow walks (both NULL for none). 0 or -1. */
static int kids_new(void ***kids, void **structs, int n, size_t size) {
    *kids = NULL;
    *structs = NULL;
    if (n <= 0) return 0;
    *kids = calloc((size_t)n, sizeof **kids);
    *structs = calloc((size_t)n, size);
    if (!*kids || !*structs) {
        free(*kids);
        free(*structs);
        *kids = NULL;
        *structs = NULL;
        return -1;
    }
    for (int i = 0; i < n; i++) (*kids)[i] = (char *)*structs + (size_t)i * size;
    return 0;
}

/* Release the children still in a node (one moved out by the consumer is marked released),
 * then free them. */
static void kids_free(void **kids, void *structs, int64_t n, void (*release)(void *)) {
    for (int64_t i = 0; i < n; i++) release(kids[i]);
    free(structs);
    free(kids);
}

static void release_array_kid(void *a) { cs_array_release(a); }
static void release_schema_kid(void *s) { cs_schema_release(s); }

/* What an array node allocates for itself, besides the shared buffers. */
typedef struct {
    cs_mem *mem;
    const void *buffers[3];
    struct ArrowArray **kids;
    struct ArrowArray *kid_structs;
} array_node;

static void release_array(struct ArrowArray *a) {
    array_node *node = a->private_data;
    kids_free((void **)node->kids, node->kid_structs, a->n_children, release_array_kid);
    cs_mem_unref(node->mem);
    free(node);
    a->release = NULL;
}

int cs_array_node(struct ArrowArray *out, cs_mem *m, int64_t length, int64_t null_count, int nbuf,
                  const void *b0, const void *b1, const void *b2, int nkids) {
    memset(out, 0, sizeof *out);
    array_node *node = calloc(1, sizeof *node);
    if (!node) return -1;
    if (kids_new((void ***)&node->kids, (void **)&node->kid_structs, nkids, sizeof *node->kid_structs)) {
        free(node);
        return -1;
    }
    node->buffers[0] = b0;
    node->buffers[1] = b1;
    node->buffers[2] = b2;
    node->mem = m;
    cs_mem_ref(m);
    out->length = length;
    out->null_count = null_count;
    out->n_buffers = nbuf;
    out->n_children = nkids;
    out->buffers = node->buffers;
    out->children = node->kids;
    out->release = release_array;
    out->private_data = node;
    return 0;
}

struct ArrowArray *cs_array_child(struct ArrowArray *parent, int i) {
    return ((array_node *)parent->private_data)->kids[i];
}

typedef struct {
    char *format, *name;
    struct ArrowSchema **kids;
    struct ArrowSchema *kid_structs;
} schema_node;

static void release_schema(struct ArrowSchema *s) {
    schema_node *node = s->private_data;
    kids_free((void **)node->kids, node->kid_structs, s->n_children, release_schema_kid);
    free(node->format);
    free(node->name);
    free(node);
    s->release = NULL;
}

int cs_schema_node(struct ArrowSchema *out, const char *format, const char *name, int64_t flags, int nkids) {
    memset(out, 0, sizeof *out);
    schema_node *node = calloc(1, sizeof *node);
    if (!node) return -1;
    node->format = strdup(format);
    node->name = name ? strdup(name) : NULL;
    if (!node->format || (name && !node->name) ||
        kids_new((void ***)&node->kids, (void **)&node->kid_structs, nkids, sizeof *node->kid_structs)) {
        free(node->format);
        free(node->name);
        free(node);
        return -1;
    }
    out->format = node->format;
    out->name = node->name;
    out->flags = flags;
    out->n_children = nkids;
    out->children = node->kids;
    out->release = release_schema;
    out->private_data = node;
    return 0;
}

struct ArrowSchema *cs_schema_child(struct ArrowSchema *parent, int i) {
    return ((schema_node *)parent->private_data)->kids[i];
}

int cs_schema_copy(const struct ArrowSchema *src, struct ArrowSchema *out) {
    if (cs_schema_node(out, src->format, src->name, src->flags, (int)src->n_children)) return -1;
    for (int64_t i = 0; i < src->n_children; i++) {
        if (cs_schema_copy(src->children[i], cs_schema_child(out, (int)i))) {
            cs_schema_release(out);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    struct ArrowSchema schema;
    struct ArrowArray array;
} one_batch;

static int one_schema(struct ArrowArrayStream *s, struct ArrowSchema *out) {
    return cs_schema_copy(&((one_batch *)s->private_data)->schema, out) ? ENOMEM : 0;
}

static int one_next(struct ArrowArrayStream *s, struct ArrowArray *out) {
    one_batch *b = s->private_data;
    *out = b->array; /* the batch once, then a released array: the end */
    memset(&b->array, 0, sizeof b->array);
    return 0;
}

static const char *one_error(struct ArrowArrayStream *s) { return NULL; }

static void one_release(struct ArrowArrayStream *s) {
    one_batch *b = s->private_data;
    cs_array_release(&b->array);
    cs_schema_release(&b->schema);
    free(b);
    s->release = NULL;
}

int cs_stream_of_one(struct ArrowSchema *schema, struct ArrowArray *array, struct ArrowArrayStream *out) {
    memset(out, 0, sizeof *out);
    one_batch *b = calloc(1, sizeof *b);
    if (!b) return -1;
    b->schema = *schema;
    b->array = *array;
    memset(schema, 0, sizeof *schema);
    memset(array, 0, sizeof *array);
    static const cs_stream_ops ops = {one_schema, one_next, one_error, one_release};
    cs_stream_init(out, &ops, b);
    return 0;
}

void cs_stream_init(struct ArrowArrayStream *out, const cs_stream_ops *ops, void *private_data) {
    out->get_schema = ops->get_schema;
    out->get_next = ops->get_next;
    out->get_last_error = ops->get_last_error;
    out->release = ops->release;
    out->private_data = private_data;
}

void cs_array_release(struct ArrowArray *a) {
    if (a && a->release) a->release(a);
}

void cs_schema_release(struct ArrowSchema *s) {
    if (s && s->release) s->release(s);
}

void cs_stream_release(struct ArrowArrayStream *s) {
    if (s && s->release) s->release(s);
}
