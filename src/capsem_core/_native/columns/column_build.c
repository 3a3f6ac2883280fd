/* One record batch's columns (see column_build.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "column_build.h"

/* Linux 5.14's advice to fault a range in for writing, in one call; older kernels refuse it
 * (EINVAL), and the pages then fault in one by one as they are written. */
#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23
#endif
#define PREFAULT_BYTES ((size_t)1 << 20)

/* Fault in the whole pages of a buffer about to be filled end to end: one system call instead
 * of a fault per page (in a VM each costs an exit and entry besides the page itself). */
static void prefault(void *p, size_t n) {
#ifdef MADV_POPULATE_WRITE
    if (n < PREFAULT_BYTES) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)p + page - 1) & ~(page - 1), to = ((uintptr_t)p + n) & ~(page - 1);
    if (to > from) (void)madvise((void *)from, to - from, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}

const char *const CS_CLASS_NAMES[CS_CLASSES] = {"null", "integer", "real", "text", "text_bytes", "blob"};
static const char *const FORMATS[CS_CLASSES] = {"n", "l", "g", "u", "z", "z"};

const char *cs_class_format(uint8_t cls) { return cls < CS_CLASSES ? FORMATS[cls] : "n"; }

static int is_var(uint8_t cls) { return cls == CS_TEXT || cls == CS_TEXT_BYTES || cls == CS_BLOB; }

void cs_layout_of(cs_layout *lay, uint8_t mask, uint8_t empty) {
    memset(lay, 0, sizeof *lay);
    memset(lay->child, -1, sizeof lay->child);
    lay->mask = mask;
    uint8_t values = mask & (uint8_t)~(1u << CS_NULL);
    if (values == 0) {
        lay->plain = empty;
        return;
    }
    if ((values & (values - 1)) == 0) {
        lay->plain = (uint8_t)__builtin_ctz(values);
        return;
    }
    lay->plain = CS_UNION;
    for (uint8_t k = 0; k < CS_CLASSES; k++)
        if (mask & (1u << k)) lay->child[k] = (int8_t)lay->nchild++;
}

/* ---- typed vectors ----------------------------------------------------------------------- */

/* `exact`: the caller knows the data's size, and the buffer will be filled to its end. */
static int vec_init(cs_vec *v, uint8_t cls, int64_t cap, int64_t data_cap, int with_valid, int exact) {
    memset(v, 0, sizeof *v);
    v->cls = cls;
    if (cap < 1) cap = 1;
    v->cap = cap;
    if (cls == CS_NULL) return 0;
    if (with_valid && !(v->valid = calloc((size_t)(cap + 7) / 8, 1))) return -1;
    if (cls == CS_INTEGER || cls == CS_REAL) {
        if (!(v->values = malloc((size_t)cap * 8))) return -1;
    } else {
        data_cap += CS_DATA_SLACK;
        v->data_cap = data_cap;
        if (!(v->offs = malloc((size_t)(cap + 1) * sizeof *v->offs)) || !(v->data = malloc((size_t)data_cap)))
            return -1;
        v->offs[0] = 0;
        if (exact) prefault(v->data, (size_t)data_cap);
    }
    return 0;
}

static void vec_free(cs_vec *v) {
    free(v->valid);
    free(v->values);
    free(v->offs);
    free(v->data);
    memset(v, 0, sizeof *v);
}

static int vec_grow(cs_vec *v) {
    int64_t cap = v->cap * 2;
    if (v->cls == CS_NULL) {
        v->cap = cap;
        return 0;
    }
    if (v->valid) {
        uint8_t *b = realloc(v->valid, (size_t)(cap + 7) / 8);
        if (!b) return -1;
        memset(b + (v->cap + 7) / 8, 0, (size_t)((cap + 7) / 8 - (v->cap + 7) / 8));
        v->valid = b;
    }
    if (v->cls == CS_INTEGER || v->cls == CS_REAL) {
        void *p = realloc(v->values, (size_t)cap * 8);
        if (!p) return -1;
        v->values = p;
    } else {
        int32_t *o = realloc(v->offs, (size_t)(cap + 1) * sizeof *o);
        if (!o) return -1;
        v->offs = o;
    }
    v->cap = cap;
    return 0;
}

static inline int vec_room(cs_vec *v) { return v->n < v->cap ? 0 : vec_grow(v); }

static int vec_null(cs_vec *v) {
    if (vec_room(v)) return -1;
    if (v->cls == CS_INTEGER || v->cls == CS_REAL) {
        ((int64_t *)v->values)[v->n] = 0;
    } else if (v->cls != CS_NULL) {
        v->offs[v->n + 1] = (int32_t)v->data_len;
    }
    v->n++;
    v->nulls++;
    return 0;
}

static int vec_i64(cs_vec *v, int64_t x) {
    if (vec_room(v)) return -1;
    cs_vec_valid(v);
    ((int64_t *)v->values)[v->n++] = x;
    return 0;
}

static int vec_f64(cs_vec *v, double x) {
    if (vec_room(v)) return -1;
    cs_vec_valid(v);
    ((double *)v->values)[v->n++] = x;
    return 0;
}

static uint8_t *vec_bytes(cs_vec *v, uint32_t len) {
    if (vec_room(v)) return NULL;
    if ((uint64_t)v->data_len + len > INT32_MAX) return NULL; /* the batch is cut long before */
    if (v->data_len + (int64_t)len + CS_DATA_SLACK > v->data_cap) {
        int64_t cap = v->data_cap * 2;
        while (cap < v->data_len + (int64_t)len + CS_DATA_SLACK) cap *= 2;
        if (cap > (int64_t)INT32_MAX + 1 + CS_DATA_SLACK) cap = (int64_t)INT32_MAX + 1 + CS_DATA_SLACK;
        uint8_t *d = realloc(v->data, (size_t)cap);
        if (!d) return NULL;
        v->data = d;
        v->data_cap = cap;
    }
    uint8_t *at = v->data + v->data_len;
    cs_vec_valid(v);
    v->data_len += len;
    v->offs[++v->n] = (int32_t)v->data_len;
    return at;
}

/* ---- columns ----------------------------------------------------------------------------- */

int cs_col_init(cs_col *c, const cs_layout *lay, int64_t rows, const int64_t *counts, const int64_t *bytes) {
    memset(c, 0, sizeof *c);
    c->lay = lay;
    if (rows < 1) rows = 1;
    if (lay->plain != CS_UNION) {
        int64_t data = 0;
        if (bytes) data = bytes[lay->plain];
        else if (is_var(lay->plain)) data = rows * 16;
        return vec_init(&c->plain, lay->plain, rows, data, 1, bytes != NULL);
    }
    c->cap = rows;
    c->types = malloc((size_t)rows);
    c->uoffs = malloc((size_t)rows * sizeof *c->uoffs);
    if (!c->types || !c->uoffs) return -1;
    for (uint8_t k = 0; k < CS_CLASSES; k++) {
        if (lay->child[k] < 0) continue;
        int64_t n = counts ? counts[k] : 64;
        int64_t data = bytes ? bytes[k] : (is_var(k) ? 1024 : 0);
        if (vec_init(&c->kids[k], k, n, data, 0, bytes != NULL)) return -1;
    }
    return 0;
}

void cs_col_free(cs_col *c) {
    vec_free(&c->plain);
    free(c->types);
    free(c->uoffs);
    for (int k = 0; k < CS_CLASSES; k++) vec_free(&c->kids[k]);
    memset(c, 0, sizeof *c);
}

/* The union slot for a value of class `cls`: its type id and offset in the child. */
static cs_vec *union_slot(cs_col *c, uint8_t cls) {
    if (c->lay->child[cls] < 0) return NULL; /* a class the first pass did not see */
    if (c->n == c->cap) {
        int64_t cap = c->cap * 2;
        int8_t *t = realloc(c->types, (size_t)cap);
        if (!t) return NULL;
        c->types = t;
        int32_t *o = realloc(c->uoffs, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        c->uoffs = o;
        c->cap = cap;
    }
    cs_vec *kid = &c->kids[cls];
    c->types[c->n] = (int8_t)cls;
    c->uoffs[c->n] = (int32_t)kid->n;
    c->n++;
    return kid;
}

int cs_col_add_null(cs_col *c) {
    if (c->lay->plain != CS_UNION) return vec_null(&c->plain);
    cs_vec *kid = union_slot(c, CS_NULL);
    if (!kid) return -1;
    kid->n++;
    return 0;
}

int cs_col_add_int(cs_col *c, int64_t v) {
    if (c->lay->plain != CS_UNION) return c->plain.cls == CS_INTEGER ? vec_i64(&c->plain, v) : -1;
    cs_vec *kid = union_slot(c, CS_INTEGER);
    return kid ? vec_i64(kid, v) : -1;
}

int cs_col_add_real(cs_col *c, double v) {
    if (c->lay->plain != CS_UNION) return c->plain.cls == CS_REAL ? vec_f64(&c->plain, v) : -1;
    cs_vec *kid = union_slot(c, CS_REAL);
    return kid ? vec_f64(kid, v) : -1;
}

uint8_t *cs_col_add_bytes(cs_col *c, uint8_t cls, uint32_t len) {
    if (c->lay->plain != CS_UNION) return c->plain.cls == cls ? vec_bytes(&c->plain, len) : NULL;
    cs_vec *kid = union_slot(c, cls);
    return kid ? vec_bytes(kid, len) : NULL;
}

/* ---- export ------------------------------------------------------------------------------ */

/* Move the buffers of `v` into `m` and fill `out` with them. */
static int export_vec(cs_vec *v, cs_mem *m, struct ArrowArray *out) {
    if (v->cls == CS_NULL) return cs_array_node(out, m, v->n, v->n, 0, NULL, NULL, NULL, 0);
    const void *valid = v->nulls ? v->valid : NULL;
    int rc;
    if (v->cls == CS_INTEGER || v->cls == CS_REAL)
        rc = cs_array_node(out, m, v->n, v->nulls, 2, valid, v->values, NULL, 0);
    else
        rc = cs_array_node(out, m, v->n, v->nulls, 3, valid, v->offs, v->data, 0);
    void *owned[4] = {v->valid, v->values, v->offs, v->data};
    memset(v, 0, sizeof *v);
    for (int k = 0; k < 4; k++)
        if (owned[k] && cs_mem_take(m, owned[k])) rc = -1;
    return rc;
}

static int export_col(cs_col *c, cs_mem *m, struct ArrowArray *out) {
    if (c->lay->plain != CS_UNION) return export_vec(&c->plain, m, out);
    int rc = cs_array_node(out, m, c->n, 0, 2, c->types, c->uoffs, NULL, c->lay->nchild);
    void *owned[2] = {c->types, c->uoffs};
    c->types = NULL;
    c->uoffs = NULL;
    for (int k = 0; k < 2; k++)
        if (owned[k] && cs_mem_take(m, owned[k])) rc = -1;
    for (uint8_t k = 0; k < CS_CLASSES && rc == 0; k++)
        if (c->lay->child[k] >= 0) rc = export_vec(&c->kids[k], m, cs_array_child(out, c->lay->child[k]));
    return rc;
}

int cs_batch_export(cs_col *cols, size_t ncols, int64_t rows, struct ArrowArray *out) {
    cs_mem *m = cs_mem_new();
    if (!m) return -1;
    int rc = cs_array_node(out, m, rows, 0, 1, NULL, NULL, NULL, (int)ncols);
    for (size_t i = 0; i < ncols && rc == 0; i++) rc = export_col(&cols[i], m, cs_array_child(out, (int)i));
    cs_mem_unref(m); /* the nodes hold it now */
    if (rc) cs_array_release(out);
    return rc;
}

int cs_schema_export(const cs_layout *lays, const char *const *names, size_t ncols, struct ArrowSchema *out) {
    if (cs_schema_node(out, "+s", "", 0, (int)ncols)) return -1;
    for (size_t i = 0; i < ncols; i++) {
        const cs_layout *lay = &lays[i];
        struct ArrowSchema *col = cs_schema_child(out, (int)i);
        if (lay->plain != CS_UNION) {
            if (cs_schema_node(col, cs_class_format(lay->plain), names[i], ARROW_FLAG_NULLABLE, 0)) goto fail;
            continue;
        }
        char format[64] = "+ud:";
        size_t at = 4;
        for (uint8_t k = 0; k < CS_CLASSES; k++)
            if (lay->child[k] >= 0)
                at += (size_t)snprintf(format + at, sizeof format - at, "%s%u", at > 4 ? "," : "", k);
        if (cs_schema_node(col, format, names[i], ARROW_FLAG_NULLABLE, lay->nchild)) goto fail;
        for (uint8_t k = 0; k < CS_CLASSES; k++) {
            if (lay->child[k] < 0) continue;
            if (cs_schema_node(cs_schema_child(col, lay->child[k]), FORMATS[k], CS_CLASS_NAMES[k],
                               ARROW_FLAG_NULLABLE, 0))
                goto fail;
        }
    }
    return 0;
fail:
    cs_schema_release(out);
    return -1;
}
